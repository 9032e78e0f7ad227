package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
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
