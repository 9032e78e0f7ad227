package bus_test

import (
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// A copy with Writes acts on its bucket's deletion even when the stream's
// DELETED advisory never reaches it: nats-server 2.15.2 queues that
// advisory on the stream's own loop and closes the loop's quit channel
// right after (stream.stop), and a loop busy delivering returns on the
// quit channel without sending it (2 of 12 deletions under 4 watches
// catching up on 3000 keys). Here the user may not subscribe to the
// advisories at all: the watch ends when its consumer's heartbeats stop,
// the keys are reported deleted and the bucket is made again.
func TestCopyActsOnADeletionWhoseAdvisoryIsLost(t *testing.T) {
	bus.SetWatchHeartbeat(t, 200*time.Millisecond)
	s := bustest.Server(t, `
authorization {
  users = [
    {user: seat, password: seatpw, permissions: {subscribe: {allow: [">"], deny: ["$JS.EVENT.ADVISORY.>"]}}}
    {user: other, password: otherpw}
  ]
}
`)
	ctx := bustest.Context(t)
	nc, js, err := bus.Connect(bus.Dial{URL: s.URL(), Name: "seat", User: "seat", Password: "seatpw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	onc, ojs, err := bus.Connect(bus.Dial{URL: s.URL(), Name: "other", User: "other", Password: "otherpw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onc.Close)
	const bucket = "lostadv"
	var mu sync.Mutex
	deleted := map[string]bool{}
	c := bus.Follow(ctx, js, bucket, bus.Options{Create: true, Writes: true, OnChange: func(ch bus.Change) {
		if ch.Deleted && ch.Revision == 0 {
			mu.Lock()
			deleted[ch.Key] = true
			mu.Unlock()
		}
	}})
	<-c.Ready()
	if _, err := bus.PutAt(ctx, c, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := ojs.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "key k reported deleted with its bucket", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return deleted["k"]
	})
	bustest.WaitFor(t, 0, "the bucket made again and followed", func() bool {
		_, err := ojs.KeyValue(ctx, bucket)
		return err == nil && c.Known()
	})
	if _, ok := c.Get("k"); ok {
		t.Error("the copy still holds k after its bucket was deleted")
	}
}
