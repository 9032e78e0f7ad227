package assemble_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestRouterHealthSaysWhenJetStreamIsCutOff runs the ask router on a
// three-server cluster (R3 records), connected to one server only (one
// that does not lead the meta group), and stops the other two: its
// connection stays up, but that server alone has no quorum and answers no
// look at the records (once it leads nothing: a server stopping may hand
// it the meta group, which it leads on its own until it finds its quorum
// lost). The router's health says
// so (it said nothing before: the router had no health check, and a check
// of the connection alone says healthy); with the servers back, healthy
// again.
func TestRouterHealthSaysWhenJetStreamIsCutOff(t *testing.T) {
	bustest.Long(t, "that the router's health says when its one server of a three-server cluster loses the quorum, and says healthy once the servers are back")
	c := bustest.Cluster(t)
	quiet := slog.New(slog.DiscardHandler)
	onc, ojs, err := bus.Connect(bus.Dial{URL: c.URL(), Name: "operator", Replicas: 3, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer onc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := bus.Bucket(ctx, ojs, mesh.RecordsBucket, 0); err != nil {
		t.Fatal(err)
	}
	onc.Close()
	// The router's server is one that does not lead the cluster's meta
	// group: a leader answers on its own until it finds its quorum lost
	// (up to some 20 s), a follower at once refuses or times out.
	at := 0
	for at < 2 && c.Server(at).JetStreamIsLeader() {
		at++
	}
	others := []int{(at + 1) % 3, (at + 2) % 3}
	a := &assemble.Assembly{Dial: assemble.Shared(c.Server(at).URL(), "", quiet), Log: quiet, Replicas: 3}
	defer func() {
		cancel()
		a.Wait()
	}()
	r, err := a.StartRouter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	health := r.Health()
	bustest.WaitFor(t, 10*time.Second, "the router's health to say healthy on the whole cluster", func() bool {
		ok, _ := health()
		return ok
	})
	for _, i := range others {
		c.Stop(i)
	}
	stopped := time.Now()
	// A server stopping hands the leaderships it holds to a peer: the
	// last one stopped may hand the meta group to the router's server,
	// which then answers on its own until it finds its quorum lost
	// (nats-server checks every 10 s for peers unseen for 10 s). The
	// health's word is about a server that does not lead: wait for that.
	if c.Server(at).JetStreamIsLeader() {
		t.Logf("server %d took the meta group's lead from a server stopping; waiting for it to find its quorum lost", at+1)
		bustest.WaitFor(t, 30*time.Second, "the router's server to find its quorum lost and give up the meta group's lead", func() bool {
			return !c.Server(at).JetStreamIsLeader()
		})
	}
	bustest.WaitFor(t, 15*time.Second, "the router's health to say JetStream does not answer", func() bool {
		ok, why := health()
		return !ok && strings.Contains(why, "JetStream does not answer")
	})
	_, why := health()
	t.Logf("cut off, %v after the two servers stopped: %s", time.Since(stopped).Round(100*time.Millisecond), why)
	for _, i := range others {
		c.Restart(i)
	}
	bustest.WaitFor(t, 30*time.Second, "the router's health to say healthy again", func() bool {
		ok, _ := health()
		return ok
	})
}
