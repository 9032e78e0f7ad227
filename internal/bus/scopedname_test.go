package bus_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestScopedWatchIsMadeAgainFromWhereItWas watches a node's keys as a
// scoped party that may create no consumer: the seat makes its consumer
// (bus.ServeWatches). An operator deletes it (a reset the watch hears of
// by its missed heartbeats): the watch asks for its consumer anew, from
// the revision after the last it handed on, and hands on the change
// written meanwhile, with one consumer left.
func TestScopedWatchIsMadeAgainFromWhereItWas(t *testing.T) {
	// Not in parallel: it sets the package's watch heartbeat.
	bus.SetWatchHeartbeat(t, time.Second) // the seat's least
	s := bustest.Server(t)
	bustest.ServeWatches(t, s)
	nc, js := bustest.Connect(t, s, "client-n3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := bus.Bucket(ctx, js, "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Put(ctx, "n3.a", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	scoped, err := bus.ScopedFor(nc, js, []string{"$KV.b.n3.>", "$JS.API.DIRECT.GET.KV_b.$KV.b.n3.>", "$JS.FC.KV_b.>"})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := scoped.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "n3.>")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func() jetstream.KeyValueEntry {
		t.Helper()
		select {
		case e := <-w.Updates():
			return e
		case <-ctx.Done():
			t.Fatal("the watch handed on nothing")
		}
		return nil
	}
	if e := next(); e == nil || e.Key() != "n3.a" || string(e.Value()) != "1" {
		t.Fatalf("first entry %v; want n3.a = 1", e)
	}
	if e := next(); e != nil {
		t.Fatalf("second entry %v; want nil (the initial values sent)", e)
	}
	consumers := func() []string {
		t.Helper()
		st, err := js.Stream(ctx, "KV_b")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for n := range st.ConsumerNames(ctx).Name() {
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}
	first := consumers()
	if len(first) != 1 {
		t.Fatalf("consumers %v; want the watch's one", first)
	}
	if err := js.DeleteConsumer(ctx, "KV_b", first[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Put(ctx, "n3.a", []byte(`2`)); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || e.Key() != "n3.a" || string(e.Value()) != "2" || e.Revision() != 2 {
		t.Fatalf("after the reset %v; want n3.a = 2 at revision 2", e)
	}
	if got := consumers(); len(got) != 1 || got[0] == first[0] {
		t.Fatalf("consumers after the reset %v; want one, not %s", got, first[0])
	}
}

// TestScopedWatchWaitsForTheSeat starts a scoped party's watch before any
// seat answers watches: it fails saying no seat answers (an error the bus
// takes as transient, so a copy tries again with backoff); once the seat
// serves, the same watch gets the key's value.
func TestScopedWatchWaitsForTheSeat(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s, "client-n3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := bus.Bucket(ctx, js, "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Put(ctx, "n3.a", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	scoped, err := bus.ScopedFor(nc, js, []string{"$KV.b.n3.>", "$JS.API.DIRECT.GET.KV_b.$KV.b.n3.>", "$JS.FC.KV_b.>"})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := scoped.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Watch(ctx, "n3.>")
	if err == nil || !strings.Contains(err.Error(), "no seat answers watches") || !bus.Transient(err) {
		t.Fatalf("watch with no seat: %v; want a transient error saying no seat answers", err)
	}
	bustest.ServeWatches(t, s)
	w, err := kv.Watch(ctx, "n3.>")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case e := <-w.Updates():
		if e == nil || e.Key() != "n3.a" || string(e.Value()) != "1" {
			t.Fatalf("entry %v; want n3.a = 1", e)
		}
	case <-ctx.Done():
		t.Fatal("the watch handed on nothing")
	}
}
