package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestConnectionFromContextAndEnv connects get to a real server by a nats
// CLI context (its url; its creds, with ~ expanded), by $NATS_CONTEXT, and
// by $NATS_URL and $NATS_CREDS; --nats beats the context, the context
// beats $NATS_URL; an unknown context and one that logs in with a
// password are refused, saying so.
func TestConnectionFromContextAndEnv(t *testing.T) {
	s := bustest.Server(t)
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CREDS", "")
	t.Setenv("NATS_CONTEXT", "")
	dir := filepath.Join(config, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const nowhere = "nats://127.0.0.1:1"
	write("lab", `{"description":"the lab","url":"`+s.URL()+`"}`)
	write("away", `{"url":"`+nowhere+`"}`)
	write("keyed", `{"url":"`+s.URL()+`","creds":"~/mesh/operator.creds"}`)
	write("pass", `{"url":"`+s.URL()+`","user":"alice","password":"secret"}`)

	reaches := func(what string, env map[string]string, args ...string) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		defer func() {
			for k := range env {
				t.Setenv(k, "")
			}
		}()
		if out, errOut, err := run(t, append([]string{"get", "plans"}, args...)...); err != nil || !strings.Contains(errOut+out, "mesh-provisioner_plans") && out != "no plans\n" {
			t.Errorf("%s: get plans = %q, %q, %v; want it to reach the server", what, out, errOut, err)
		}
	}
	refused := func(what, want string, env map[string]string, args ...string) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		defer func() {
			for k := range env {
				t.Setenv(k, "")
			}
		}()
		if _, _, err := run(t, append([]string{"get", "plans"}, args...)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: get plans = %v; want an error with %q", what, err, want)
		}
	}
	reaches("--context lab", nil, "--context", "lab")
	reaches("$NATS_CONTEXT=lab", map[string]string{"NATS_CONTEXT": "lab"})
	reaches("$NATS_URL", map[string]string{"NATS_URL": s.URL()})
	reaches("--context lab over $NATS_URL", map[string]string{"NATS_URL": nowhere}, "--context", "lab")
	reaches("--nats over --context away", nil, "--context", "away", "--nats", s.URL())
	refused("--context away", "no NATS server answers at "+nowhere+" (from context away)", nil, "--context", "away")
	refused("$NATS_URL nowhere", "(from $NATS_URL)", map[string]string{"NATS_URL": nowhere})
	refused("--context keyed", filepath.Join(os.Getenv("HOME"), "mesh", "operator.creds"), nil, "--context", "keyed")
	refused("$NATS_CREDS", "/no/such.creds", map[string]string{"NATS_URL": s.URL(), "NATS_CREDS": "/no/such.creds"})
	refused("--context nope", "context nope: no such context", nil, "--context", "nope")
	refused("--context pass", `context pass sets "user"`, nil, "--context", "pass")
}
