package assemble_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

// A seat started while its cluster has no JetStream quorum (two of three
// servers down) waits for the bus, saying so in its log, rather than
// fail: once the two are back it makes its buckets and holds the lease.
// Before, StartSeat returned "context deadline exceeded" for the first
// bucket it made, and a serve process exited with it.
func TestSeatStartedWithoutQuorumWaits(t *testing.T) {
	c := bustest.Cluster(t)
	url := c.Server(0).ClientURL()
	c.Stop(1)
	c.Stop(2)
	logs := &lockedLog{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	a := &assemble.Assembly{Dial: assemble.Shared(url, "", log), Log: log, Replicas: 3}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); a.Wait() })
	started := make(chan error, 1)
	var sr *assemble.SeatRunning
	go func() {
		var err error
		sr, err = a.StartSeat(ctx, assemble.SeatConfig{ID: "seat-1"})
		started <- err
	}()
	bustest.WaitFor(t, time.Minute, "the seat to say it tries again", func() bool {
		select {
		case err := <-started:
			t.Fatalf("StartSeat without a quorum returned %v; want it to wait", err)
		default:
		}
		return strings.Contains(logs.String(), "trying again")
	})
	c.Restart(1)
	c.Restart(2)
	var err error
	select {
	case err = <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("StartSeat did not return within 2 minutes of the quorum's return")
	}
	if err != nil {
		t.Fatalf("StartSeat once the quorum was back: %v", err)
	}
	bustest.WaitFor(t, time.Minute, "the seat to hold the lease", func() bool {
		st, _ := sr.Seat().Lease()
		return st == seat.LeaseHeld
	})
}

// lockedLog is a log's text, written and read under a lock.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
