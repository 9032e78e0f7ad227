package main

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// natsServer builds nats-server's own binary from the module's
// dependency, once per test binary, and returns its path.
var natsServer = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "mesh-nats-server")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nats-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", &exec.ExitError{Stderr: out}
	}
	return bin, nil
})

// startNATS runs nats-server's binary with the configuration file conf as
// a process of its own.
func startNATS(t *testing.T, conf string) *process {
	t.Helper()
	bin, err := natsServer()
	if err != nil {
		t.Fatalf("go build nats-server: %v", err)
	}
	return startCmd(t, "nats-server", exec.Command(bin, "-c", conf))
}

// runMain runs this binary's command line with args to its end and
// returns its output; it fails t when the command fails.
func runMain(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mesh-provisioner %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// freePort returns a loopback TCP port nobody listens on now, below
// Linux's ephemeral range (32768 and up by default): a port picked there
// and let go could be taken, before the server binds it, as the source
// port of any outgoing connection of the machine (a server once failed
// with "address already in use" so). Each port is handed out once per
// process.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// joinMesh is the mesh of TestStandaloneNodeJoinAndLeave: the vault on
// control; with ace, the module app placed there.
const joinMesh = `nodes: [control%s]
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
placement:
  control: [mesh-vault]
%s`

// TestStandaloneNodeJoinAndLeave runs a standalone deployment as its
// operator would: nats-server's own binary from the configuration auth gen
// wrote (the operator adds its listen line), the seat as a process of its
// own. A node added to the mesh file joins with "node join" while the
// server runs: its client, started with the one credentials file join
// names, applies its plan; "nats-server --signal reload" of the files
// gen wrote again is accepted. Removed with "node leave", its client's
// connection is closed and its old credentials refused at once, and still
// after DIR/revoked is deleted and auth gen run again. The server is never
// restarted, and the operator's edit of its file stays.
func TestStandaloneNodeJoinAndLeave(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	work := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(work, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	one := write("one.yaml", strings.Replace(strings.Replace(joinMesh, "%s", "", 1), "%s", "", 1))
	two := write("two.yaml", strings.Replace(strings.Replace(joinMesh, "%s", ", ace", 1), "%s", "  ace: [app]\n", 1))

	runMain(t, "auth", "gen", "-f", one, "-o", dir)
	conf := filepath.Join(dir, auth.ConfigFile)
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	// The operator's own edit of the file gen wrote once.
	mine, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	mine = append(mine, []byte("\n# mine\nlisten: 127.0.0.1:"+strconv.Itoa(port)+"\n")...)
	if err := os.WriteFile(conf, mine, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startNATS(t, conf)
	op := auth.CredsPath(dir, access.DefaultOperator)
	waitFor(t, 0, "nats-server to accept the operator", []*process{srv}, func() bool {
		nc, err := nats.Connect(url, nats.UserCredentials(op))
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	seat := start(t, "seat", "serve", "--nats", url, "--creds", auth.CredsPath(dir, mesh.Module))
	procs := []*process{srv, seat}
	runMain(t, "apply", "-f", one, "--nats", url, "--creds", op)

	// ace joins: the file first, then its users, while the server runs.
	runMain(t, "apply", "-f", two, "--nats", url, "--creds", op)
	out := runMain(t, "node", "join", "ace", "-f", two, "-o", dir, "--nats", url)
	aceCreds := auth.CredsPath(dir, access.ClientUser("ace"))
	if !strings.Contains(out, "hand "+aceCreds+" and "+bus.AccountCreds(aceCreds, access.Requests)+" (in the same layout) to ace") {
		t.Errorf("node join ace printed\n%s\nwant it to name %s", out, aceCreds)
	}
	// The client's command names the file by its absolute path and a root
	// that is not DIR (the auth directory's name everywhere else).
	hint := "mesh-provisioner client --node ace --nats " + url + " --creds " + aceCreds + " --root /srv/mesh\n"
	if !strings.Contains(out, hint) {
		t.Errorf("node join ace printed\n%s\nwant the client's command %q", out, hint)
	}
	if b, _ := os.ReadFile(conf); string(b) != string(mine) {
		t.Errorf("node join changed the operator's %s:\n%s", conf, b)
	}
	root := filepath.Join(t.TempDir(), "ace")
	client := start(t, "client-ace", "client", "--node", "ace", "--root", root, "--nats", url, "--creds", aceCreds)
	procs = append(procs, client)

	nc, js, err := bus.Connect(bus.Dial{URL: url, Name: "operator", Creds: op})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := bustest.Context(t)
	plans := bus.Follow(ctx, js, mesh.PlansBucket, bus.Options{Create: true})
	applied := bus.Follow(ctx, js, mesh.AppliedBucket, bus.Options{Create: true})
	waitFor(t, 20*time.Second, "ace's client to apply ace.app", procs, func() bool {
		pi, ok := plans.Get("ace.app")
		ai, ok2 := applied.Get("ace.app")
		var p mesh.Plan
		var a mesh.Applied
		return ok && ok2 && json.Unmarshal(pi.Value, &p) == nil && json.Unmarshal(ai.Value, &a) == nil && a.Fingerprint == p.Fingerprint
	})
	if st, err := os.Stat(filepath.Join(root, "app", "state")); err != nil || !st.IsDir() {
		t.Errorf("ace's client made no folder app/state under its root: %v", err)
	}

	// The files gen writes again are the same: the server reloads them.
	runMain(t, "auth", "gen", "-f", two, "-o", dir)
	bin, _ := natsServer()
	if b, err := exec.Command(bin, "--signal", "reload="+strconv.Itoa(srv.cmd.Process.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("nats-server --signal reload: %v\n%s", err, b)
	}
	waitFor(t, 0, "nats-server to reload its configuration", procs, func() bool {
		return strings.Contains(srv.output(), "Reloaded server configuration")
	})
	if o := srv.output(); strings.Contains(o, "not supported") || strings.Contains(o, "[ERR]") && strings.Contains(o, "reload") {
		t.Errorf("nats-server refused the reload:\n%s", o)
	}

	// ace leaves: its client's connection is closed, its credentials
	// refused, and its client is told so.
	old := filepath.Join(t.TempDir(), "client-ace.creds")
	if b, err := os.ReadFile(aceCreds); err != nil || os.WriteFile(old, b, 0o600) != nil {
		t.Fatal(err)
	}
	runMain(t, "apply", "-f", one, "--nats", url, "--creds", op, "--yes")
	out = runMain(t, "node", "leave", "ace", "-f", one, "-o", dir, "--nats", url)
	if !strings.Contains(out, "revoked: client-ace") {
		t.Errorf("node leave ace printed\n%s\nwant client-ace revoked", out)
	}
	refusedNow := func() bool {
		c, err := nats.Connect(url, nats.UserCredentials(old), nats.NoReconnect())
		if err == nil {
			c.Close()
			return false
		}
		return true
	}
	if !refusedNow() {
		t.Error("ace's old credentials connect right after node leave")
	}
	waitFor(t, 0, "ace's client to be told its authorization is revoked", []*process{srv, seat}, func() bool {
		return strings.Contains(strings.ToLower(client.output()), "revoked")
	})
	// A standalone client whose access was removed stops, saying so, and
	// exits non-zero: it does not try again for ever.
	waitFor(t, 0, "ace's client to stop once its access was removed", []*process{srv, seat}, client.exited)
	if client.err == nil || !strings.Contains(client.output(), "access to the mesh was removed") {
		t.Errorf("ace's client exited with %v, saying:\n%s\nwant a non-zero exit saying its access to the mesh was removed", client.err, client.output())
	}
	client.mu.Lock()
	client.killed = true // its exit is checked here, not on SIGTERM
	client.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(dir, auth.RevokedDir)); err != nil {
		t.Fatal(err)
	}
	runMain(t, "auth", "gen", "-f", one, "-o", dir, "--push", url)
	if !refusedNow() {
		t.Error("ace's old credentials connect after DIR/revoked was deleted and auth gen pushed again")
	}
	if srv.exited() {
		t.Error("nats-server stopped; it was never to be restarted")
	}
	if b, _ := os.ReadFile(conf); string(b) != string(mine) {
		t.Errorf("auth gen changed the operator's %s", conf)
	}
}
