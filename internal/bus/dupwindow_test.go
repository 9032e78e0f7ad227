package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestBucketsHoldMsgIdsBriefly makes a bucket and a lease bucket: each
// stream's duplicate window is bus.DuplicateWindow (100 ms, the least the
// server accepts; the default, two minutes, holds every Nats-Msg-Id a
// writer sends). A put of a key with a Msg-Id, then once the window has
// passed a put with the same Msg-Id and another value: the second is
// stored (a new revision, the key's value), not taken as a duplicate.
func TestBucketsHoldMsgIdsBriefly(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	if bus.DuplicateWindow != 100*time.Millisecond {
		t.Fatalf("DuplicateWindow %s; want 100ms, the server's least", bus.DuplicateWindow)
	}
	kv, err := bus.Bucket(ctx, js, "test_dups", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.LeaseBucket(ctx, js, "test_dups_lease", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"test_dups", "test_dups_lease"} {
		st, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.Duplicates; got != bus.DuplicateWindow {
			t.Errorf("%s's duplicate window %s; want %s", b, got, bus.DuplicateWindow)
		}
	}
	put := func(value string) *jetstream.PubAck {
		t.Helper()
		m := nats.NewMsg("$KV.test_dups.n1.m")
		m.Data = []byte(value)
		m.Header.Set(jetstream.MsgIDHeader, "the-same-id")
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	first := put(`1`)
	// Once the window has passed (polled with a deadline: the id is
	// dropped within the window and the server's next sweep).
	deadline := time.Now().Add(10 * time.Second)
	var second *jetstream.PubAck
	for {
		second = put(`2`)
		if !second.Duplicate || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if second.Duplicate || second.Sequence == first.Sequence {
		t.Fatalf("the second put with the same Msg-Id: %+v (the first at %d); want it stored", second, first.Sequence)
	}
	if e, err := kv.Get(ctx, "n1.m"); err != nil || string(e.Value()) != `2` || e.Revision() != second.Sequence {
		t.Fatalf("n1.m after the second put: %v, %v; want 2 at revision %d", e, err, second.Sequence)
	}
}

// The buckets the seat alone writes hold each Nats-Msg-Id for
// bus.SeatDuplicateWindow (its lease bucket for the lease's TTL, the
// longest the server takes there), so that a put of the seat sent again
// with its id is one write. On a standalone server a copy with the same
// expected revision is refused as a conflict (the revision is checked
// before the id), and a copy with no expected revision is answered as a
// duplicate with the first's revision: what package seat's tries rely on.
func TestSeatBucketsHoldMsgIdsForTheTries(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	if _, err := bus.Bucket(ctx, js, mesh.PlansBucket, 0); err != nil {
		t.Fatal(err)
	}
	const ttl = 10 * time.Second
	if _, err := bus.LeaseBucket(ctx, js, mesh.SeatBucket, ttl); err != nil {
		t.Fatal(err)
	}
	for b, want := range map[string]time.Duration{mesh.PlansBucket: bus.SeatDuplicateWindow, mesh.SeatBucket: ttl} {
		st, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.Duplicates; got != want {
			t.Errorf("%s's duplicate window %s; want %s", b, got, want)
		}
	}
	first, err := js.PublishMsg(ctx, bus.PutAtMsgID(mesh.PlansBucket, "n1.m", []byte(`1`), 0, "put-1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.PublishMsg(ctx, bus.PutAtMsgID(mesh.PlansBucket, "n1.m", []byte(`1`), 0, "put-1"))
	if !bus.IsConflict(err) {
		t.Errorf("the copy of a conditional put, same id: %v; want a conflict (a standalone server checks the revision first)", err)
	}
	m := nats.NewMsg("$KV." + mesh.PlansBucket + ".n1.m")
	m.Data = []byte(`1`)
	m.Header.Set(jetstream.MsgIDHeader, "put-1")
	again, err := js.PublishMsg(ctx, m)
	if err != nil || !again.Duplicate || again.Sequence != first.Sequence {
		t.Errorf("the copy of a put, same id, no expected revision: %+v, %v; want a duplicate at %d", again, err, first.Sequence)
	}
	e, err := bus.LeaderGet(ctx, js, mesh.PlansBucket, "n1.m")
	if err != nil || string(e.Value) != `1` || e.Revision != first.Sequence || e.Header.Get(jetstream.MsgIDHeader) != "put-1" {
		t.Errorf("n1.m from the leader: %+v, %v; want 1 at revision %d carrying its id put-1", e, err, first.Sequence)
	}
}
