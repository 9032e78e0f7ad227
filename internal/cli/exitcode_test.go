package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestDryRunDetailedExitCode runs apply --dry-run --detailed-exitcode
// through Run, as the shell sees it: 0 for the file the mesh already runs,
// 2 for one that removes vaultwarden (its table marks removed keys with -
// and changed ones with ~, uncoloured off a terminal), 1 for a file that
// does not parse and for the flag without --dry-run.
func TestDryRunDetailedExitCode(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	startSeat(t, s, homelabFile)
	if code := Run([]string{"apply", "-f", homelabFile, "--dry-run", "--detailed-exitcode", "--nats", s.URL()}); code != 0 {
		t.Errorf("dry run of the mesh as it runs exits %d; want 0", code)
	}
	if code := Run([]string{"apply", "-f", withoutVaultwarden(t), "--dry-run", "--detailed-exitcode", "--nats", s.URL()}); code != 2 {
		t.Errorf("dry run of a change exits %d; want 2", code)
	}
	out, _, err := run(t, "apply", "-f", withoutVaultwarden(t), "--dry-run", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\n-  ace ") || !strings.Contains(out, "\n~  ace ") || strings.Contains(out, "\x1b") {
		t.Errorf("dry run table:\n%s\nwant - and ~ markers, no colour", out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("nodes: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := Run([]string{"apply", "-f", bad, "--dry-run", "--detailed-exitcode", "--nats", s.URL()}); code != 1 {
		t.Errorf("dry run of a file that does not parse exits %d; want 1", code)
	}
	if code := Run([]string{"apply", "-f", homelabFile, "--detailed-exitcode", "--nats", s.URL()}); code != 1 {
		t.Errorf("--detailed-exitcode without --dry-run exits %d; want 1 (a usage error, not 2: changes)", code)
	}
}
