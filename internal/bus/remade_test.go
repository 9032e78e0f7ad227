package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestABucketMadeAgainAtOnceTakesPuts deletes, round after round, a
// bucket that a copy with Create follows, while other watches of it run,
// and checks that the bucket the copy makes again takes a put: acknowledged
// with a revision, the key then holding the value put at that revision.
// The copy makes the bucket again as soon as it finds it gone, which may be
// while the server still removes the deleted stream: nats-server takes a
// deleted stream out of its account before it stops the stream's consumers
// and moves its directory away, and a stream created meanwhile under the
// same name opens that directory and loses it with the old stream (it then
// exists and acknowledges no put, "meta.inf.tmp: no such file or
// directory" on an update). The bus finds such a store lost
// (bus.ErrStoreLost) and makes the bucket again. The server may also drop
// the advisory of a deletion (queued on the stream's loop just before it
// stops): the copy's watch then ends once its consumer cannot be made
// again, and the copy finds the bucket gone and makes it again.
func TestABucketMadeAgainAtOnceTakesPuts(t *testing.T) {
	bustest.Long(t, "that a bucket deleted under a copy that makes it again takes puts once made again, round after round")
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	const b = "test_remade"
	_, js := bustest.Connect(t, s, "operator")
	_, ojs := bustest.Connect(t, s, "owner")
	_, rjs := bustest.Connect(t, s, "reader")
	// One handle for every round: a put is published on the key's
	// subject, which the stream made again captures.
	kv, err := bus.Bucket(ctx, js, b, 0)
	if err != nil {
		t.Fatal(err)
	}
	owner := recordWith(ctx, t, ojs, b, bus.Options{Create: true, Writes: true})
	const rounds = 30
	for round := range rounds {
		// Keys and watches (consumers the deletion stops first, which
		// widens the time the server takes to remove the stream).
		for k := range 10 {
			put(ctx, t, round, kv, "k"+strconv.Itoa(k), []byte("v"))
		}
		var watches []jetstream.KeyWatcher
		rkv, err := rjs.KeyValue(ctx, b)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for range 4 {
			w, err := rkv.WatchAll(ctx)
			if err != nil {
				t.Fatalf("round %d: watch: %v", round, err)
			}
			watches = append(watches, w)
		}
		if err := js.DeleteKeyValue(ctx, b); err != nil {
			t.Fatalf("round %d: delete: %v", round, err)
		}
		for _, w := range watches {
			w.Stop()
		}
		bustest.WaitFor(t, 60*time.Second, fmt.Sprintf("round %d: the owner to make the bucket again and follow it", round), func() bool {
			_, err := js.KeyValue(ctx, b)
			return err == nil && owner.c.Known()
		})
		value := []byte("round " + strconv.Itoa(round))
		rev := put(ctx, t, round, kv, "after", value)
		e, err := kv.Get(ctx, "after")
		if err != nil || string(e.Value()) != string(value) || e.Revision() != rev {
			t.Fatalf("round %d: after the put of %q at revision %d, Get(after) = %v; want that value at that revision", round, value, rev, entry(e, err))
		}
	}
}

