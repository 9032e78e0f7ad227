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
