package seat_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A provider's bound bucket deleted and made anew, with an entry at
// revision 1 (below the revisions the seat held): the seat takes the new
// entry. Deleted, and made again empty by the seat's copy: the bucket was
// unknown, not emptied, and the key keeps what its entry said last (it is
// not asked again) until its provider writes it again. Before, the entries
// were taken as lost, the keys asked.
func TestSeatTakesABoundBucketMadeAnew(t *testing.T) {
	h := start(t, homelab(t))
	rp := mesh.BoundBucket("route-proxy")
	const key = "ace.gitea.route"
	for i := range 5 {
		h.put(rp, key, mesh.Entry{State: mesh.Provided, Generation: int64(i)})
	}
	h.waitState(key, mesh.Provided, "")

	if err := h.js.DeleteKeyValue(h.ctx, rp); err != nil {
		t.Fatal(err)
	}
	// Right after a delete the server may still be removing the old store:
	// try again until it is gone.
	var kv jetstream.KeyValue
	bustest.WaitFor(t, 0, rp+" made again", func() bool {
		var err error
		kv, err = bus.Bucket(h.ctx, h.js, rp, 0)
		return err == nil
	})
	rev, err := kv.Put(h.ctx, key, []byte(`{"state":"failed","why":"no certificate for git.example.org"}`))
	if err != nil || rev != 1 {
		t.Fatalf("put in the new %s = revision %d, %v; want 1", rp, rev, err)
	}
	h.waitState(key, mesh.Failed, "no certificate for git.example.org")

	if err := h.js.DeleteKeyValue(h.ctx, rp); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 20*time.Second, "the seat to find "+rp+" gone", func() bool { return !h.seat.Known(rp) })
	bustest.WaitFor(t, 20*time.Second, "the seat to follow "+rp+" made again", func() bool {
		_, err := h.js.KeyValue(h.ctx, rp)
		return err == nil && h.seat.Known(rp)
	})
	h.settle()
	if p, _ := h.provision(key); p.State != mesh.Failed || !strings.HasSuffix(p.Why, "says failed: no certificate for git.example.org") {
		t.Errorf("%s after %s was deleted = %s %q; want failed as its entry said last", key, rp, p.State, p.Why)
	}
	// The provider writes its entry again.
	kv, err = h.js.KeyValue(h.ctx, rp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(h.ctx, key, []byte(`{"state":"provided"}`)); err != nil {
		t.Fatal(err)
	}
	h.waitState(key, mesh.Provided, "")
}

// The buckets the seat writes, deleted: the seat makes them again and
// writes every plan and provision it holds true again.
func TestSeatWritesAgainTheBucketsItWrites(t *testing.T) {
	h := start(t, homelab(t))
	h.put(mesh.BoundBucket("route-proxy"), "ace.gitea.route", mesh.Entry{State: mesh.Provided})
	h.waitState("ace.gitea.route", mesh.Provided, "")
	h.settle()
	for _, b := range []string{mesh.PlansBucket, mesh.ProvisionsBucket} {
		before := h.keys(b, "")
		sort.Strings(before)
		if len(before) == 0 {
			t.Fatalf("%s is empty before the test", b)
		}
		if err := h.js.DeleteKeyValue(h.ctx, b); err != nil {
			t.Fatal(err)
		}
		bustest.WaitFor(t, 20*time.Second, "every key of "+b+" written again", func() bool {
			if _, err := h.js.KeyValue(h.ctx, b); err != nil {
				return false
			}
			now := h.keys(b, "")
			sort.Strings(now)
			return fmt.Sprint(now) == fmt.Sprint(before)
		})
	}
	// The state of a key comes back from its provider's entry.
	h.waitState("ace.gitea.route", mesh.Provided, "")
}

