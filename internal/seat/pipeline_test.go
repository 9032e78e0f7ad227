package seat_test

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// giteaPlan is the plan key the pipeline tests write twice.
const giteaPlan = "ace.gitea"

// planBuilds follows the plans bucket on the test's own connection and
// records, in the order the bus stored them, the build of every write of
// key made after it was ready.
type planBuilds struct {
	mu     sync.Mutex
	ready  bool
	builds []string
	copy   *bus.Copy
}

func followPlan(h *harness, key string) *planBuilds {
	h.t.Helper()
	pb := &planBuilds{}
	pb.copy = bus.Follow(h.ctx, h.js, mesh.PlansBucket, bus.Options{OnChange: func(ch bus.Change) {
		var p mesh.Plan
		if ch.Key != key || ch.Deleted || json.Unmarshal(ch.Value, &p) != nil {
			return
		}
		pb.mu.Lock()
		if pb.ready {
			pb.builds = append(pb.builds, p.Fingerprint)
		}
		pb.mu.Unlock()
	}})
	<-pb.copy.Ready()
	pb.mu.Lock()
	pb.ready = true
	pb.mu.Unlock()
	return pb
}

func (pb *planBuilds) seen() []string {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	return slices.Clone(pb.builds)
}

// last returns the build of the last write of key the bus stored.
func (pb *planBuilds) last() string {
	b := pb.seen()
	if len(b) == 0 {
		return ""
	}
	return b[len(b)-1]
}

// planResults returns the builds of key's plan in the seat's results for
// its node, in the order OnResult was called.
func (h *harness) planResults(node, key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.results {
		if r.Node != node {
			continue
		}
		if v, ok := r.Plans[key]; ok {
			var p mesh.Plan
			if json.Unmarshal(v, &p) == nil {
				out = append(out, p.Fingerprint)
			}
		}
	}
	return out
}

func (h *harness) errs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.writeErrs)
}

// A node's result is said (OnResult) only once the bus acknowledged its
// writes: while the acks are held back, the plan the seat wrote is on the
// bus but the result is not said and the seat is not settled.
func TestResultAfterItsWritesLand(t *testing.T) {
	h := start(t, homelab(t))
	pb := followPlan(h, giteaPlan)
	before := len(h.planResults("ace", giteaPlan))
	release := h.seat.HoldAcks()
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	h.put(mesh.WantsBucket, "want.ace.gitea", mesh.Want{Fingerprint: "b7c2f0"})
	bustest.WaitFor(t, 0, "the seat's plan of ace.gitea at b7c2f0 on the bus", func() bool { return pb.last() == "b7c2f0" })
	if got := h.planResults("ace", giteaPlan); len(got) != before {
		t.Errorf("results of ace with its plan = %v while the acks of its writes are held; want none more than the %d before", got, before)
	}
	if h.seat.Settled(nil) {
		t.Error("the seat says it is settled while its writes are in flight")
	}
	release()
	released = true
	bustest.WaitFor(t, 0, "ace's result", func() bool { return len(h.planResults("ace", giteaPlan)) == before+1 })
	h.settle()
	if got := h.planResults("ace", giteaPlan); got[len(got)-1] != "b7c2f0" {
		t.Errorf("ace's last result has the plan of gitea at %s; want b7c2f0", got[len(got)-1])
	}
	if e := h.errs(); len(e) > 0 {
		t.Errorf("write errors %v; want none", e)
	}
}

// A key has one write in flight at a time: the seat composes a node again
// while its first write is not acknowledged, and its second write of the
// same plan waits for that ack (and expects its revision); the bus stores
// both in the order they were composed, and the results come in that
// order.
func TestSecondWriteOfAKeyWaitsForTheFirst(t *testing.T) {
	h := start(t, homelab(t))
	pb := followPlan(h, giteaPlan)
	release := h.seat.HoldAcks()
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	h.put(mesh.WantsBucket, "want.ace.gitea", mesh.Want{Fingerprint: "b7c2f0"})
	bustest.WaitFor(t, 0, "the first write of ace.gitea (b7c2f0) on the bus", func() bool { return pb.last() == "b7c2f0" })
	h.put(mesh.WantsBucket, "want.ace.gitea", mesh.Want{Fingerprint: "b7c100"})
	bustest.WaitFor(t, 0, "the second write of ace.gitea to wait for the first's ack", func() bool {
		return h.seat.WaitsFor() == mesh.PlansBucket+" "+giteaPlan
	})
	if got := pb.seen(); !slices.Equal(got, []string{"b7c2f0"}) {
		t.Errorf("builds of ace.gitea stored while the first write's ack is held = %v; want only the first, b7c2f0", got)
	}
	release()
	released = true
	h.settle()
	// The seat is settled once the bus acknowledged its writes; this test's
	// own watch of the plans may get the second write a moment later.
	bustest.WaitFor(t, 0, "this test's watch to see the second write of ace.gitea", func() bool { return len(pb.seen()) >= 2 })
	if got := pb.seen(); !slices.Equal(got, []string{"b7c2f0", "b7c100"}) {
		t.Errorf("builds of ace.gitea stored = %v; want b7c2f0 then b7c100", got)
	}
	got := h.planResults("ace", giteaPlan)
	if n := len(got); n < 2 || !slices.Equal(got[n-2:], []string{"b7c2f0", "b7c100"}) {
		t.Errorf("ace's results with the plan of gitea = %v; want b7c2f0 then b7c100 last", got)
	}
	if e := h.errs(); len(e) > 0 {
		t.Errorf("write errors %v; want none (a second write of a key expects the first's revision)", e)
	}
	var p mesh.Plan
	if !h.get(mesh.PlansBucket, giteaPlan, &p) || p.Fingerprint != "b7c100" {
		t.Errorf("plan %s on the bus = %q; want b7c100", giteaPlan, p.Fingerprint)
	}
}
