package seat_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A seat held still past its lease (as by SIGSTOP) while another took the
// seat over writes nothing when it goes on, and raises no second ask for a
// key the other asked about: it goes on with the mesh's new placement but
// with its old provisions, as a stopped process whose sockets hand it the
// placement first.
func TestStaleSeatWritesNothing(t *testing.T) {
	s := bustest.Server(t)
	h := &harness{t: t, ctx: bustest.Context(t), srv: s}
	h.nc, h.js = bustest.Connect(t, s, "operator")
	rnc, rjs := bustest.Connect(t, s, "mesh-asks")
	if _, err := asks.Start(h.ctx, rnc, rjs, nil); err != nil {
		t.Fatal(err)
	}
	h.apply(homelab(t))
	run := func(id string) (*seat.Seat, chan error) {
		_, js := bustest.Connect(t, s, "seat-"+id)
		st := seat.New(js, seat.Config{ID: id, LeaseTTL: time.Second})
		done := make(chan error, 1)
		go func() { done <- st.Run(h.ctx) }()
		return st, done
	}
	a, aDone := run("a")
	h.seat = a
	h.settle()
	before := a.Wrote()
	if before == 0 {
		t.Fatal("seat a wrote nothing at its first composition")
	}
	a.Pause()

	b, _ := run("b")
	h.seat = b
	h.settle() // b holds the lease: a's lapsed
	got := h.retired()

	// Its renewal is late: the fence must not wait for it to fail.
	bustest.WaitFor(t, 0, "seat a's watches to have taken seat b's writes", func() bool {
		for _, key := range askedFirst {
			if !a.Keeps(mesh.ProvisionsBucket, key) {
				return false
			}
		}
		return true
	})
	release := a.Resume(func(ch bus.Change) bool {
		return ch.Bucket != mesh.ProvisionsBucket && ch.Bucket != mesh.RecordsBucket
	})
	bustest.WaitFor(t, 0, "seat a to find its lease lapsed, or to be done with what it took", func() bool {
		return a.Fenced() || a.Idle() && a.Asking() == 0 && a.Wrote() != before
	})
	if !a.Fenced() {
		t.Error("seat a went on writing after its lease lapsed")
	}
	release()
	var err error
	bustest.WaitFor(t, 0, "seat a to stop", func() bool {
		select {
		case err = <-aDone:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, seat.ErrLeaseLost) {
		t.Errorf("seat a Run = %v; want ErrLeaseLost", err)
	}
	bustest.WaitFor(t, 0, "seat a's asks answered", func() bool { return a.Asking() == 0 })
	if n := a.Wrote(); n != before {
		t.Errorf("seat a wrote %d times after seat b took the seat over; want none", n-before)
	}
	h.settle()
	records := h.keys(mesh.RecordsBucket, "")
	for _, key := range askedFirst {
		var about []string
		for _, id := range records {
			if r, ok := h.record(id); ok && r.Ask.About == "provision."+key {
				about = append(about, id)
			}
		}
		if len(about) != 1 {
			t.Errorf("asks recorded for %s = %v; want exactly one, %s", key, about, got[key].ID)
		}
		if p, _ := h.provision(key); p.State != mesh.Retiring || p.Ask != got[key].ID {
			t.Errorf("%s = %s with ask %q; want retiring with seat b's ask %s", key, p.State, p.Ask, got[key].ID)
		}
	}
}

// A lease under NATS's floor (or negative) is refused at once, before the
// seat touches the bus.
func TestLeaseUnderTheFloorIsRefused(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "seat")
	for _, ttl := range []time.Duration{-time.Second, time.Nanosecond, 99 * time.Millisecond} {
		err := seat.New(js, seat.Config{LeaseTTL: ttl}).Run(bustest.Context(t))
		if !errors.Is(err, seat.ErrBadLease) {
			t.Errorf("Run with lease %v = %v; want ErrBadLease", ttl, err)
		}
	}
	if err := seat.CheckLease(seat.MinLease); err != nil {
		t.Errorf("CheckLease(%v) = %v; want nil", seat.MinLease, err)
	}
}

// A write based on a value another writer has changed meanwhile is refused
// by the bus (the seat's writes are conditional on the revision it read),
// and the seat's word stands once that change reaches it.
func TestWriteOnAStaleViewIsRefused(t *testing.T) {
	s := bustest.Server(t)
	h := &harness{t: t, ctx: bustest.Context(t), srv: s}
	h.nc, h.js = bustest.Connect(t, s, "operator")
	h.apply(homelab(t))
	_, js := bustest.Connect(t, s, "seat")
	key := "ace.gitea.route"
	conflicts := make(chan string, 100)
	st := seat.New(js, seat.Config{OnWriteError: func(bucket, k string, err error) {
		if bus.IsConflict(err) {
			conflicts <- bucket + " " + k
		}
	}})
	done := make(chan error, 1)
	go func() { done <- st.Run(h.ctx) }()
	h.seat = st
	h.settle()
	h.waitState(key, mesh.Asked, noEntry)

	st.Pause()
	// Another writer changes the key; the seat has not taken it yet when
	// the route's entry makes it judge the key again.
	forged := mesh.Provision{Provision: "route", Consumer: mesh.Ref{Module: "gitea", Node: "ace"},
		Provider: mesh.Ref{Module: "route-proxy", Node: "control"}, State: mesh.Provided}
	h.put(mesh.ProvisionsBucket, key, forged)
	h.put(mesh.BoundBucket("route-proxy"), key, mesh.Entry{State: mesh.Failed, Why: "no certificate"})
	bustest.WaitFor(t, 0, "the seat's watches to have taken both changes", func() bool {
		return st.Keeps(mesh.ProvisionsBucket, key) && st.Keeps(mesh.BoundBucket("route-proxy"), key)
	})
	release := st.Resume(func(ch bus.Change) bool { return ch.Bucket != mesh.ProvisionsBucket })
	bustest.WaitFor(t, 0, "the seat's write of "+key+" refused", func() bool {
		select {
		case c := <-conflicts:
			return c == mesh.ProvisionsBucket+" "+key
		default:
			return false
		}
	})
	if p, _ := h.provision(key); p.State != mesh.Provided {
		t.Errorf("%s = %s; want the other writer's provided, not overwritten by a write on a stale view", key, p.State)
	}
	release()
	h.waitState(key, mesh.Failed, "no certificate")
}

// TestStaleSeatOnAClusterWritesNothing is TestStaleSeatWritesNothing on a
// three-server cluster with R3 buckets and the replicated lease's
// defaults (12 s, renewed every 2 s, fenced 9 s after the last renewal,
// a standby trying every second): a holder held still (as by SIGSTOP)
// while a standby takes the seat over writes nothing when it goes on,
// however soon the standby took over.
func TestStaleSeatOnAClusterWritesNothing(t *testing.T) {
	bustest.Long(t, "that a seat held still while a standby takes over on a three-server cluster (R3 buckets, the replicated lease's 12 s defaults) writes nothing when it goes on")
	c := bustest.Cluster(t)
	ctx := bustest.Context(t)
	h := &harness{t: t, ctx: ctx}
	var err error
	h.nc, h.js, err = bus.Connect(bus.Dial{URL: c.URL(), Name: "operator", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.nc.Close)
	h.apply(homelab(t))
	run := func(id string) (*seat.Seat, chan error) {
		nc, js, err := bus.Connect(bus.Dial{URL: c.URL(), Name: "seat-" + id, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		st := seat.New(js, seat.Config{ID: id})
		done := make(chan error, 1)
		go func() { done <- st.Run(ctx) }()
		return st, done
	}
	held := func(s *seat.Seat) func() bool {
		return func() bool { st, _ := s.Lease(); return st == seat.LeaseHeld }
	}
	a, aDone := run("a")
	bustest.WaitFor(t, 30*time.Second, "seat a to hold the lease", held(a))
	h.seat = a
	h.settle()
	before := a.Wrote()
	if before == 0 {
		t.Fatal("seat a wrote nothing at its first composition")
	}
	a.Pause()
	paused := time.Now()
	b, _ := run("b")
	bustest.WaitFor(t, 30*time.Second, "seat b to take the seat over", held(b))
	t.Logf("seat b held the lease %v after seat a was held still (lease %v)", time.Since(paused).Round(100*time.Millisecond), seat.ReplicatedLease)
	h.seat = b
	h.apply(withoutVaultwarden(t)) // b writes the change
	bustest.WaitFor(t, 0, "seat a's watches to have taken seat b's writes", func() bool {
		for _, key := range askedFirst {
			if !a.Keeps(mesh.ProvisionsBucket, key) {
				return false
			}
		}
		return true
	})
	release := a.Resume(func(ch bus.Change) bool {
		return ch.Bucket != mesh.ProvisionsBucket && ch.Bucket != mesh.RecordsBucket
	})
	bustest.WaitFor(t, 0, "seat a to find its lease lapsed, or to be done with what it took", func() bool {
		return a.Fenced() || a.Idle() && a.Asking() == 0 && a.Wrote() != before
	})
	if !a.Fenced() {
		t.Error("seat a went on writing after seat b took the seat over")
	}
	release()
	if n := a.Wrote(); n != before {
		t.Errorf("seat a wrote %d times after seat b took the seat over; want none", n-before)
	}
	if err := <-aDone; !errors.Is(err, seat.ErrLeaseLost) {
		t.Errorf("seat a Run = %v; want ErrLeaseLost", err)
	}
}
