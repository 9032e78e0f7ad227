package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/internal/why"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// startSeat applies file to s, runs a seat on its own connection until
// the test ends, and waits until it has composed what the file wrote.
func startSeat(t *testing.T, s *bus.Server, file string) *seat.Seat {
	t.Helper()
	if _, errOut, err := run(t, "apply", "-f", file, "--yes", "--nats", s.URL()); err != nil {
		t.Fatalf("apply %s: %v (%s)", file, err, errOut)
	}
	ctx, cancel := context.WithCancel(bustest.Context(t))
	_, sjs := bustest.Connect(t, s, "mesh-provisioner-seat")
	st := seat.New(sjs, seat.Config{Log: testLog(t)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitSeat(t, s, st)
	return st
}

// startRouter runs the ask router on its own connection until the test
// ends.
func startRouter(t *testing.T, s *bus.Server) {
	t.Helper()
	nc, js := bustest.Connect(t, s, "mesh-asks")
	if _, err := asks.Start(bustest.Context(t), nc, js, testLog(t)); err != nil {
		t.Fatal(err)
	}
}

// withoutVaultwarden writes the homelab without vaultwarden on ace (its
// placement and its want gone) into a temporary file and returns its path.
func withoutVaultwarden(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile(homelabFile)
	if err != nil {
		t.Fatal(err)
	}
	without := strings.Replace(string(text), "ace: [gitea, vaultwarden, node-tools]", "ace: [gitea, node-tools]", 1)
	without = strings.Replace(without, "vaultwarden: 4a4a4a, ", "", 1)
	if without == string(text) {
		t.Fatalf("%s no longer places vaultwarden on ace as the test expects", homelabFile)
	}
	path := filepath.Join(t.TempDir(), "without-vaultwarden.yaml")
	if err := os.WriteFile(path, []byte(without), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testLog logs warnings and errors to t.Log: shown for a failing test.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// waitSeat waits until st has taken every write made to s so far.
func waitSeat(t *testing.T, s *bus.Server, st *seat.Seat) {
	t.Helper()
	_, js := bustest.Connect(t, s, "wait")
	marks := seat.Marks(bustest.Context(t), js)
	bustest.WaitFor(t, 0, "the seat settles", func() bool { return st.Settled(marks) })
}

// TestWhyCommand walks a database key of the homelab, with no provider
// running, then with the vault's entry for its credential failed.
func TestWhyCommand(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	startSeat(t, s, homelabFile)
	const key, cred = "g14.grafana.database", "g14.grafana.credential.postgres_database"

	steps := whySteps(t, s, key)
	want := []string{
		"0 provision " + key + " waits",
		"1 provision " + cred + " asked",
		"2 entry mesh-vault_bound " + cred + ": no entry from mesh-vault on control yet (is its provider running?)",
		"1 entry postgres_bound " + key + ": no entry from postgres on control yet (is its provider running?)",
	}
	checkSteps(t, steps, want)

	_, js := bustest.Connect(t, s, "mesh-vault")
	ctx := bustest.Context(t)
	kv, err := bus.Bucket(ctx, js, mesh.BoundBucket(mesh.VaultModule), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(mesh.Entry{State: mesh.Failed, Why: "store sealed"})
	if _, err := kv.Put(ctx, cred, b); err != nil {
		t.Fatal(err)
	}
	pkv, err := js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, cred+" failed", func() bool {
		e, err := pkv.Get(ctx, cred)
		var p mesh.Provision
		return err == nil && json.Unmarshal(e.Value(), &p) == nil && p.State == mesh.Failed
	})
	checkSteps(t, whySteps(t, s, key), []string{
		"0 provision " + key + " waits",
		"1 provision " + cred + " failed",
		"2 entry mesh-vault_bound " + cred + " failed: mesh-vault on control says failed: store sealed",
		"1 entry postgres_bound " + key + ": no entry from postgres on control yet (is its provider running?)",
	})

	out, _, err := run(t, "why", key, "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], key+"  waits for ") ||
		lines[2] != "    → mesh-vault_bound "+cred+"  failed: mesh-vault on control says failed: store sealed" {
		t.Errorf("why %s printed:\n%s", key, out)
	}
	if _, _, err := run(t, "why", "ace.nothing.database", "--nats", s.URL()); err == nil || !strings.Contains(err.Error(), "no provision, plan or refusal has this key") {
		t.Errorf("why of an unknown key = %v; want it said", err)
	}
}

func whySteps(t *testing.T, s *bus.Server, key string) []why.Step {
	t.Helper()
	out, errOut, err := run(t, "why", key, "-o", "json", "--nats", s.URL())
	if err != nil {
		t.Fatalf("why %s: %v (%s)", key, err, errOut)
	}
	var got struct {
		Key   string     `json:"key"`
		Steps []why.Step `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Key != key {
		t.Fatalf("why -o json = %s (%v)", out, err)
	}
	return got.Steps
}

// checkSteps compares steps with want, each "depth what key state" and,
// for steps other than the key's provisions, ": says".
func checkSteps(t *testing.T, steps []why.Step, want []string) {
	t.Helper()
	got := make([]string, len(steps))
	for i, s := range steps {
		got[i] = strings.TrimSpace(strings.Join([]string{string(rune('0' + s.Depth)), s.What, s.Key, s.State}, " "))
		if s.What != why.StepProvision {
			got[i] += ": " + s.Says
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("why steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