// The provisions bucket deleted while a put of the seat's is in flight,
// stored by the old stream but not yet acknowledged to the seat: the seat
// takes the bucket's loss (the key found gone) only once the put has
// landed, never takes the lost stream's revision, and writes the key again
// into the bucket made anew, expecting no message. Before, the loss was
// taken at once, the landing then noted the old stream's revision, and the
// key's next write was refused ("wrong last sequence: 0") with no change
// ever to follow: the key was never written again.
func TestSeatWritesAgainAKeyLostWithItsPutInFlight(t *testing.T) {
	h := start(t, homelab(t))
	rp := mesh.BoundBucket("route-proxy")
	const key = "ace.gitea.route"
	const why = "no certificate for git.example.org"
	h.put(rp, key, mesh.Entry{State: mesh.Provided})
	h.waitState(key, mesh.Provided, "")
	h.settle()
	before := h.keys(mesh.ProvisionsBucket, "")
	sort.Strings(before)

	// The judgement's put is stored, its ack held back.
	acks := h.seat.HoldAcks()
	released := false
	defer func() {
		if !released {
			acks()
		}
	}()
	h.put(rp, key, mesh.Entry{State: mesh.Failed, Why: why})
	h.waitState(key, mesh.Failed, why)

	// The bucket is deleted and made anew by the seat's copy, which finds
	// the key gone; the change is kept back until the copy has found it,
	// then handed to the loop, which takes it before the ack is let in.
	h.seat.Pause()
	if err := h.js.DeleteKeyValue(h.ctx, mesh.ProvisionsBucket); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 20*time.Second, "the seat's copy to find "+key+" gone", func() bool {
		return h.seat.Keeps(mesh.ProvisionsBucket, key)
	})
	h.seat.Resume(func(bus.Change) bool { return true })()
	// The loop has taken the loss once its queue is empty (it lands
	// nothing meanwhile: it takes what it drained first), or once it waits
	// for the put in flight to write the key again.
	bustest.WaitFor(t, 20*time.Second, "the loop to take the loss", func() bool {
		return h.seat.Queued() == 0 || h.seat.WaitsFor() == mesh.ProvisionsBucket+" "+key
	})
	released = true
	acks()

	bustest.WaitFor(t, 20*time.Second, "every provision written again", func() bool {
		now := h.keys(mesh.ProvisionsBucket, "")
		sort.Strings(now)
		return fmt.Sprint(now) == fmt.Sprint(before)
	})
	h.waitState(key, mesh.Failed, why)
	h.settle()
	for _, e := range h.errs() {
		if strings.Contains(e, key+":") {
			t.Errorf("write error of %s: %s", key, e)
		}
	}
}

// A server back on a wiped store at the same address: the seat (taken
// again, as serve and up do when the lease is lost) composes from what is
// there, which is nothing, and composes the mesh applied anew.
func TestSeatAfterAServerBackOnAnEmptyStore(t *testing.T) {
	dir := t.TempDir()
	srv, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr().String()
	h := &harness{t: t, ctx: bustest.Context(t), srv: srv}
	h.nc, h.js = bustest.Connect(t, srv, "operator")
	h.apply(homelab(t))

	// The seat, taken again whenever its lease is lost.
	_, sjs := bustest.Connect(t, srv, "seat")
	var mu sync.Mutex
	current := func() *seat.Seat { mu.Lock(); defer mu.Unlock(); return h.seat }
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			s := seat.New(sjs, seat.Config{LeaseTTL: time.Second})
			mu.Lock()
			h.seat = s
			mu.Unlock()
			if err := s.Run(ctx); !errors.Is(err, seat.ErrLeaseLost) {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	settled := func(js func() map[string]uint64) {
		t.Helper()
		marks := js()
		bustest.WaitFor(t, 20*time.Second, "the seat to settle", func() bool {
			s := current()
			return s != nil && s.Settled(marks)
		})
	}
	settled(func() map[string]uint64 { return seat.Marks(h.ctx, h.js) })
	plans := h.keys(mesh.PlansBucket, "")
	sort.Strings(plans)
	if len(plans) == 0 {
		t.Fatal("no plans before the wipe")
	}

	srv.Shutdown()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	srv2, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Shutdown)
	_, ojs := bustest.Connect(t, srv2, "operator-2")
	h.js, h.srv = ojs, srv2

	// Nothing is placed on the empty store: the seat, holding the lease
	// again, writes no plan.
	bustest.WaitFor(t, 20*time.Second, "the seat to hold the lease again", func() bool {
		kv, err := ojs.KeyValue(h.ctx, mesh.SeatBucket)
		if err != nil {
			return false
		}
		_, err = kv.Get(h.ctx, mesh.HolderKey)
		return err == nil
	})
	settled(func() map[string]uint64 { return seat.Marks(h.ctx, ojs) })
	if got := h.keys(mesh.PlansBucket, ""); len(got) != 0 {
		t.Errorf("plans on the empty store = %v; want none", got)
	}

	// The mesh applied anew: every plan is written again.
	f, err := meshfile.Parse("homelab.yaml", homelab(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meshfile.Apply(h.ctx, ojs, f, time.Now()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 20*time.Second, "every plan written again", func() bool {
		now := h.keys(mesh.PlansBucket, "")
		sort.Strings(now)
		return fmt.Sprint(now) == fmt.Sprint(plans)
	})
}
