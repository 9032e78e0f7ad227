package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
)

// revokeMesh is the mesh of TestNodeLeaveAfterAPlacementChange: the vault
// on control; %s is ace's and bee's placement.
const revokeMesh = `nodes: [control, %s]
modules:
  mesh-vault:
    builds:
      - fp: 9c0d51
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound, store],
                   reads: [mesh-provisioner.plans, mesh-provisioner.provisions], dirs: [{name: state, unknown: program}]}
  app:
    builds:
      - fp: 0a0a0a
        manifest: {module: app, dirs: [{name: state}], ports: [{name: http}]}
  vaultwarden:
    builds:
      - fp: 0b0b0b
        manifest: {module: vaultwarden, dirs: [{name: state}], ports: [{name: http}]}
placement:
  control: [mesh-vault]
%s`

// TestNodeLeaveAfterAPlacementChange runs the sequence of a removed node
// whose permissions were narrowed first, against nats-server's own binary:
// auth gen; vaultwarden moves off ace (auth gen --push revokes the older
// JWTs of ace's requests user); a copy of DIR/mesh-requests/client-ace.creds
// taken then; ace removed from the file and node leave ace. The copy is
// refused at once, and still after DIR/revoked is deleted and the server
// restarted; bee's client's requests file connects throughout.
func TestNodeLeaveAfterAPlacementChange(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	work := t.TempDir()
	write := func(name, nodes, placement string) string {
		path := filepath.Join(work, name)
		text := strings.Replace(strings.Replace(revokeMesh, "%s", nodes, 1), "%s", placement, 1)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a := write("a.yaml", "ace, bee", "  ace: [app, vaultwarden]\n  bee: []\n")
	b := write("b.yaml", "ace, bee", "  ace: [app]\n  bee: [vaultwarden]\n")
	c := write("c.yaml", "bee", "  bee: [app, vaultwarden]\n")

	runMain(t, "auth", "gen", "-f", a, "-o", dir)
	conf := filepath.Join(dir, auth.ConfigFile)
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	mine, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	mine = append(mine, []byte("\nlisten: 127.0.0.1:"+strconv.Itoa(port)+"\n")...)
	if err := os.WriteFile(conf, mine, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startNATS(t, conf)
	aceAsks := auth.AccountCredsPath(dir, access.Requests, access.ClientUser("ace"))
	beeAsks := auth.AccountCredsPath(dir, access.Requests, access.ClientUser("bee"))
	connects := func(path string) bool {
		nc, err := nats.Connect(url, nats.UserCredentials(path), nats.NoReconnect(), nats.Timeout(3*time.Second))
		if err == nil {
			nc.Close()
		}
		return err == nil
	}
	waitFor(t, 0, "nats-server to accept client-ace's requests user", []*process{srv}, func() bool { return connects(aceAsks) })

	out := runMain(t, "auth", "gen", "-f", b, "-o", dir, "--push", url)
	if !strings.Contains(out, "older credentials revoked (permissions changed): ") || !strings.Contains(out, "client-ace") {
		t.Fatalf("auth gen of b.yaml printed\n%s\nwant client-ace's older credentials revoked", out)
	}
	held := filepath.Join(t.TempDir(), "client-ace.creds")
	if b, err := os.ReadFile(aceAsks); err != nil || os.WriteFile(held, b, 0o600) != nil {
		t.Fatalf("copy %s: %v", aceAsks, err)
	}
	if !connects(held) {
		t.Fatal("client-ace's requests file signed after the placement change is refused before node leave")
	}

	out = runMain(t, "node", "leave", "ace", "-f", c, "-o", dir, "--nats", url)
	if !strings.Contains(out, "revoked: client-ace") {
		t.Errorf("node leave ace printed\n%s\nwant client-ace revoked", out)
	}
	if connects(held) {
		t.Error("client-ace's requests file taken after the placement change connects right after node leave")
	}
	if !connects(beeAsks) {
		t.Error("client-bee's requests file is refused after node leave ace")
	}

	if err := os.RemoveAll(filepath.Join(dir, auth.RevokedDir)); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-srv.done
	srv = startNATS(t, conf)
	waitFor(t, 0, "the restarted nats-server to accept client-bee's requests user", []*process{srv}, func() bool { return connects(beeAsks) })
	if connects(held) {
		t.Error("with DIR/revoked deleted and the server restarted, client-ace's held requests file connects")
	}
}

// TestNodeLeaveKeepsTheExpiry: after auth gen --expiry 6s, a node leave
// run once the users are due (their last 2 s) re-signs them with the life
// DIR/settings.json keeps: client-bee's new JWT is issued at the leave and
// lives 6 s, not the default 720 h.
func TestNodeLeaveKeepsTheExpiry(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	work := t.TempDir()
	write := func(name, nodes, placement string) string {
		path := filepath.Join(work, name)
		text := strings.Replace(strings.Replace(revokeMesh, "%s", nodes, 1), "%s", placement, 1)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a := write("a.yaml", "ace, bee", "  ace: [app]\n  bee: [vaultwarden]\n")
	c := write("c.yaml", "bee", "  bee: [vaultwarden]\n")
	const life = 6 * time.Second

	runMain(t, "auth", "gen", "-f", a, "-o", dir, "--expiry", life.String())
	conf := filepath.Join(dir, auth.ConfigFile)
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	mine, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, append(mine, []byte("\nlisten: 127.0.0.1:"+strconv.Itoa(port)+"\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startNATS(t, conf)
	bee := auth.CredsPath(dir, access.ClientUser("bee"))
	first := userClaims(t, bee)
	// Ready as the server says it, not as a connect with the operator's
	// file says: that file lives 6 s too, and a server starting on a loaded
	// machine took longer (the connect then never succeeded).
	waitFor(t, 0, "nats-server to listen", []*process{srv}, func() bool {
		return strings.Contains(srv.output(), "Server is ready")
	})
	// Due once a third of the life is left.
	waitFor(t, 0, "client-bee's JWT to be due for renewal", []*process{srv}, func() bool {
		return time.Until(time.Unix(first.Expires, 0)) < life/3
	})
	left := time.Now().Unix()
	out := runMain(t, "node", "leave", "ace", "-f", c, "-o", dir, "--nats", url)
	if !strings.Contains(out, "revoked: client-ace") {
		t.Errorf("node leave ace printed\n%s\nwant client-ace revoked", out)
	}
	uc := userClaims(t, bee)
	if uc.IssuedAt < left {
		t.Fatalf("client-bee's JWT was issued at %d, before node leave (%d): it was due and not re-signed", uc.IssuedAt, left)
	}
	if got := time.Duration(uc.Expires-uc.IssuedAt) * time.Second; got != life {
		t.Errorf("client-bee's JWT re-signed by node leave lives %v; want %v as auth gen --expiry gave", got, life)
	}
}

// userClaims returns the claims of the user JWT in the credentials file at
// path.
func userClaims(t *testing.T, path string) *jwt.UserClaims {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return uc
}