// put writes value at key and returns its revision, failing t when the
// bus does not acknowledge it. A put meeting no stream (the bucket deleted
// a moment, being made again) is tried again, and so is one not
// acknowledged, three times: a put sent while the bucket's store is lost
// gets no answer, and the store is found lost and the bucket made again
// within seconds; a store lost for good answers none of them.
func put(ctx context.Context, t *testing.T, round int, kv jetstream.KeyValue, key string, value []byte) uint64 {
	t.Helper()
	unacked := 0
	for try := 0; ; try++ {
		// Generous: an acknowledgement takes milliseconds.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rev, err := kv.Put(pctx, key, value)
		cancel()
		if err == nil {
			if rev == 0 {
				t.Fatalf("round %d: put %s acknowledged at revision 0", round, key)
			}
			return rev
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			unacked++
			t.Logf("round %d: put %s: no acknowledgement (%d)", round, key, unacked)
			if unacked == 3 {
				t.Fatalf("round %d: put %s in the bucket made again: no acknowledgement, %d times (%v)", round, key, unacked, err)
			}
			continue
		}
		if try == 100 || !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Fatalf("round %d: put %s: %v", round, key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// entry says a Get's result.
func entry(e jetstream.KeyValueEntry, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%q at revision %d", e.Value(), e.Revision())
}

// TestMendMakesAgainABucketWhoseStoreIsLost moves the directory of a
// bucket's stream away under the server, as the removal of a stream
// deleted under the same name does (see TestABucketMadeAgainAtOnceTakesPuts):
// Mend finds the store lost (the server cannot write the stream's
// configuration again), makes the bucket again with the configuration it
// had, and the bucket then takes a put at revision 1. A bucket whose
// store is kept is left as it is, its keys with it.
func TestMendMakesAgainABucketWhoseStoreIsLost(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	kept, err := bus.Bucket(ctx, js, "test_kept", 0)
	if err != nil {
		t.Fatal(err)
	}
	put(ctx, t, 0, kept, "a", []byte("1"))
	if again, err := bus.Mend(ctx, js, "test_kept"); err != nil || again {
		t.Fatalf("Mend(test_kept) = %v, %v; want false, nil (its store is kept)", again, err)
	}
	if e, err := kept.Get(ctx, "a"); err != nil || string(e.Value()) != "1" {
		t.Fatalf("Get(a) of the bucket whose store is kept = %v; want \"1\"", entry(e, err))
	}

	lost, err := bus.LeaseBucket(ctx, js, "test_lost", 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	put(ctx, t, 0, lost, "a", []byte("1"))
	before, err := js.Stream(ctx, "KV_test_lost")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.JetStreamConfig().StoreDir, "$G", "streams", "KV_test_lost")
	if err := os.Rename(dir, dir+".gone"); err != nil {
		t.Fatal(err)
	}
	again, err := bus.Mend(ctx, js, "test_lost")
	if err != nil || !again {
		t.Fatalf("Mend(test_lost) = %v, %v; want true, nil (its store was lost)", again, err)
	}
	after, err := js.Stream(ctx, "KV_test_lost")
	if err != nil {
		t.Fatal(err)
	}
	if !after.CachedInfo().Created.After(before.CachedInfo().Created) {
		t.Errorf("the stream made again was created at %v; want after the lost one's %v", after.CachedInfo().Created, before.CachedInfo().Created)
	}
	b, a := before.CachedInfo().Config, after.CachedInfo().Config
	if a.MaxAge != 7*time.Second || a.MaxBytes != b.MaxBytes || a.MaxMsgsPerSubject != b.MaxMsgsPerSubject || a.AllowRollup || a.Duplicates != b.Duplicates {
		t.Errorf("the stream made again has max_age %v, max_bytes %d, max_msgs_per_subject %d, allow_rollup_hdrs %v, duplicate_window %v; want the lost one's: %v, %d, %d, %v, %v",
			a.MaxAge, a.MaxBytes, a.MaxMsgsPerSubject, a.AllowRollup, a.Duplicates, b.MaxAge, b.MaxBytes, b.MaxMsgsPerSubject, b.AllowRollup, b.Duplicates)
	}
	if rev := put(ctx, t, 0, lost, "a", []byte("2")); rev != 1 {
		t.Errorf("put in the bucket made again = revision %d; want 1", rev)
	}
	if e, err := lost.Get(ctx, "a"); err != nil || string(e.Value()) != "2" || e.Revision() != 1 {
		t.Errorf("Get(a) of the bucket made again = %v; want \"2\" at revision 1", entry(e, err))
	}
	if again, err := bus.Mend(ctx, js, "test_lost"); err != nil || again {
		t.Errorf("Mend of the bucket made again = %v, %v; want false, nil", again, err)
	}
}
