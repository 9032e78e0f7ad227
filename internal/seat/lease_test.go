package seat_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A second seat waits for the lease, outlives a restart of the bus, and
// takes over once the holder stops.
func TestWaitingSeatOutlivesABusRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	url := s.URL()
	dial := func(name string) *seat.Seat {
		nc, js, err := bus.Connect(bus.Dial{URL: url, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return seat.New(js, seat.Config{ID: name, LeaseTTL: 2 * time.Second})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, second := dial("first"), dial("second")
	firstCtx, stopFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(firstCtx) }()
	bustest.WaitFor(t, 0, "the first seat to settle", func() bool { return first.Settled(nil) })
	secondDone := make(chan error, 1)
	go func() { secondDone <- second.Run(ctx) }()

	s.Shutdown()
	time.Sleep(500 * time.Millisecond) // the bus is down for a while
	s2, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	select {
	case err := <-secondDone:
		t.Fatalf("the waiting seat stopped when the bus restarted: %v", err)
	case <-time.After(time.Second):
	}
	stopFirst()
	<-firstDone
	bustest.WaitFor(t, 20*time.Second, "the second seat to take over", func() bool { return second.Settled(nil) })

	nc, js, err := bus.Connect(bus.Dial{URL: url, Name: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, mesh.SeatBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, mesh.HolderKey)
	if err != nil || !contains(string(e.Value()), `"holder":"second"`) {
		t.Errorf("lease = %s, %v; want held by second", e.Value(), err)
	}
	cancel()
	if err := <-secondDone; err != nil {
		t.Errorf("second seat Run = %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestLeaseSaysWhereTheSeatStands checks Seat.Lease, which health checks
// read: the holder says held, a standby waiting (naming the holder), a
// stopped seat stopped, and the standby held once it took over.
func TestLeaseSaysWhereTheSeatStands(t *testing.T) {
	s := bustest.Server(t)
	dial := func(name string) *seat.Seat {
		_, js := bustest.Connect(t, s, name)
		return seat.New(js, seat.Config{ID: name, LeaseTTL: 2 * time.Second})
	}
	first, second := dial("first"), dial("second")
	if st, why := first.Lease(); st != seat.LeaseWaiting {
		t.Errorf("Lease() before Run = %s (%s); want waiting", st, why)
	}
	ctx := bustest.Context(t)
	firstCtx, stopFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(firstCtx) }()
	bustest.WaitFor(t, 0, "the first seat to settle", func() bool { return first.Settled(nil) })
	if st, why := first.Lease(); st != seat.LeaseHeld {
		t.Errorf("first.Lease() = %s (%s); want held", st, why)
	}
	secondDone := make(chan error, 1)
	go func() { secondDone <- second.Run(ctx) }()
	bustest.WaitFor(t, 0, "the second seat to say it waits for first", func() bool {
		st, why := second.Lease()
		return st == seat.LeaseWaiting && strings.Contains(why, "held by first")
	})
	stopFirst()
	if err := <-firstDone; err != nil {
		t.Errorf("first.Run = %v", err)
	}
	if st, why := first.Lease(); st != seat.LeaseStopped {
		t.Errorf("first.Lease() after Run = %s (%s); want stopped", st, why)
	}
	bustest.WaitFor(t, 20*time.Second, "the second seat to hold the lease", func() bool {
		st, _ := second.Lease()
		return st == seat.LeaseHeld
	})
}

// TestLeaseSaysWhenTheBusTakesNoRenewal checks that a seat holding its
// lease whose renewals the bus does not take (its server gone, as a
// partition leaves it) says failing, with since when, within one renewal
// period: it said held until the lease was lost, a whole TTL (30 s on a
// cluster) after its last renewal.
func TestLeaseSaysWhenTheBusTakesNoRenewal(t *testing.T) {
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, js, err := bus.Connect(bus.Dial{URL: s.URL(), Name: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const ttl = 9 * time.Second
	st := seat.New(js, seat.Config{ID: "holder", LeaseTTL: ttl})
	ctx := bustest.Context(t)
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	bustest.WaitFor(t, 0, "the seat to hold its lease", func() bool {
		l, _ := st.Lease()
		return l == seat.LeaseHeld
	})
	// A renewal or two on time: still held.
	time.Sleep(ttl / 2)
	if l, why := st.Lease(); l != seat.LeaseHeld {
		t.Fatalf("Lease() with the bus up = %s (%s); want held", l, why)
	}
	s.Shutdown()
	stopped := time.Now()
	// Under ttl/2 (a renewal period and a half at most), well before
	// the lease is lost (ttl after the last renewal).
	bustest.WaitFor(t, ttl/2, "the seat to say its renewals fail", func() bool {
		l, why := st.Lease()
		return l == seat.LeaseFailing && strings.Contains(why, "holding the lease as holder, but")
	})
	l, why := st.Lease()
	t.Logf("%v after the server stopped: %s (%s)", time.Since(stopped).Round(100*time.Millisecond), l, why)
}
