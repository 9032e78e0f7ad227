package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestUpRestartKeepsTheMesh checks that up with no file on a data
// directory that holds a mesh runs that mesh, not the bundled example.
func TestUpRestartKeepsTheMesh(t *testing.T) {
	data := t.TempDir()
	path := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(path, []byte(smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	plans := func(args ...string) map[string]json.RawMessage {
		t.Helper()
		args = append([]string{"up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)
		out, _, err := run(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var kept struct {
			Plans map[string]json.RawMessage `json:"plans"`
		}
		if err := json.Unmarshal([]byte(out), &kept); err != nil {
			t.Fatalf("%v printed %s: %v", args, out, err)
		}
		return kept.Plans
	}
	if got := plans(path); len(got) != 1 || got["control.mesh-vault"] == nil {
		t.Fatalf("up small.yaml kept plans %v; want control.mesh-vault only", got)
	}
	if got := plans(); len(got) != 1 || got["control.mesh-vault"] == nil {
		t.Errorf("up with no file on a data directory holding a mesh kept plans %v; want control.mesh-vault only, not the bundled example", got)
	}
}

func TestListenWarning(t *testing.T) {
	for _, tc := range []struct {
		listen string
		warns  bool
	}{
		{"127.0.0.1:4222", false}, {"localhost:4222", false}, {"[::1]:4222", false},
		{"0.0.0.0:4222", true}, {"192.168.1.5:4222", true}, {":4222", true},
	} {
		if got := listenWarning(tc.listen); (got != "") != tc.warns {
			t.Errorf("listenWarning(%q) = %q; want a warning %v", tc.listen, got, tc.warns)
		}
	}
}

// TestSummaryOnlyChangedNodes checks that up's running summary prints only
// the nodes whose row changed since it was last printed.
func TestSummaryOnlyChangedNodes(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "test")
	all := map[string]map[string]json.RawMessage{
		"plans": {"ace.gitea": json.RawMessage(`{}`), "g14.grafana": json.RawMessage(`{}`)},
		"provisions": {
			"ace.gitea.cache":      json.RawMessage(`{"state":"asked"}`),
			"g14.grafana.database": json.RawMessage(`{"state":"asked"}`),
		},
	}
	shown := map[string]string{}
	var first, second bytes.Buffer
	if err := writeSummary(bustest.Context(t), &first, js, all, shown); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first.String(), "\nace ") || !strings.Contains(first.String(), "\ng14 ") {
		t.Fatalf("first summary:\n%s\nwant both nodes", first.String())
	}
	all["provisions"]["g14.grafana.database"] = json.RawMessage(`{"state":"provided"}`)
	if err := writeSummary(bustest.Context(t), &second, js, all, shown); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(second.String(), "\nace ") || !strings.Contains(second.String(), "\ng14 ") {
		t.Errorf("summary after g14 changed:\n%s\nwant g14's row only", second.String())
	}
}
