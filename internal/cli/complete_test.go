package cli

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestCompletion asks cobra's completion (what the shell scripts of
// "completion bash|zsh|fish" call) for kinds, node names, keys under a
// node, module names and the open asks' ids and options, against a real
// homelab with vaultwarden's keys asked; and --version prints the version.
func TestCompletion(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	startRouter(t, s)
	st := startSeat(t, s, homelabFile)
	if _, errOut, err := run(t, "apply", "-f", withoutVaultwarden(t), "--yes", "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	waitSeat(t, s, st)
	bustest.WaitFor(t, 0, "vaultwarden's database key asked", func() bool {
		out, _, err := run(t, "asks", "--nats", s.URL())
		return err == nil && strings.Contains(out, "retire-ace-vaultwarden-database")
	})
	complete := func(args ...string) []string {
		t.Helper()
		out, _, err := run(t, append([]string{"__complete"}, args...)...)
		if err != nil {
			t.Fatalf("__complete %v: %v", args, err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return lines[:len(lines)-1] // the last is cobra's directive
	}
	has := func(what string, got []string, want ...string) {
		t.Helper()
		all := " " + strings.Join(got, " ") + " "
		for _, w := range want {
			if !strings.Contains(all, " "+w+" ") {
				t.Errorf("%s: completions %v lack %q", what, got, w)
			}
		}
	}
	has("get KIND", complete("get", "--nats", s.URL(), ""), "plans", "provisions", "refused", "registry")
	has("why g", complete("why", "--nats", s.URL(), "g"), "g14.")
	got := complete("why", "--nats", s.URL(), "g14.grafana.d")
	has("why g14.grafana.d", got, "g14.grafana.database")
	for _, c := range got {
		if !strings.HasPrefix(c, "g14.grafana.d") {
			t.Errorf("why g14.grafana.d: completion %q", c)
		}
	}
	has("get provisions KEY", complete("get", "provisions", "--nats", s.URL(), "ace.vault"), "ace.vaultwarden.database")
	has("--node", complete("status", "--nats", s.URL(), "--node", ""), "ace", "control", "g14", "shanks")
	has("--module", complete("get", "provisions", "--nats", s.URL(), "--module", "graf"), "grafana")
	asks := complete("answer", "--nats", s.URL(), "retire-ace-vaultwarden-d")
	if len(asks) != 1 || !strings.HasPrefix(asks[0], "retire-ace-vaultwarden-database-") {
		t.Fatalf("answer ASK-ID completions = %v; want vaultwarden's database ask", asks)
	}
	has("answer ASK OPTION", complete("answer", "--nats", s.URL(), asks[0], ""), "yes", "no")

	out, _, err := run(t, "--version")
	if err != nil || !strings.HasPrefix(out, "mesh-provisioner ") || strings.TrimSpace(out) == "mesh-provisioner" {
		t.Errorf("--version = %q, %v", out, err)
	}
}
