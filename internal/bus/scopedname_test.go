package bus_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestScopedWatchNamesItsConsumerFromItsSet watches a node's keys as a
// scoped party whose permissions name its consumers (client-n3-w1 …
// client-n3-w8): its consumer takes the first name. The seat deletes it
// (a reset the watch hears of by its missed heartbeats): the watch makes
// its consumer anew under the next name of its set, from the revision
// after the last it handed on, and hands on the change written meanwhile.
func TestScopedWatchNamesItsConsumerFromItsSet(t *testing.T) {
	// Not in parallel: it sets the package's watch heartbeat.
	bus.SetWatchHeartbeat(t, 200*time.Millisecond)
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
	names := access.ConsumerNames("client-n3", "")
	publish := []string{"$KV.b.n3.>", "$JS.API.DIRECT.GET.KV_b.$KV.b.n3.>", "$JS.FC.KV_b.>"}
	for _, n := range names {
		publish = append(publish, "$JS.API.CONSUMER.CREATE.KV_b."+n+".$KV.b.n3.>")
	}
	scoped, err := bus.ScopedFor(nc, js, publish)
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
	if got := consumers(); !slices.Equal(got, names[:1]) {
		t.Fatalf("consumers %v; want %v (the first of its set)", got, names[:1])
	}
	if err := js.DeleteConsumer(ctx, "KV_b", names[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Put(ctx, "n3.a", []byte(`2`)); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || e.Key() != "n3.a" || string(e.Value()) != "2" {
		t.Fatalf("after the reset %v; want n3.a = 2", e)
	}
	got := consumers()
	if len(got) != 1 || !slices.Contains(names, got[0]) || got[0] == names[0] {
		t.Fatalf("consumers after the reset %v; want one other name of %v", got, names)
	}
	if !strings.HasPrefix(got[0], "client-n3-w") {
		t.Fatalf("consumer %s; want client-n3's", got[0])
	}
}

// TestScopedWatchesTakeTheNextFreeName starts and stops more watches of
// one bucket than the party has names, at once: each stopped watch's
// consumer stays a while (the party may not delete it), so the later
// watches take the names still free, then wait for a name to free; every
// watch gets the key's value.
func TestScopedWatchesTakeTheNextFreeName(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s, "client-n3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	plain, err := bus.Bucket(ctx, js, "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Put(ctx, "n3.a", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	publish := []string{"$KV.b.n3.>", "$JS.API.DIRECT.GET.KV_b.$KV.b.n3.>", "$JS.FC.KV_b.>"}
	for _, n := range access.ConsumerNames("client-n3", "") {
		publish = append(publish, "$JS.API.CONSUMER.CREATE.KV_b."+n+".$KV.b.n3.>")
	}
	scoped, err := bus.ScopedFor(nc, js, publish)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := scoped.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	for i := range access.WatchNames + 3 {
		w, err := kv.Watch(ctx, "n3.>")
		if err != nil {
			t.Fatalf("watch %d: %v; want it made under a free name", i, err)
		}
		select {
		case e := <-w.Updates():
			if e == nil || e.Key() != "n3.a" {
				t.Fatalf("watch %d: %v; want n3.a", i, e)
			}
		case <-ctx.Done():
			t.Fatalf("watch %d: nothing", i)
		}
		_ = w.Stop()
	}
}
