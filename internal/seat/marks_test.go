package seat_test

import (
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A provider that answers late: its entry is on the bus, but the seat's
// watch of the provider's bound bucket has not handed it on yet. The
// seat's marks cover the bound buckets it follows, so that it is not
// settled until it has judged that entry (up --once printed stale states
// before); a mark of a bound bucket the seat does not follow is left out
// rather than waited for.
func TestSettledWaitsForTheProvidersLastEntry(t *testing.T) {
	h := start(t, homelab(t))
	bound := mesh.BoundBucket(mesh.VaultModule)
	if p, _ := h.provision(redisCred); p.State != mesh.Asked {
		t.Fatalf("%s = %s; want asked before its entry", redisCred, p.State)
	}
	release := h.seat.HoldCopy(bound)
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	h.put(bound, redisCred, mesh.Entry{State: mesh.Provided, VaultName: redisCred, Generation: 1})
	marks := h.seat.Marks(h.ctx, h.js)
	if marks[bound] != h.lastSeq(bound) {
		t.Fatalf("marks[%s] = %d; want the bucket's last sequence %d", bound, marks[bound], h.lastSeq(bound))
	}
	if h.seat.Settled(marks) {
		t.Errorf("the seat says it is settled before its watch took the last entry of %s", bound)
	}
	release()
	released = true
	bustest.WaitFor(t, 0, "the seat to settle", func() bool { return h.seat.Settled(marks) })
	// Settled: the entry is judged and its key written, without waiting more.
	if p, _ := h.provision(redisCred); p.State != mesh.Provided {
		t.Errorf("%s = %s (%s) once the seat is settled; want provided by the entry it took", redisCred, p.State, p.Why)
	}
	nobody := map[string]uint64{mesh.BoundBucket("nobody"): 7}
	if !h.seat.Settled(nobody) {
		t.Errorf("Settled(%v) = false; want true: the seat follows no such bucket", nobody)
	}
}
