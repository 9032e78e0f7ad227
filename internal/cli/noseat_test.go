package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

// TestReadViewsSayNoSeat runs a seat over the homelab, then stops it:
// while it holds the lease get and why say nothing of it and ReadSeat
// names it; once it has stopped, get and why say on stderr that no seat
// holds the lease and when the seat last wrote, and still answer.
func TestReadViewsSayNoSeat(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	if _, errOut, err := run(t, "apply", "-f", homelabFile, "--yes", "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	ctx, cancel := context.WithCancel(bustest.Context(t))
	_, sjs := bustest.Connect(t, s, "mesh-provisioner-seat")
	st := seat.New(sjs, seat.Config{Log: testLog(t)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitSeat(t, s, st)
	const key = "g14.grafana.database"

	_, js := bustest.Connect(t, s, "operator")
	held, err := lookup.ReadSeat(bustest.Context(t), js)
	if err != nil || !held.Held || held.Holder == "" || held.Since.IsZero() || held.Wrote.IsZero() {
		t.Fatalf("ReadSeat with a seat running = %+v, %v; want held, its holder, since and wrote", held, err)
	}
	for _, args := range [][]string{{"get", "provisions", "--node", "g14"}, {"why", key}} {
		out, errOut, err := run(t, append(args, "--nats", s.URL())...)
		if err != nil || !strings.Contains(out, key) || strings.Contains(errOut, "seat") {
			t.Errorf("%v with a seat holding the lease = %q, stderr %q, %v; want the key and no word of the seat", args, out, errOut, err)
		}
	}

	cancel()
	<-done
	gone, err := lookup.ReadSeat(bustest.Context(t), js)
	if err != nil || gone.Held || !gone.Wrote.Equal(held.Wrote) && gone.Wrote.Before(held.Wrote) {
		t.Fatalf("ReadSeat once the seat stopped = %+v, %v; want not held, wrote at %v or later", gone, err, held.Wrote)
	}
	says := gone.Says(gone.Wrote.Add(12 * time.Minute))
	if !strings.HasPrefix(says, "no seat holds the lease: the seat last wrote 12m ago (") {
		t.Errorf("Says = %q", says)
	}
	for _, args := range [][]string{{"get", "provisions", "--node", "g14"}, {"why", key}} {
		out, errOut, err := run(t, append(args, "--nats", s.URL())...)
		if err != nil || !strings.Contains(out, key) {
			t.Errorf("%v with no seat = %q, %v; want the key still", args, out, err)
		}
		if want := args[0] + ": no seat holds the lease: the seat last wrote "; !strings.Contains(errOut, want) {
			t.Errorf("%v with no seat: stderr %q; want %q", args, errOut, want)
		}
	}
}
