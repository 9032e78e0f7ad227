package bus_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestConnectFindsADeadServerInSeconds checks that a connection whose
// server stops answering (its TCP connection open, nothing passing: a
// partition) is taken as disconnected within PingInterval x (MaxPingsOut
// + 1) and a margin, not after nats.go's default of minutes.
func TestConnectFindsADeadServerInSeconds(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	f := bustest.NewRelay(t, s.URL())
	var down atomic.Bool
	nc, _, err := bus.Connect(bus.Dial{URL: f.URL(), Name: "pinger"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDisconnectErrHandler(func(*nats.Conn, error) { down.Store(true) })
	f.Freeze(true)
	froze := time.Now()
	bound := bus.PingInterval*(bus.MaxPingsOut+1) + 4*time.Second
	bustest.WaitFor(t, bound, "the connection to take its silent server as dead", down.Load)
	t.Logf("found dead after %v (bound %v)", time.Since(froze).Round(100*time.Millisecond), bound)
}
