package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
	if !strings.Contains(out, "wrote "+filepath.Join(dir, auth.IncludeFile)+" and 23 credentials files in "+dir+"\n") || !strings.Contains(out, "keys made: account key, account signing key, alice,") {
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
	if err != nil || !strings.Contains(out, "keys made: none") || !strings.Contains(out, "signed anew: none") {
		t.Errorf("auth gen again = %q, %v; want no key made and nothing signed anew", out, err)
	}
	// Nothing changed: it says so, and names no file as written.
	if want := "nothing changed in " + dir + ": every file already holds what gen writes\n"; !strings.Contains(out, want) || strings.Contains(out, "wrote ") {
		t.Errorf("auth gen again printed\n%s\nwant %q and no file said written", out, want)
	}
	// One operator more: its file alone is written (users are signed by
	// the account's signing key: no account's JWT, so not the include,
	// changes).
	out, _, err = run(t, "auth", "gen", "-f", homelabFile, "-o", dir, "--operator", "operator", "--operator", "alice", "--operator", "bob")
	if want := "wrote 1 credentials file in " + dir + "\n"; err != nil || !strings.Contains(out, want) || !strings.Contains(out, "signed anew: bob\n") {
		t.Errorf("auth gen with bob = %q, %v; want %q and bob signed anew", out, err, want)
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

// pushMesh is the mesh of TestAuthPushKeepsTheServersRevocations: the vault
// on control, and with ace the module app there.
const pushMesh = `nodes: [control%s]
modules:
  mesh-vault:
    builds:
      - fp: 9c0d51
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound, store],
                   reads: [mesh-provisioner.plans, mesh-provisioner.provisions], dirs: [{name: state, unknown: program}]}
  app:
    builds:
      - fp: 0a0a0a
        manifest: {module: app, dirs: [{name: state}]}
placement:
  control: [mesh-vault]
%s`

// TestAuthPushKeepsTheServersRevocations: ace is removed and pushed; then
// DIR loses its records of it (DIR/revoked and DIR/accounts deleted) and
// auth gen signs the account without its revocation. "auth push" reads the
// server's copy first and keeps its revocation: ace's old credentials stay
// refused, and the account's record in DIR revokes it again.
func TestAuthPushKeepsTheServersRevocations(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	work := t.TempDir()
	two := filepath.Join(work, "two.yaml")
	one := filepath.Join(work, "one.yaml")
	os.WriteFile(two, []byte(fmt.Sprintf(pushMesh, ", ace", "  ace: [app]\n")), 0o600)
	os.WriteFile(one, []byte(fmt.Sprintf(pushMesh, "", "")), 0o600)
	if _, _, err := run(t, "auth", "gen", "-f", two, "-o", dir); err != nil {
		t.Fatal(err)
	}
	// The server keeps its accounts apart from DIR, as one on another
	// machine does.
	conf := "include \"auth.conf\"\nresolver: {type: full, dir: \"" + filepath.Join(work, "server-resolver") + "\"}\n"
	if err := os.WriteFile(filepath.Join(dir, auth.ConfigFile), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	ace := filepath.Join(work, "client-ace.creds")
	b, err := os.ReadFile(auth.CredsPath(dir, "client-ace"))
	if err != nil || os.WriteFile(ace, b, 0o600) != nil {
		t.Fatal(err)
	}
	// A connect cut before the server judged the credentials (its 2 s
	// auth timeout on a loaded machine) is tried again, up to five times.
	connects := func() bool {
		var err error
		for range 5 {
			var nc *nats.Conn
			if nc, err = nats.Connect(s.URL(), nats.UserCredentials(ace), nats.NoReconnect()); err == nil {
				nc.Close()
				return true
			}
			if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthRevoked) {
				return false
			}
		}
		t.Logf("ace's connect: %v", err)
		return false
	}
	if !connects() {
		t.Fatal("ace is refused before its removal")
	}
	if _, _, err := run(t, "auth", "gen", "-f", one, "-o", dir, "--push", s.URL()); err != nil {
		t.Fatal(err)
	}
	if connects() {
		t.Fatal("ace connects after its removal was pushed")
	}
	for _, lost := range []string{auth.RevokedDir, auth.AccountsDir} {
		if err := os.RemoveAll(filepath.Join(dir, lost)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := run(t, "auth", "gen", "-f", one, "-o", dir); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "auth", "push", "-o", dir, "--nats", s.URL())
	if err != nil || !strings.Contains(out, "kept the servers' revocations") {
		t.Fatalf("auth push = %q, %v; want the servers' revocations kept", out, err)
	}
	if connects() {
		t.Error("ace connects after auth push of a directory that lost its revocation")
	}
	pub, err := auth.PublicKey(ace)
	if err != nil {
		t.Fatal(err)
	}
	record, err := os.ReadFile(filepath.Join(dir, auth.AccountsDir, auth.AccountName+".jwt"))
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(record)))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ac.Revocations[pub]; !ok {
		t.Errorf("the account's record in DIR does not revoke ace (%s) again", pub)
	}
}

// TestAuthGenWarnsOfAPlainClusterOffLoopback checks that auth gen says,
// on stderr, that servers beyond loopback without TLS carry the vault's
// values and the route password in clear, naming them, and says nothing
// with TLS files given or on loopback.
func TestAuthGenWarnsOfAPlainClusterOffLoopback(t *testing.T) {
	plain := clusterFlags{servers: []string{"n1=10.0.0.1", "n2=10.0.0.2", "n3=127.0.0.1"}}
	if w := plain.plainWarning(); !strings.Contains(w, "the servers n1=10.0.0.1, n2=10.0.0.2 listen beyond loopback without TLS") || strings.Contains(w, "n3") {
		t.Errorf("warning of n1, n2 on the network and n3 on loopback = %q", w)
	}
	withTLS := plain
	withTLS.cert, withTLS.key, withTLS.ca = "c.pem", "k.pem", "ca.pem"
	local := clusterFlags{servers: []string{"n1=127.0.0.1:4222", "n2=127.0.0.1:4223", "n3=localhost:4224"}}
	for name, c := range map[string]clusterFlags{"with TLS": withTLS, "on loopback": local} {
		if w := c.plainWarning(); w != "" {
			t.Errorf("%s: warning %q; want none", name, w)
		}
	}
}
