package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// runUntilEnd runs the root command with args in-process until the test
// ends (its context is cancelled then, and the command waited for); a
// command that ended before with an error is said in the test's log.
func runUntilEnd(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := Root()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(args)
		done <- root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		select {
		case err := <-done:
			t.Logf("%s ended before the test did: %v", args[0], err)
			return
		default:
		}
		cancel()
		<-done
	})
}

// filesOf returns every credentials file of user in dir (one per account
// it has a user in, and an operator's system user's), each path by the
// account it is of.
func filesOf(t *testing.T, dir, user string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, in := range access.Accounts {
		if path := auth.AccountCredsPath(dir, in, user); exists(path) {
			out[string(in)] = path
		}
	}
	if path := auth.SystemCredsPath(dir, user); exists(path) {
		out[auth.SystemAccountName] = path
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// secretOf asks the vault, with the requests user of the credentials file
// creds (a node's client), for module's secrets, and returns the names of
// the secrets answered for node ("" and the error when none answers).
func secretOf(creds, url, module, node string) (string, error) {
	nc, err := bus.ConnectIn(bus.Dial{URL: url, Name: "test", Creds: creds}, access.Requests)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a, err := kit.AskSecretsAs(ctx, nc, module, bus.CredsUser(creds), kit.VaultRequest{Node: node})
	if err != nil {
		return "", err
	}
	var names []string
	for _, s := range a.Secrets {
		if s.Node == node && s.Value != "" {
			names = append(names, s.Name)
		}
	}
	return strings.Join(names, ","), nil
}

// refusedFile reports whether the server at url refuses the credentials
// file at path, failing the test on an error that is no refusal.
func refusedFile(t *testing.T, url, path string) bool {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserCredentials(path), nats.NoReconnect(), nats.Timeout(3*time.Second))
	if err == nil {
		nc.Close()
		return false
	}
	if !errors.Is(err, nats.ErrAuthorization) && !errors.Is(err, nats.ErrAuthRevoked) {
		t.Fatalf("connect with %s: %v; want a connection or an authorization error", path, err)
	}
	return true
}

// TestAuthRotateRenewsEveryAccountOfTheParty is F3 of the attacker's
// review, against a standalone deployment of the homelab (auth gen's
// server, with the seat, the ask router and the vault running on their
// files, and ace's client): "auth rotate --push" of the operator, of ace's
// client and of the vault, each in turn. After it every old file of the
// party (each account, and the operator's system user) is refused by the
// server; the running client and vault are connected in each account they
// act in on their new files, none on an old one; the vault answers ace's
// client, which gets gitea's secret with its new files; the operator with its new files lists
// the asks, answers one raised after the rotation and has the vault rotate
// a credential. Another party (shanks' client, the router) keeps its files
// byte for byte, and shanks' client still gets its secret. Before, the
// operator's and the client's old mesh-requests files and the vault's old
// mesh-services file stayed valid.
func TestAuthRotateRenewsEveryAccountOfTheParty(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	dir := filepath.Join(t.TempDir(), "auth")
	if _, _, err := run(t, "auth", "gen", "-f", homelabFile, "-o", dir); err != nil {
		t.Fatalf("auth gen: %v", err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	url := s.URL()
	quiet := []string{"--nats", url, "--log-level", "error"}
	runUntilEnd(t, append([]string{"serve", "--creds", auth.CredsPath(dir, mesh.Module)}, quiet...)...)
	runUntilEnd(t, append([]string{"router", "--creds", auth.CredsPath(dir, access.RouterUser)}, quiet...)...)
	runUntilEnd(t, append([]string{"vault", "--node", "control", "--data", t.TempDir(), "--creds", auth.CredsPath(dir, access.VaultUser)}, quiet...)...)
	op := auth.CredsPath(dir, access.DefaultOperator)
	if _, errOut, err := run(t, "apply", "-f", homelabFile, "--yes", "--nats", url, "--creds", op); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	ace := auth.CredsPath(dir, access.ClientUser("ace"))
	// live returns the user keys of the server's connections, of every
	// account.
	live := func() map[string]bool {
		t.Helper()
		cz, err := s.Connz(&server.ConnzOptions{Username: true, Limit: 4096})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, c := range cz.Conns {
			out[c.AuthorizedUser] = true
		}
		return out
	}
	pub := func(path string) string {
		t.Helper()
		k, err := auth.PublicKey(path)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	shanks := auth.CredsPath(dir, access.ClientUser("shanks"))
	getsSecret := func(what, creds, module, node, want string) {
		t.Helper()
		var got string
		var err error
		bustest.WaitFor(t, 60*time.Second, what, func() bool {
			got, err = secretOf(creds, url, module, node)
			return got == want
		})
		if got != want {
			t.Fatalf("%s: %q, %v; want %q", what, got, err, want)
		}
	}
	getsSecret("ace's client gets gitea's secret before the rotations", ace, "gitea", "ace", "secret-key")
	runUntilEnd(t, append([]string{"client", "--node", "ace", "--root", t.TempDir(), "--creds", ace}, quiet...)...)

	// Another party's files, kept byte for byte by every rotation.
	kept := map[string][]byte{}
	for _, user := range []string{access.ClientUser("shanks"), access.RouterUser, "client-g14"} {
		for _, path := range filesOf(t, dir, user) {
			kept[path] = mustReadFile(t, path)
		}
	}
	for _, tc := range []struct {
		user string
		in   []string // the accounts of its files
	}{
		{access.DefaultOperator, []string{"SYS", "mesh", "mesh-requests"}},
		{access.ClientUser("ace"), []string{"mesh", "mesh-requests"}},
		{access.VaultUser, []string{"mesh", "mesh-requests", "mesh-services"}},
	} {
		files := filesOf(t, dir, tc.user)
		// The running component's connections: each account it is
		// connected in (the client's and the vault's, not the operator's
		// commands), once it is.
		running := map[string]bool{}
		if tc.user != access.DefaultOperator {
			bustest.WaitFor(t, 60*time.Second, tc.user+" connected in every account it acts in", func() bool {
				now := live()
				for acc, path := range files {
					if now[pub(path)] {
						running[acc] = true
					}
				}
				return running[string(access.Storage)] && len(running) >= 2
			})
		}
		var in []string
		old := map[string]string{}
		for acc, path := range files {
			in = append(in, acc)
			old[acc] = filepath.Join(t.TempDir(), filepath.Base(path))
			if err := os.WriteFile(old[acc], mustReadFile(t, path), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if strings.Join(sorted(in), " ") != strings.Join(tc.in, " ") {
			t.Fatalf("%s has files in %v; want %v", tc.user, sorted(in), tc.in)
		}
		out, errOut, err := run(t, "auth", "rotate", "-f", homelabFile, "-o", dir, tc.user, "--push", url)
		if err != nil {
			t.Fatalf("auth rotate %s: %v (%s)", tc.user, err, errOut)
		}
		for _, path := range files {
			if !strings.Contains(out, path) {
				t.Errorf("auth rotate %s printed\n%s\nwant it to name %s", tc.user, out, path)
			}
		}
		for acc, path := range old {
			if !refusedFile(t, url, path) {
				t.Errorf("%s's old file of the account %s connects after auth rotate --push", tc.user, acc)
			}
			if refusedFile(t, url, files[acc]) {
				t.Errorf("%s's new file of the account %s (%s) is refused", tc.user, acc, files[acc])
			}
		}
		// The running component reconnected in each account on its new
		// file; none is left on an old one.
		bustest.WaitFor(t, 60*time.Second, tc.user+" running on its new files", func() bool {
			now := live()
			for acc := range running {
				if !now[pub(files[acc])] || now[pub(old[acc])] {
					return false
				}
			}
			return true
		})
		// The running vault answers on its new files, and ace's client
		// gets its secret with its own.
		getsSecret("ace's client gets gitea's secret after "+tc.user+"'s rotation", ace, "gitea", "ace", "secret-key")
	}
	// The operator's acts on its new files: list the asks, answer one
	// raised after its rotation, have the vault rotate a credential.
	if _, errOut, err := run(t, "apply", "-f", withoutVaultwarden(t), "--yes", "--nats", url, "--creds", op); err != nil {
		t.Fatalf("apply without vaultwarden: %v (%s)", err, errOut)
	}
	onc, err := bus.ConnectIn(bus.Dial{URL: url, Name: "operator", Creds: op}, access.Requests)
	if err != nil {
		t.Fatal(err)
	}
	defer onc.Close()
	ctx := bustest.Context(t)
	var id string
	bustest.WaitFor(t, 60*time.Second, "vaultwarden's database key asked, listed by the rotated operator", func() bool {
		l, err := asks.List(ctx, onc, "")
		for _, r := range l.Records {
			if err == nil && strings.HasPrefix(r.Ask.ID, "retire-ace-vaultwarden-database-") {
				id = r.Ask.ID
			}
		}
		return id != ""
	})
	rec, err := asks.Answer(ctx, onc, access.DefaultOperator, id, "no")
	if err != nil || rec.State != mesh.RecordAnswered || rec.Warrant == nil || rec.Warrant.By.Who != access.DefaultOperator {
		t.Errorf("the rotated operator's answer of %s = %+v, %v; want answered by operator", id, rec, err)
	}
	const cred = "g14.grafana.credential.postgres_database"
	if _, err := kit.AskRotate(ctx, onc, cred); err != nil {
		t.Errorf("the rotated operator asks the vault to rotate %s: %v; want it rotated", cred, err)
	}

	for path, b := range kept {
		if !bytes.Equal(mustReadFile(t, path), b) {
			t.Errorf("a rotation changed %s, another party's", path)
		}
	}
	getsSecret("shanks' client, not rotated, gets matrix-synapse's secret", shanks, "matrix-synapse", "shanks", "registration-secret")
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	slices.Sort(out)
	return out
}
