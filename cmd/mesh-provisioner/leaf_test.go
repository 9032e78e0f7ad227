package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestEdgeNodeThroughItsLeaf runs an edge node's client against the
// leafnode server auth gen writes with --leaf and --domain (nats-server's
// own binary, without JetStream), linked to the hub's leafnode port: the
// client applies its node's plan through the leaf, reaching the hub's
// JetStream in its domain, with its own credentials, which may not ask the
// account's JetStream info (the server refuses it). Once the node leaves,
// the hub closes the leaf's links (they connect as the node's client) and
// refuses the old credentials. In between the servers stop and start again:
// the leaf takes the node's connections meanwhile, the client stays up, and
// once linked again it applies the node's changed plan.
func TestEdgeNodeThroughItsLeaf(t *testing.T) {
	t.Parallel()
	bustest.Long(t, "that an edge node's client applies its plans through its leafnode server to the hub's JetStream, rides out both servers restarting, and that its leaf's links are closed once the node leaves")
	dir := filepath.Join(t.TempDir(), "auth")
	work := t.TempDir()
	one := filepath.Join(work, "one.yaml")
	two := filepath.Join(work, "two.yaml")
	os.WriteFile(one, []byte(strings.Replace(strings.Replace(joinMesh, "%s", "", 1), "%s", "", 1)), 0o600)
	os.WriteFile(two, []byte(strings.Replace(strings.Replace(joinMesh, "%s", ", ace", 1), "%s", "  ace: [app]\n", 1)), 0o600)
	hubPort, hubLeaf, leafPort := freePort(t), freePort(t), freePort(t)
	hub := "nats://127.0.0.1:" + strconv.Itoa(hubPort)
	leafURL := "nats://127.0.0.1:" + strconv.Itoa(leafPort)
	out := runMain(t, "auth", "gen", "-f", two, "-o", dir, "--domain", "hub",
		"--leaf", "ace:"+strconv.Itoa(leafPort)+"=nats-leaf://127.0.0.1:"+strconv.Itoa(hubLeaf))
	leafConf := filepath.Join(dir, auth.LeavesDir, "ace", auth.ConfigFile)
	if !strings.Contains(out, "leaf of ace: nats-server -c "+leafConf) {
		t.Fatalf("auth gen printed\n%s\nwant the leaf of ace", out)
	}
	// The operator's own lines: the hub's listen and leafnode ports.
	conf := filepath.Join(dir, auth.ConfigFile)
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\nlisten: 127.0.0.1:" + strconv.Itoa(hubPort) + "\nleafnodes: {listen: 127.0.0.1:" + strconv.Itoa(hubLeaf) + "}\n")
	f.Close()
	srv := startNATS(t, conf)
	op := auth.CredsPath(dir, access.DefaultOperator)
	waitFor(t, 0, "the hub to accept the operator", []*process{srv}, func() bool {
		nc, err := nats.Connect(hub, nats.UserCredentials(op))
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	leaf := startNATS(t, leafConf)
	seat := start(t, "seat", "serve", "--nats", hub, "--creds", auth.CredsPath(dir, mesh.Module))
	procs := []*process{srv, leaf, seat}
	waitFor(t, 0, "the leaf to link to the hub", procs, func() bool {
		return strings.Contains(leaf.output(), "Leafnode connection created")
	})
	runMain(t, "apply", "-f", two, "--nats", hub, "--creds", op)
	client := start(t, "client-ace", "client", "--node", "ace", "--root", filepath.Join(t.TempDir(), "ace"),
		"--nats", leafURL, "--domain", "hub", "--creds", auth.CredsPath(dir, access.ClientUser("ace")))
	procs = append(procs, client)

	nc, js, err := bus.Connect(bus.Dial{URL: hub, Name: "operator", Creds: op})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := bustest.Context(t)
	plans := bus.Follow(ctx, js, mesh.PlansBucket, bus.Options{Create: true})
	applied := bus.Follow(ctx, js, mesh.AppliedBucket, bus.Options{Create: true})
	waitFor(t, 30*time.Second, "ace's client, through its leaf, to apply ace.app", procs, func() bool {
		pi, ok := plans.Get("ace.app")
		ai, ok2 := applied.Get("ace.app")
		var p mesh.Plan
		var a mesh.Applied
		return ok && ok2 && json.Unmarshal(pi.Value, &p) == nil && json.Unmarshal(ai.Value, &a) == nil && a.Fingerprint == p.Fingerprint
	})

	// The client found its domain's JetStream with a direct get of its
	// keys (bus.HasJetStream): the account's JetStream info, which waits
	// in the hub's API queue shared by every account, is refused to it,
	// at the leaf as at the hub.
	for _, at := range []struct{ url, subject string }{{leafURL, "$JS.hub.API.INFO"}, {hub, "$JS.API.INFO"}} {
		violations := make(chan string, 4)
		c, err := nats.Connect(at.url, nats.UserCredentials(auth.CredsPath(dir, access.ClientUser("ace"))),
			nats.CustomInboxPrefix(access.InboxPrefix(access.ClientUser("ace"))),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() }))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Request(at.subject, nil, 2*time.Second); err == nil {
			t.Errorf("ace's client asked %s at %s and was answered; want the server's refusal", at.subject, at.url)
		}
		select {
		case v := <-violations:
			if !strings.Contains(v, `Permissions Violation for Publish to "`+at.subject+`"`) {
				t.Errorf("ace's client's %s at %s: the server said %q; want its permissions violation", at.subject, at.url, v)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("ace's client's %s at %s: no permissions violation", at.subject, at.url)
		}
		c.Close()
	}

	// The site loses the servers: ace's client stays up on its leaf,
	// which still takes the node's connections; once a server is back,
	// the leaf links again and the client applies ace's changed plan.
	links := strings.Count(leaf.output(), "Leafnode connection created") // one per account
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-srv.done
	if c, err := nats.Connect(leafURL, nats.UserCredentials(auth.CredsPath(dir, access.ClientUser("ace"))), nats.NoReconnect()); err != nil {
		t.Errorf("the leaf refuses ace's client while the servers are away: %v", err)
	} else {
		c.Close()
	}
	if client.exited() {
		t.Fatalf("ace's client exited while the servers were away: %v", client.err)
	}
	srv = startNATS(t, conf)
	procs = []*process{srv, leaf, seat, client}
	waitFor(t, 30*time.Second, "the hub back and the leaf linked to it again", procs, func() bool {
		nc, err := nats.Connect(hub, nats.UserCredentials(op))
		if err != nil {
			return false
		}
		nc.Close()
		return strings.Count(leaf.output(), "Leafnode connection created") >= 2*links
	})
	three := filepath.Join(work, "three.yaml")
	changed := strings.Replace(string(mustReadFile(t, two)), "fp: 0a0a0a\n        manifest: {module: app, dirs: [{name: state}]",
		"fp: 0b0b0b\n        manifest: {module: app, dirs: [{name: state}, {name: cache}]", 1)
	if changed == string(mustReadFile(t, two)) {
		t.Fatal("the mesh's app build is not where the test changes it")
	}
	os.WriteFile(three, []byte(changed), 0o600)
	before, _ := plans.Get("ace.app")
	runMain(t, "apply", "-f", three, "--nats", hub, "--creds", op)
	waitFor(t, 30*time.Second, "ace's client, linked again, to apply ace.app's new plan", procs, func() bool {
		pi, ok := plans.Get("ace.app")
		ai, ok2 := applied.Get("ace.app")
		var p mesh.Plan
		var a mesh.Applied
		return ok && ok2 && pi.Revision != before.Revision && json.Unmarshal(pi.Value, &p) == nil && json.Unmarshal(ai.Value, &a) == nil && a.Fingerprint == p.Fingerprint
	})

	old := filepath.Join(t.TempDir(), "client-ace.creds")
	if b, err := os.ReadFile(auth.CredsPath(dir, access.ClientUser("ace"))); err != nil || os.WriteFile(old, b, 0o600) != nil {
		t.Fatal(err)
	}
	runMain(t, "apply", "-f", one, "--nats", hub, "--creds", op, "--yes")
	runMain(t, "node", "leave", "ace", "-f", one, "-o", dir, "--nats", hub)
	waitFor(t, 0, "the hub to close the leaf's links", []*process{srv, leaf, seat}, func() bool {
		return strings.Contains(srv.output(), "Leafnode connection closed")
	})
	if c, err := nats.Connect(hub, nats.UserCredentials(old), nats.NoReconnect()); err == nil {
		c.Close()
		t.Error("ace's old credentials connect to the hub after node leave")
	}
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
