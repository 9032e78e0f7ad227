package seat_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A seat whose bus answers each request later than a renewal's try lasts
// (TTL/8) but well within the fence keeps its lease and may write: its
// renewals are taken as the answers come. A renewal given up at TTL/8 for
// the next never saw its answer, the next one conflicted with it and its
// read of the key timed out the same way, so that no renewal was ever
// taken and the seat lost its lease on a bus that took every renewal
// (TestClusterFailover under load: 'the lease may have lapsed' 10.7 s
// after the last renewal taken, every renewal since timed out at 1.5 s).
func TestLeaseHeldOnASlowBus(t *testing.T) {
	s := bustest.Server(t)
	h := &harness{t: t, ctx: bustest.Context(t), srv: s}
	h.nc, h.js = bustest.Connect(t, s, "operator")
	h.apply(homelab(t))
	// Answers 400 ms late: over a try's 250 ms, and two of them and a
	// renewal period (1.13 s) under the fence's 1.5 s.
	const ttl = 2 * time.Second
	slow := bustest.NewRelay(t, s.Addr().String())
	slow.SetDelay(400 * time.Millisecond)
	nc, js, err := bus.Connect(bus.Dial{URL: slow.URL(), Name: "seat"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st := seat.New(js, seat.Config{ID: "slow", LeaseTTL: ttl})
	done := make(chan error, 1)
	go func() { done <- st.Run(h.ctx) }()
	bustest.WaitFor(t, 0, "the seat to hold its lease", func() bool {
		l, _ := st.Lease()
		return l == seat.LeaseHeld
	})
	kv, err := h.js.KeyValue(h.ctx, mesh.SeatBucket)
	if err != nil {
		t.Fatal(err)
	}
	first, err := kv.Get(h.ctx, mesh.HolderKey)
	if err != nil {
		t.Fatal(err)
	}
	// Two TTLs: the lease was lost within one.
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		select {
		case err := <-done:
			t.Fatalf("the seat stopped on a slow bus: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if st.Fenced() {
			t.Fatal("the seat fenced its writes on a slow bus that takes its renewals")
		}
	}
	if err := st.Fence(); err != nil {
		t.Errorf("Fence on a slow bus = %v; want nil", err)
	}
	e, err := kv.Get(h.ctx, mesh.HolderKey)
	if err != nil {
		t.Fatal(err)
	}
	var l mesh.Lease
	if err := json.Unmarshal(e.Value(), &l); err != nil || l.Holder != "slow" {
		t.Errorf("the lease holds %s (%v); want held by slow", e.Value(), err)
	}
	// A renewal every third of a second or so, each answered 400 ms late.
	if n := e.Revision() - first.Revision(); n < 3 {
		t.Errorf("the lease was renewed %d times in %v; want at least 3", n, 2*ttl)
	}
}

// A seat whose bus answers so late that its last renewal taken is older
// than the fence before the next one is taken (answers 350 ms late, a
// lease of 1 s: its renewals are taken 0.87 s apart, over the fence's
// 0.75 s, within the TTL) writes nothing meanwhile, and writes again once
// the renewal is taken, holding its lease still: Fence waits for the
// renewal. It returned an error and ended Run, and the seat gave up a
// lease it held (TestClusterFailover under load: 'the lease may have
// lapsed' 9.8 s after a renewal taken, then a new seat waiting 12 s for
// its own lease to lapse).
func TestFencedSeatWritesAgainOnceRenewed(t *testing.T) {
	bustest.Long(t, "a seat fenced by renewals taken late writes again once one is taken, holding its lease (14 s through a slow proxy)")
	s := bustest.Server(t)
	h := &harness{t: t, ctx: bustest.Context(t), srv: s}
	h.nc, h.js = bustest.Connect(t, s, "operator")
	h.apply(homelab(t))
	slow := bustest.NewRelay(t, s.Addr().String())
	slow.SetDelay(350 * time.Millisecond)
	nc, js, err := bus.Connect(bus.Dial{URL: slow.URL(), Name: "seat"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st := seat.New(js, seat.Config{ID: "late", LeaseTTL: time.Second})
	done := make(chan error, 1)
	go func() { done <- st.Run(h.ctx) }()
	h.seat = st
	bustest.WaitFor(t, 30*time.Second, "the seat to hold its lease and write", func() bool { return st.Wrote() > 0 })
	// What a write asks: the fence, which waits while the last renewal
	// taken is too old, and says yes once the next is taken.
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		if err := st.Fence(); err != nil {
			t.Fatalf("Fence on a bus that takes every renewal late = %v; want nil once the renewal is taken", err)
		}
		time.Sleep(20 * time.Millisecond) // how often a write asks
	}
	if !st.Fenced() {
		t.Fatal("the fence never waited: the renewals were taken within the fence, and the test shows nothing")
	}
	// Meanwhile the seat composed the mesh: it wrote all of it.
	bustest.WaitFor(t, 30*time.Second, "the seat to settle, its writes going on after each fence", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the seat stopped on a slow bus: %v", err)
		default:
		}
		return st.Settled(seat.Marks(h.ctx, h.js))
	})
	checkHomelabKeys(t, h)
	select {
	case err := <-done:
		t.Fatalf("the seat stopped on a slow bus: %v", err)
	default:
	}
	if l, why := st.Lease(); l == seat.LeaseStopped {
		t.Errorf("Lease() = %s (%s); want the first seat still holding it", l, why)
	}
}
