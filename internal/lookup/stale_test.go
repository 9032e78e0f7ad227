package lookup_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestReadsAfterAServerRejoinsAreNeverStale stops a follower of an R3
// bucket, rewrites, deletes and adds keys while it is down, starts it again
// on the store it left and reads through a connection to it alone while it
// catches up: a direct get there is answered by its own replica (the
// server prefers a local responder), which at first holds the keys as they
// were before it stopped, and so may a watch be (its consumer is placed on
// any replica). Every lookup.Read, lookup.Get, bus.LeaderGet and bus.Copy with
// Options.Leader must give the keys as written after the stop: no old
// value, no deleted key, every new key.
func TestReadsAfterAServerRejoinsAreNeverStale(t *testing.T) {
	c := bustest.Cluster(t)
	ctx := bustest.Context(t)
	bucket := mesh.ProvisionsBucket
	stream := "KV_" + bucket
	_, js, err := bus.Connect(bus.Dial{URL: c.URL(), Name: "maker"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Bucket(ctx, js, bucket, 3); err != nil {
		t.Fatal(err)
	}
	// The writer is connected to the stream's leader, which stays up.
	l := c.StreamLeader(stream)
	_, wjs, err := bus.Connect(bus.Dial{URL: c.Server(l).ClientURL(), Name: "writer"})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := wjs.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	key := func(i int) string { return fmt.Sprintf("node-%04d.app.cache", i) }
	for i := range n {
		if _, err := kv.Put(ctx, key(i), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	f := (l + 1) % bustest.ClusterSize
	c.WaitCurrent(f, stream, 20*time.Second)
	c.Stop(f)

	// While f is down: every key rewritten, the first 30 deleted, 30 new.
	want := map[string]string{}
	for i := range n + 30 {
		if _, err := kv.Put(ctx, key(i), []byte("new")); err != nil {
			t.Fatal(err)
		}
		want[key(i)] = "new"
	}
	for i := range 30 {
		if err := kv.Delete(ctx, key(i)); err != nil {
			t.Fatal(err)
		}
		delete(want, key(i))
	}

	c.Restart(f)
	rnc, rjs, err := bus.Connect(bus.Dial{URL: c.Server(f).ClientURL(), Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer rnc.Close()
	var rkv jetstream.KeyValue
	bustest.WaitFor(t, 20*time.Second, "the bucket's handle through the restarted server", func() bool {
		rkv, err = rjs.KeyValue(ctx, bucket)
		return err == nil
	})

	// Read until f's replica is current and a few rounds more.
	staleDirect, rounds, current := 0, 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for current < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s server %d's replica is not current (%d rounds read)", f+1, rounds)
		}
		rounds++
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if e, err := rkv.Get(rctx, key(n-1)); err == nil && string(e.Value()) == "old" {
			staleDirect++
		}
		got := map[string]string{}
		err := lookup.Read(rctx, rjs, rkv, []string{">"}, func(k string, v []byte, _ uint64) { got[k] = string(v) })
		if err == nil {
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("round %d: read %s = %q; want %q (a replica's state before its server stopped)", rounds, k, got[k], v)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("round %d: read %d keys; want %d (a deleted key read)", rounds, len(got), len(want))
			}
		}
		cp := bus.Follow(rctx, rjs, bucket, bus.Options{Leader: true})
		select {
		case <-cp.Ready():
			if cp.Len() != len(want) {
				t.Fatalf("round %d: a copy followed from the leader holds %d keys; want %d", rounds, cp.Len(), len(want))
			}
			for k, v := range want {
				if it, _ := cp.Get(k); string(it.Value) != v {
					t.Fatalf("round %d: a copy followed from the leader holds %s = %q; want %q", rounds, k, it.Value, v)
				}
			}
		case <-rctx.Done():
		}
		for _, k := range []string{key(0), key(n - 1), key(n + 29)} {
			e, err := bus.LeaderGet(rctx, rjs, bucket, k)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound) && want[k] == "":
			case err != nil:
				// The leader may not answer yet through a server that
				// has just started: asked again next round.
			case e.Deleted && want[k] == "":
			case string(e.Value) != want[k] || e.Deleted:
				t.Fatalf("round %d: leader get %s = %q (deleted %v); want %q", rounds, k, e.Value, e.Deleted, want[k])
			}
		}
		for _, k := range []string{key(0), key(n - 1)} {
			e, err := lookup.Get(rctx, rjs, rkv, k)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound) && want[k] == "":
			case err != nil:
			case string(e.Value) != want[k]:
				t.Fatalf("round %d: lookup.Get %s = %q; want %q", rounds, k, e.Value, want[k])
			}
		}
		cancel()
		if s := c.Server(f); s != nil && s.JetStreamIsStreamCurrent("$G", stream) {
			current++
		}
	}
	t.Logf("%d rounds read while server %d caught up; a direct get gave the old value in %d of them", rounds, f+1, staleDirect)
}
