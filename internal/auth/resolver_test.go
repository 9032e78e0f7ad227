package auth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

// serve starts a server from the configuration Gen wrote in dir, with its
// JetStream store in store.
func serve(t *testing.T, dir, store string) *bus.Server {
	t.Helper()
	srv, err := bus.StartServer(bus.ServerConfig{Dir: store, Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// push delivers the accounts' JWTs to the server at url as the pushing
// system user of a.
func push(t *testing.T, url string, a *auth.Authority, jwts []string) {
	t.Helper()
	creds, err := a.SystemCreds()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := dial(url, nats.UserCredentials(creds), nats.CustomInboxPrefix(access.InboxPrefix(auth.PushUser)))
	if err != nil {
		t.Fatalf("connect as %s: %v", auth.PushUser, err)
	}
	defer nc.Close()
	if err := bus.PushClaims(context.Background(), nc, jwts, 1); err != nil {
		t.Fatal(err)
	}
}

// refused reports whether the server at url refuses the credentials file
// at path (with a copy of it, so that later changes of the file do not
// count). A connection cut before the server answered says nothing of the
// credentials (on a loaded machine the server's 2 s auth timeout passed
// before the client's CONNECT reached it: "Authentication Timeout",
// "write: broken pipe"): it connects again, up to five times.
func refused(t *testing.T, url, path string) bool {
	t.Helper()
	var err error
	for range 5 {
		var nc *nats.Conn
		nc, err = nats.Connect(url, nats.UserCredentials(path), nats.NoReconnect(), nats.Timeout(3*time.Second))
		if err == nil {
			nc.Close()
			return false
		}
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
			strings.Contains(err.Error(), "Authentication Expired") {
			return true
		}
		if !cutBeforeAnswer(err) {
			break
		}
	}
	t.Fatalf("connect with %s: %v; want a connection or an authorization error", path, err)
	return false
}

// cutBeforeAnswer reports whether err, a connect's, says the connection
// ended before the server judged its credentials: its auth timeout, the
// socket closed or reset, the client's own timeout.
func cutBeforeAnswer(err error) bool {
	return strings.Contains(err.Error(), "Authentication Timeout") || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded)
}

// dial is nats.Connect, connecting again (up to five times) while the
// connection is cut before the server judged its credentials (see
// cutBeforeAnswer: a loaded machine, the tests run in parallel).
func dial(url string, options ...nats.Option) (*nats.Conn, error) {
	var nc *nats.Conn
	var err error
	for range 5 {
		if nc, err = nats.Connect(url, options...); err == nil || !cutBeforeAnswer(err) {
			break
		}
	}
	return nc, err
}

// busDial is bus.Connect, connecting again as dial does.
func busDial(d bus.Dial) (*nats.Conn, jetstream.JetStream, error) {
	var nc *nats.Conn
	var js jetstream.JetStream
	var err error
	for range 5 {
		if nc, js, err = bus.Connect(d); err == nil || !cutBeforeAnswer(err) {
			break
		}
	}
	return nc, js, err
}

// copyFile copies the file at path into t's temporary directory.
func copyFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// without returns parties without user.
func without(parties []access.Party, user string) []access.Party {
	return slices.DeleteFunc(slices.Clone(parties), func(p access.Party) bool { return p.User == user })
}

// TestRemovedPartyIsRefusedAtOnce removes a node from a running server's
// mesh: Gen revokes its user in the account's JWT, and once that is
// pushed the server closes the node's open connection and refuses its old
// credentials; a kept party stays connected. With DIR/revoked deleted, Gen
// again writes the same account JWT (the revocation is read back from its
// last signed JWT), and a server started anew from the files refuses the
// old credentials still.
func TestRemovedPartyIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, parties := gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	old := copyFile(t, auth.CredsPath(dir, "client-n2"))
	closed := make(chan struct{})
	n2, err := dial(srv.URL(), nats.UserCredentials(old), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("client-n2 before its removal: %v", err)
	}
	defer n2.Close()
	n1, err := dial(srv.URL(), nats.UserCredentials(auth.CredsPath(dir, "client-n1")), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Close()

	res, err := auth.Gen(dir, without(parties, "client-n2"), auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Revoked, []string{"client-n2"}) {
		t.Fatalf("Gen revoked %v; want [client-n2]", res.Revoked)
	}
	push(t, srv.URL(), res.Authority, res.Accounts)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("client-n2's connection is open 5 s after its revocation was pushed")
	}
	if !refused(t, srv.URL(), old) {
		t.Error("client-n2's old credentials connect after its revocation was pushed")
	}
	if err := n1.Flush(); err != nil || !n1.IsConnected() {
		t.Errorf("client-n1 lost its connection (%v); only client-n2 was revoked", err)
	}

	// The folder of revoked credentials is lost: nothing changes.
	account := filepath.Join(dir, auth.AccountsDir, auth.AccountName+".jwt")
	before, err := os.ReadFile(account)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, auth.RevokedDir)); err != nil {
		t.Fatal(err)
	}
	again, err := auth.Gen(dir, without(parties, "client-n2"), auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(account); string(after) != string(before) {
		t.Errorf("with %s deleted, Gen signed the account anew:\n%s\nwant\n%s", auth.RevokedDir, after, before)
	}
	ac, err := jwt.DecodeAccountClaims(again.Accounts[1])
	if err != nil {
		t.Fatal(err)
	}
	pub, err := auth.PublicKey(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ac.Revocations[pub]; !ok {
		t.Errorf("the account's JWT no longer revokes client-n2 (%s)", pub)
	}
	srv.Shutdown()
	fresh := serve(t, dir, t.TempDir())
	if !refused(t, fresh.URL(), old) {
		t.Error("a server started anew accepts client-n2's old credentials")
	}
	if refused(t, fresh.URL(), auth.CredsPath(dir, "client-n1")) {
		t.Error("a server started anew refuses client-n1")
	}
}

// TestNarrowedPermissionsRefuseOldCreds moves the module m off n1: Gen
// signs client-n1's user in the requests account anew without m's
// permissions and revokes its earlier JWTs, so that once pushed the old
// credentials (which still let it ask for m's secrets) are refused while
// the new ones connect.
func TestNarrowedPermissionsRefuseOldCreds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	asking := auth.AccountCredsPath(dir, access.Requests, "client-n1")
	old := copyFile(t, asking)
	if refused(t, srv.URL(), old) {
		t.Fatal("client-n1 refused before any change")
	}
	f, err := meshfile.Parse("test.yaml", []byte(strings.Replace(testMesh, "n1: [mesh-vault, a, m]", "n1: [mesh-vault, a]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, operators))
	if err != nil {
		t.Fatal(err)
	}
	res, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Narrowed, []string{"client-n1"}) || !slices.Equal(res.Signed, []string{"client-n1"}) {
		t.Fatalf("Gen narrowed %v and signed %v; want [client-n1] for both", res.Narrowed, res.Signed)
	}
	push(t, srv.URL(), res.Authority, res.Accounts)
	if !refused(t, srv.URL(), old) {
		t.Error("client-n1's credentials from before its permissions were narrowed still connect")
	}
	if refused(t, srv.URL(), asking) {
		t.Error("client-n1's new credentials are refused")
	}
}

// TestGenAgainWritesTheSameBytes runs Gen twice with the same parties:
// every file it wrote (the include, the accounts' and the operator's JWTs,
// every party's and operator's credentials) holds the same bytes.
func TestGenAgainWritesTheSameBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, parties := gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	files := func() map[string]string {
		out := map[string]string{}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasPrefix(path, filepath.Join(dir, auth.ResolverDir)) {
				return err
			}
			b, err := os.ReadFile(path)
			out[path] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := files()
	for _, want := range []string{first.Include, first.Config, filepath.Join(dir, auth.AccountsDir, "operator.jwt"),
		filepath.Join(dir, auth.AccountsDir, "mesh.jwt"), first.System["operator"], first.Creds["client-n1"]} {
		if _, ok := before[want]; !ok {
			t.Fatalf("Gen wrote no %s", want)
		}
	}
	again, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Signed) != 0 {
		t.Errorf("Gen again signed %v anew; want none", again.Signed)
	}
	after := files()
	for path, b := range before {
		if after[path] != b {
			t.Errorf("Gen again changed %s", path)
		}
	}
	if len(after) != len(before) {
		t.Errorf("Gen again wrote %d files; want the %d of the first", len(after), len(before))
	}
	// The server's own reload of these files is in the process test of
	// package main (TestStandaloneNodeJoinAndLeave), with nats-server's
	// binary: the embedded server overrides some of their options.
	srv.Shutdown()
}

// TestOperatorConfigIsKept runs Gen over a directory whose ConfigFile the
// operator wrote (their listen and monitoring blocks): Gen leaves it as it
// is, and the server runs it with the include Gen wrote. A configuration
// an earlier version of Gen wrote whole (resolver MEMORY) is replaced.
func TestOperatorConfigIsKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gen(t, dir)
	mine := "# mine\ninclude \"auth.conf\"\nhttp_port: -1\njetstream: {store_dir: \"" + filepath.Join(dir, "js") + "\"}\n" +
		"resolver: {type: full, dir: \"" + filepath.Join(dir, "my-resolver") + "\"}\n"
	if err := os.WriteFile(filepath.Join(dir, auth.ConfigFile), []byte(mine), 0o600); err != nil {
		t.Fatal(err)
	}
	res, _ := gen(t, dir)
	if b, _ := os.ReadFile(res.Config); string(b) != mine || !res.ConfigKept {
		t.Errorf("Gen over the operator's configuration (kept %v) left\n%s\nwant\n%s", res.ConfigKept, b, mine)
	}
	srv := serve(t, dir, t.TempDir())
	if refused(t, srv.URL(), res.Creds["operator"]) {
		t.Error("the operator is refused by a server of the operator's configuration")
	}
	if _, err := os.Stat(filepath.Join(dir, "my-resolver")); err != nil {
		t.Errorf("the operator's resolver directory: %v", err)
	}

	old := "# nats-server configuration of test.yaml, written by \"mesh-provisioner auth gen\".\noperator: \"x\"\nresolver: MEMORY\n"
	if err := os.WriteFile(filepath.Join(dir, auth.ConfigFile), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	res, _ = gen(t, dir)
	if b, _ := os.ReadFile(res.Config); res.ConfigKept || !strings.Contains(string(b), "include \"auth.conf\"") {
		t.Errorf("Gen over an earlier Gen's whole configuration (kept %v) left\n%s\nwant one that includes auth.conf", res.ConfigKept, b)
	}
}

// TestLooseDirIsRefused: Gen refuses a directory others may write, and
// writes nothing into it.
func TestLooseDirIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, parties := gen(t, t.TempDir())
	if _, err := auth.Gen(dir, parties, auth.Options{}); !errors.Is(err, auth.ErrLooseDir) {
		t.Fatalf("Gen into a directory of mode 0777 = %v; want %v", err, auth.ErrLooseDir)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Gen refused the directory but wrote %d entries into it", len(ents))
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Gen(dir, parties, auth.Options{}); err != nil {
		t.Errorf("Gen into the directory made 0700: %v", err)
	}
}

// TestLooseFilesAreRefused: with dir itself 0755, Gen (and Open) refuse a
// file or directory under it that its group or others may write (the
// server's configuration 0666, keys/ 0777, a credentials file 0666, the
// resolver's directory 0777) and a JetStream store outside dir of mode
// 0777, naming the path, and change nothing of it; with each made go-w
// again Gen runs.
func TestLooseFilesAreRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(t.TempDir(), "js")
	_, parties := gen(t, t.TempDir())
	res, err := auth.Gen(dir, parties, auth.Options{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(dir, auth.ConfigFile), 0o666},
		{filepath.Join(dir, auth.IncludeFile), 0o620},
		{filepath.Join(dir, auth.KeysDir), 0o777},
		{res.Creds["client-n1"], 0o666},
		{filepath.Join(dir, auth.ResolverDir), 0o777},
		{store, 0o777},
	} {
		st, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(c.path, c.mode); err != nil {
			t.Fatal(err)
		}
		_, err = auth.Gen(dir, parties, auth.Options{StoreDir: store})
		if !errors.Is(err, auth.ErrLooseDir) || !strings.Contains(err.Error(), c.path+" has mode "+fmt.Sprintf("%04o", c.mode)) {
			t.Errorf("Gen with %s of mode %04o = %v; want %v naming it", c.path, c.mode, err, auth.ErrLooseDir)
		}
		if _, err := auth.Open(dir, auth.Options{StoreDir: store}); !errors.Is(err, auth.ErrLooseDir) {
			t.Errorf("Open with %s of mode %04o = %v; want %v", c.path, c.mode, err, auth.ErrLooseDir)
		}
		if now, _ := os.Stat(c.path); now.Mode().Perm() != c.mode {
			t.Errorf("%s's mode is %04o after the refusal; want it left %04o", c.path, now.Mode().Perm(), c.mode)
		}
		if err := os.Chmod(c.path, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.Gen(dir, parties, auth.Options{StoreDir: store}); err != nil {
			t.Errorf("Gen with %s of mode %04o again: %v", c.path, st.Mode().Perm(), err)
		}
	}
}

// TestExpiredUserIsRefusedRenewedWorks issues users whose JWTs live 6 s (a
// renewal is due in their last 2 s):
// a connection whose file is renewed before the expiry stays usable past
// it (the server closes it at the old JWT's expiry, and it connects again
// with the renewed file), while a copy of the old file is refused once
// expired.
func TestExpiredUserIsRefusedRenewedWorks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := meshfile.Parse("test.yaml", []byte(testMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, operators))
	if err != nil {
		t.Fatal(err)
	}
	res, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js"), Expiry: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, dir, t.TempDir())
	path := res.Creds["client-n1"]
	old := copyFile(t, path)
	token, _ := jwt.ParseDecoratedJWT(mustRead(t, old))
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil || uc.Expires == 0 || uc.Expires-uc.IssuedAt != 6 {
		t.Fatalf("client-n1's JWT expires at %d, issued at %d (%v); want 6 s after", uc.Expires, uc.IssuedAt, err)
	}
	// The authority renews what is due every 50 ms until the test ends, as
	// up renews daily: each renewed JWT lives 6 s too, and on a loaded
	// machine the checks below came after the first renewal's own expiry
	// (the renewed file was refused 14 s into the test).
	renewed := make(chan struct{})
	stop, done := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		first := true
		for {
			users, err := res.Authority.Renew()
			if err != nil {
				t.Errorf("renew: %v", err)
				return
			}
			if first && slices.Contains(users, "client-n1") {
				first = false
				close(renewed)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var nc *nats.Conn
	for range 5 {
		if nc, _, err = bus.Connect(bus.Dial{URL: srv.URL(), Name: "client-n1", Creds: path}); err == nil || !cutBeforeAnswer(err) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case <-renewed:
	case <-time.After(10 * time.Second):
		t.Fatal("client-n1 was not due for renewal within 10 s")
	}
	bustest.WaitFor(t, 30*time.Second, "client-n1's old credentials refused as expired", func() bool {
		return refused(t, srv.URL(), old)
	})
	bustest.WaitFor(t, 30*time.Second, "client-n1's connection usable past its first JWT's expiry", func() bool {
		return nc.IsConnected() && nc.FlushTimeout(time.Second) == nil
	})
	// A file renewed in its last 2 s can expire during a connect that
	// takes as long (a loaded machine): the renewed file must connect
	// within a few tries, each with the file as it is then.
	bustest.WaitFor(t, 30*time.Second, "client-n1's renewed credentials to connect", func() bool {
		return !refused(t, srv.URL(), path)
	})
}

// TestOperatorSystemUser: the operator's system-account user answers the
// servers' reports (what "nats server report jetstream", "list" and "info"
// ask), while the pushing user may not ask them; and the operator's user
// is refused (a permissions violation naming the subject) every request that
// changes a server or lists every subscription: pushing an account JWT
// (an older one would undo revocations), purging the mesh account's
// JetStream (every bucket), kicking a connection, lame duck mode, a reload,
// and the connections' and subscriptions' lists.
func TestOperatorSystemUser(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, _ := gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	violations := make(chan string, 64)
	nc, err := dial(srv.URL(), nats.UserCredentials(res.System["operator"]),
		nats.CustomInboxPrefix(access.InboxPrefix("operator")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() }))
	if err != nil {
		t.Fatalf("the operator's system user: %v", err)
	}
	defer nc.Close()
	m, err := nc.Request("$SYS.REQ.SERVER.PING.JSZ", nil, 3*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"server"`) {
		t.Fatalf("JetStream report as the operator's system user = %v; want a server's answer", err)
	}
	var jsz struct {
		Server struct{ ID string } `json:"server"`
	}
	if err := json.Unmarshal(m.Data, &jsz); err != nil || jsz.Server.ID == "" {
		t.Fatalf("JetStream report %s: %v; want the server's id", m.Data, err)
	}
	id := jsz.Server.ID
	for _, subj := range []string{"$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER." + id + ".VARZ", "$SYS.REQ.SERVER.PING.HEALTHZ"} {
		if m, err := nc.Request(subj, nil, 3*time.Second); err != nil || !strings.Contains(string(m.Data), id) {
			t.Errorf("%s as the operator's system user = %v; want the server's answer", subj, err)
		}
	}
	jwts, err := res.Authority.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	mesh := res.Authority.AccountKeys()
	attacks := map[string][]byte{
		auth.ClaimsUpdate: []byte(jwts[1]),
		"$SYS.REQ.ACCOUNT." + mesh[1] + ".CLAIMS.UPDATE": []byte(jwts[1]),
		"$SYS.REQ.CLAIMS.DELETE":                         nil,
		"$JS.API.ACCOUNT.PURGE." + mesh[1]:               nil,
		"$SYS.REQ.SERVER." + id + ".KICK":                []byte(`{"cid":1}`),
		"$SYS.REQ.SERVER." + id + ".LDM":                 []byte(`{"cid":1}`),
		"$SYS.REQ.SERVER." + id + ".RELOAD":              nil,
		"$SYS.REQ.SERVER.PING.CONNZ":                     []byte(`{"subscriptions":true}`),
		"$SYS.REQ.SERVER." + id + ".CONNZ":               nil,
		"$SYS.REQ.SERVER.PING.SUBSZ":                     nil,
	}
	for subj, body := range attacks {
		if m, err := nc.Request(subj, body, 500*time.Millisecond); err == nil {
			t.Errorf("%s as the operator's system user answered %q; want it refused", subj, m.Data)
		}
		want := `permissions violation for publish to "` + strings.ToLower(subj) + `"`
		bustest.WaitFor(t, 5*time.Second, "a permissions violation for "+subj, func() bool {
			for {
				select {
				case v := <-violations:
					if strings.Contains(strings.ToLower(v), want) {
						return true
					}
				default:
					return false
				}
			}
		})
	}
	pusher, err := res.Authority.SystemCreds()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := dial(srv.URL(), nats.UserCredentials(pusher), nats.CustomInboxPrefix(access.InboxPrefix(auth.PushUser)))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.Request("$SYS.REQ.SERVER.PING.JSZ", nil, 500*time.Millisecond); err == nil {
		t.Error("the pushing user got the JetStream report; want it refused")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGenKeepsItsSettings: a directory made with a domain and an expiry
// keeps them for a later run given neither (as node join runs it): that run
// signs nothing anew, and a new party's JWT has the domain's API and the
// same life.
func TestGenKeepsItsSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := meshfile.Parse("test.yaml", []byte(testMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, operators))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Gen(dir, without(parties, "client-n2"), auth.Options{Domain: "hub", Expiry: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	res, err := auth.Gen(dir, parties, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Signed, []string{"client-n2"}) {
		t.Errorf("Gen with no options signed %v anew; want only the new client-n2", res.Signed)
	}
	token, err := jwt.ParseDecoratedJWT(mustRead(t, res.Creds["client-n2"]))
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Expires-uc.IssuedAt != int64((48 * time.Hour).Seconds()) {
		t.Errorf("client-n2's JWT lives %d s; want 48 h as the directory keeps", uc.Expires-uc.IssuedAt)
	}
	if !slices.ContainsFunc(uc.Pub.Allow, func(s string) bool { return strings.HasPrefix(s, "$JS.hub.API.") }) {
		t.Errorf("client-n2 may publish %v; want JetStream's API in the domain hub too", uc.Pub.Allow)
	}
}

// TestRemovedAfterNarrowedIsRefused: the module m moves off n1 (client-n1's
// requests user is narrowed, its older JWTs revoked, the accounts pushed);
// a copy of client-n1's requests file taken then, the node is removed.
// Its key had an entry from the narrowing, older than the JWT signed
// then: the removal revokes every JWT of the key issued up to now, so the
// copy is refused at once, and still after DIR/revoked is deleted, Gen is
// run again and the server started anew; client-n2's file connects.
func TestRemovedAfterNarrowedIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gen(t, dir)
	store := t.TempDir()
	srv := serve(t, dir, store)
	f, err := meshfile.Parse("test.yaml", []byte(strings.Replace(strings.Replace(testMesh,
		"n1: [mesh-vault, a, m]", "n1: [mesh-vault, a]", 1), "n2: [b, n]", "n2: [b, n, m]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, operators))
	if err != nil {
		t.Fatal(err)
	}
	opts := auth.Options{StoreDir: filepath.Join(dir, "js")}
	res, err := auth.Gen(dir, parties, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Narrowed, "client-n1") {
		t.Fatalf("Gen narrowed %v; want client-n1 among them", res.Narrowed)
	}
	push(t, srv.URL(), res.Authority, res.Accounts)
	held := copyFile(t, auth.AccountCredsPath(dir, access.Requests, "client-n1"))
	neighbour := auth.AccountCredsPath(dir, access.Requests, "client-n2")
	if refused(t, srv.URL(), held) {
		t.Fatal("client-n1's requests file signed after the narrowing is refused before its removal")
	}

	left := without(parties, "client-n1")
	res, err = auth.Gen(dir, left, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Revoked, []string{"client-n1"}) {
		t.Fatalf("Gen revoked %v; want [client-n1]", res.Revoked)
	}
	push(t, srv.URL(), res.Authority, res.Accounts)
	if !refused(t, srv.URL(), held) {
		t.Error("client-n1's requests file connects after its removal was pushed")
	}
	if refused(t, srv.URL(), neighbour) {
		t.Error("client-n2's requests file is refused; only client-n1 was removed")
	}

	if err := os.RemoveAll(filepath.Join(dir, auth.RevokedDir)); err != nil {
		t.Fatal(err)
	}
	res, err = auth.Gen(dir, left, opts)
	if err != nil {
		t.Fatal(err)
	}
	push(t, srv.URL(), res.Authority, res.Accounts)
	srv.Shutdown()
	fresh := serve(t, dir, store)
	if !refused(t, fresh.URL(), held) {
		t.Error("with DIR/revoked deleted and the server started anew, client-n1's requests file connects")
	}
	if refused(t, fresh.URL(), neighbour) {
		t.Error("the server started anew refuses client-n2's requests file")
	}
}

// TestMergeKeepsTheLaterRevocation: a server's copy of the storage
// account that revokes client-n2's key at an earlier time (and was signed
// later) changes nothing: Merge keeps the later time of the two, and the
// account's JWT still revokes every JWT of the key issued up to the
// removal.
func TestMergeKeepsTheLaterRevocation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, parties := gen(t, dir)
	pub, err := auth.PublicKey(auth.CredsPath(dir, "client-n2"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := auth.Gen(dir, without(parties, "client-n2"), auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	revokedAt := func(tokens []string) int64 {
		t.Helper()
		for _, token := range tokens {
			ac, err := jwt.DecodeAccountClaims(token)
			if err != nil {
				t.Fatal(err)
			}
			if ac.Name == auth.AccountName {
				return ac.Revocations[pub]
			}
		}
		t.Fatalf("no JWT of the account %s", auth.AccountName)
		return 0
	}
	at := revokedAt(res.Accounts)
	if at == 0 {
		t.Fatal("Gen did not revoke client-n2")
	}
	ac, err := jwt.DecodeAccountClaims(res.Accounts[1])
	if err != nil {
		t.Fatal(err)
	}
	if ac.Name != auth.AccountName {
		t.Fatalf("the second JWT is of %s; want %s", ac.Name, auth.AccountName)
	}
	ac.Revocations[pub] = at - 3600
	seed, err := os.ReadFile(filepath.Join(dir, auth.KeysDir, "operator.nk"))
	if err != nil {
		t.Fatal(err)
	}
	op, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		t.Fatal(err)
	}
	older, err := ac.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := res.Authority.Merge(older)
	if err != nil || changed {
		t.Errorf("Merge of a copy revoking client-n2 an hour earlier = %v, %v; want false, nil", changed, err)
	}
	jwts, err := res.Authority.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	if got := revokedAt(jwts); got != at {
		t.Errorf("after Merge the account revokes client-n2 at %d; want %d, the later", got, at)
	}
}

// TestAnOlderAccountPushedUndoesRevocations shows what docs/trust.md says
// of the pushing user: nats-server's full resolver takes an older account
// JWT pushed on $SYS.REQ.CLAIMS.UPDATE (one signed before client-n2 was
// revoked, its iat a second or more before the stored one's), and
// client-n2's old credentials connect again: the handler saves a pushed
// JWT with the store's save, never saveIfNewer (v2.15.2
// server/accounts.go line 4620). Pushing the authority's accounts again
// (auth push) refuses them anew. The test stands for the documented
// limit: it fails once a server refuses the older push.
func TestAnOlderAccountPushedUndoesRevocations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, parties := gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	old := copyFile(t, auth.CredsPath(dir, "client-n2"))
	older := strings.TrimSpace(string(mustRead(t, filepath.Join(dir, auth.AccountsDir, auth.AccountName+".jwt"))))
	res, err := auth.Gen(dir, without(parties, "client-n2"), auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	push(t, srv.URL(), res.Authority, res.Accounts)
	bustest.WaitFor(t, 5*time.Second, "client-n2 refused after its revocation", func() bool { return refused(t, srv.URL(), old) })

	push(t, srv.URL(), res.Authority, []string{older})
	bustest.WaitFor(t, 5*time.Second, "client-n2 let in again by the older account JWT", func() bool { return !refused(t, srv.URL(), old) })

	a, err := auth.Open(dir, auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	jwts, err := a.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	push(t, srv.URL(), a, jwts)
	bustest.WaitFor(t, 5*time.Second, "client-n2 refused once the accounts are pushed again", func() bool { return refused(t, srv.URL(), old) })
}
