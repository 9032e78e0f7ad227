package bus_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestScopedWatchTakesOnlyItsKeys binds a bucket as a node's client
// does (no stream info, no consumer deletes: a scoped handle) and watches
// its node's keys, none yet. Another party's push consumers, on another
// bucket and on other keys of this one, deliver into the very subject the
// watch receives on (a subject that party would have to learn): the
// watch hands on none of their messages (the one whose consumer sequence
// fits would otherwise come out as a key "n3.x" of the wrong bucket), and
// the neighbour, a write of the node's own key, comes out as it is.
func TestScopedWatchTakesOnlyItsKeys(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s, "client-n3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range []string{"b", "other"} {
		if _, err := bus.Bucket(ctx, js, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := js.KeyValue(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Put(ctx, "n3.x", []byte(`"other's"`)); err != nil {
		t.Fatal(err)
	}
	b, err := js.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "n1.y", []byte(`"n1's"`)); err != nil {
		t.Fatal(err)
	}
	scoped, err := bus.ScopedFor(nc, js, []string{"$KV.b.n3.>", "$JS.API.CONSUMER.CREATE.KV_b.*.$KV.b.n3.>",
		"$JS.API.DIRECT.GET.KV_b.$KV.b.n3.>", "$JS.FC.KV_b.>"})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := scoped.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Status(ctx); err == nil {
		t.Fatalf("the scoped handle's status: no error; want none asked (no stream info)")
	}
	w, err := kv.Watch(ctx, "n3.>")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if e := <-w.Updates(); e != nil {
		t.Fatalf("first entry %s; want the end of the (no) initial values", e.Key())
	}
	inbox := bus.WatchSubject(w)
	for _, c := range []struct{ stream, name, filter string }{
		{"KV_other", "aimed-other", "$KV.other.>"},
		{"KV_b", "aimed-keys", "$KV.b.n1.>"},
	} {
		body, _ := json.Marshal(map[string]any{"stream_name": c.stream, "config": map[string]any{
			"name": c.name, "deliver_subject": inbox, "ack_policy": "none", "deliver_policy": "all", "filter_subject": c.filter}})
		if _, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+c.stream+"."+c.name+"."+c.filter, body); err != nil {
			t.Fatal(err)
		}
		old, err := nc.JetStream()
		if err != nil {
			t.Fatal(err)
		}
		bustest.WaitFor(t, 0, c.name+" delivers", func() bool {
			info, err := old.ConsumerInfo(c.stream, c.name)
			return err == nil && info.Delivered.Consumer >= 1
		})
	}
	if _, err := kv.Put(ctx, "n3.z", []byte(`"mine"`)); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case e := <-w.Updates():
			if e == nil || e.Bucket() != "b" || e.Key() != "n3.z" || string(e.Value()) != `"mine"` || e.Operation() != jetstream.KeyValuePut {
				t.Fatalf("the watch handed on %v; want only b n3.z", e)
			}
			return
		case <-ctx.Done():
			t.Fatal("the watch never handed on its own key n3.z")
		}
	}
}
