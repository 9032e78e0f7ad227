package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// TestAuthGenCommand runs "auth gen" on the homelab twice: a configuration
// nats-server accepts, a credentials file per party (mode 0600), and no key
// made the second time.
func TestAuthGenCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	out, _, err := run(t, "auth", "gen", "-f", homelabFile, "-o", dir, "--operator", "operator", "--operator", "alice")
	if err != nil {
		t.Fatalf("auth gen: %v", err)
	}
	if !strings.Contains(out, "and 23 credentials files") || !strings.Contains(out, "keys made: account key, account signing key, alice,") {
		t.Errorf("auth gen printed %q; want 23 credentials files (15 modules, 4 clients, seat, router, 2 operators) and keys made", out)
	}
	if _, err := server.ProcessConfigFile(filepath.Join(dir, auth.ConfigFile)); err != nil {
		t.Errorf("nats-server refuses the configuration: %v", err)
	}
	for _, user := range []string{"mesh-provisioner", "mesh-asks", "mesh-vault", "postgres", "gitea", "client-ace", "alice"} {
		st, err := os.Stat(auth.CredsPath(dir, user))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s.creds: %v; want mode 0600", user, err)
		}
	}
	out, _, err = run(t, "auth", "gen", "-f", homelabFile, "-o", dir, "--operator", "operator", "--operator", "alice")
	if err != nil || !strings.Contains(out, "keys made: none") {
		t.Errorf("auth gen again = %q, %v; want no key made", out, err)
	}
	if _, _, err := run(t, "auth", "gen", "-f", homelabFile); err == nil {
		t.Errorf("auth gen without -o succeeded")
	}

	// A command against that server without credentials, or with another
	// mesh's, is refused with a hint that names --creds.
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	t.Setenv("HOME", t.TempDir()) // no default operator's credentials
	t.Setenv("XDG_STATE_HOME", "")
	if _, _, err := run(t, "get", "provisions", "--nats", s.URL()); err == nil ||
		!strings.Contains(err.Error(), "refused a connection without credentials: pass --creds FILE") {
		t.Errorf("get without credentials: %v; want a hint naming --creds", err)
	}
	other := filepath.Join(t.TempDir(), "auth")
	if _, _, err := run(t, "auth", "gen", "-f", homelabFile, "-o", other); err != nil {
		t.Fatalf("auth gen of another mesh: %v", err)
	}
	otherCreds := auth.CredsPath(other, "operator")
	if _, _, err := run(t, "get", "provisions", "--nats", s.URL(), "--creds", otherCreds); err == nil ||
		!strings.Contains(err.Error(), "refused the credentials in "+otherCreds) {
		t.Errorf("get with another mesh's credentials: %v; want a hint naming the file", err)
	}
}
