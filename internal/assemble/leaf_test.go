package assemble_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestEdgeClientWaitsForItsLeafLink starts an edge node's client on its
// leafnode server (no JetStream of its own) before the leaf has linked to
// the hub, whose JetStream (domain "hub") holds the mesh: the client's
// start waits, saying once at warn level that the leaf reaches no
// JetStream in its domain yet, and starts once the hub runs and the leaf
// links to it; it then applies its node's plan through the leaf. Before,
// the start failed at once with "has no JetStream".
func TestEdgeClientWaitsForItsLeafLink(t *testing.T) {
	leafPort := freeLoopbackPort(t)
	leaf, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", NoJetStream: true,
		Config: fmt.Sprintf("leafnodes { remotes: [ { url: \"nats-leaf://127.0.0.1:%d\" } ] }\n", leafPort)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(leaf.Shutdown)
	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the client said:\n%s", said.text())
		}
	})
	a := &assemble.Assembly{Log: log, Dial: func(c assemble.Component) bus.Dial {
		return bus.Dial{URL: leaf.URL(), Name: c.Name(), Domain: "hub", Log: log}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); a.Wait() })
	started := make(chan error, 1)
	go func() {
		_, _, err := a.StartClient(ctx, client.Config{Node: "ace", Root: t.TempDir()})
		started <- err
	}()
	const waits = "assemble: the bus does not answer yet; trying the start again"
	bustest.WaitFor(t, 30*time.Second, "the client's start to try three times", func() bool {
		select {
		case err := <-started:
			t.Fatalf("the client's start before the leaf linked returned %v; want it to wait", err)
		default:
		}
		return said.count(waits, "reaches no JetStream in the domain hub yet") >= 3
	})
	if n := said.count("level=WARN", waits); n != 1 {
		t.Errorf("the client said %d times at warn level that it waits for its leaf's link; want once", n)
	}

	// The hub, with the mesh's buckets and ace's plan.
	hub, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0",
		Config: fmt.Sprintf("jetstream { domain: hub }\nleafnodes { listen: \"127.0.0.1:%d\" }\n", leafPort)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Shutdown)
	_, js := bustest.Connect(t, hub, "seat")
	for _, b := range []string{mesh.PlansBucket, mesh.RegistryBucket, mesh.AppliedBucket, mesh.CollectBucket} {
		if _, err := bus.Bucket(ctx, js, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	plans, _ := js.KeyValue(ctx, mesh.PlansBucket)
	plan, _ := json.Marshal(mesh.Plan{Node: "ace", Module: "app", Fingerprint: "f00d01"})
	if _, err := plans.Put(ctx, "ace.app", plan); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("the client's start once the leaf linked: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the client did not start within 60 s of the hub")
	}
	if said.count("assemble: started once the bus answered", `component="client of ace"`) != 1 {
		t.Error("the client did not say once that it started once the bus answered")
	}
	applied, _ := js.KeyValue(ctx, mesh.AppliedBucket)
	bustest.WaitFor(t, 30*time.Second, "ace.app applied through the leaf", func() bool {
		e, err := applied.Get(ctx, "ace.app")
		if err != nil {
			return false
		}
		var a mesh.Applied
		return json.Unmarshal(e.Value(), &a) == nil && a.Fingerprint == "f00d01"
	})
}

// freeLoopbackPort returns a loopback TCP port free now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
