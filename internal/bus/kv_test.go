package bus_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestPutAtMsg checks the conditional write PutAtMsg makes on a real
// server: created when the key has no message (revision 0), refused as a
// conflict at any other revision than the key's last, written at it, and
// read back as a plain value (the header is no part of it).
func TestPutAtMsg(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	kv, err := bus.Bucket(ctx, js, "test_putat", 0)
	if err != nil {
		t.Fatal(err)
	}
	put := func(value string, rev uint64) (uint64, error) {
		t.Helper()
		ack, err := js.PublishMsgAsync(bus.PutAtMsg("test_putat", "node-a.gitea", []byte(value), rev))
		if err != nil {
			t.Fatalf("PublishMsgAsync = %v", err)
		}
		select {
		case a := <-ack.Ok():
			return a.Sequence, nil
		case err := <-ack.Err():
			return 0, err
		case <-time.After(5 * time.Second):
			t.Fatal("no ack within 5 s")
			return 0, nil
		}
	}
	first, err := put(`{"n":1}`, 0)
	if err != nil {
		t.Fatalf("put at revision 0 of a new key = %v; want it created", err)
	}
	if _, err := put(`{"n":2}`, 0); !bus.IsConflict(err) {
		t.Errorf("put at revision 0 of a key written at %d = %v; want a conflict", first, err)
	}
	if _, err := put(`{"n":2}`, first+7); !bus.IsConflict(err) {
		t.Errorf("put at revision %d of a key written at %d = %v; want a conflict", first+7, first, err)
	}
	second, err := put(`{"n":2}`, first)
	if err != nil || second <= first {
		t.Fatalf("put at the key's revision %d = %d, %v; want a newer revision, nil", first, second, err)
	}
	e, err := kv.Get(ctx, "node-a.gitea")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != `{"n":2}` || e.Revision() != second || e.Operation() != jetstream.KeyValuePut {
		t.Errorf("Get = %s at %d (%v); want {\"n\":2} at %d, a put", e.Value(), e.Revision(), e.Operation(), second)
	}
	// DeleteAt builds its header the same way.
	if _, err := bus.DeleteAt(ctx, js, "test_putat", "node-a.gitea", first); !bus.IsConflict(err) {
		t.Errorf("DeleteAt at the old revision %d = %v; want a conflict", first, err)
	}
	if _, err := bus.DeleteAt(ctx, js, "test_putat", "node-a.gitea", second); err != nil {
		t.Errorf("DeleteAt at the key's revision %d = %v", second, err)
	}
	if _, err := kv.Get(ctx, "node-a.gitea"); err != jetstream.ErrKeyNotFound {
		t.Errorf("Get after DeleteAt = %v; want ErrKeyNotFound", err)
	}
}

// BenchmarkConditionalPut publishes conditional writes of new keys
// asynchronously to an embedded server and waits for their acks, the way
// the seat writes: with jetstream.WithExpectLastSequencePerSubject, and as
// a message from [bus.PutAtMsg] published with no option, and from
// [bus.PutAtMsgID] with a put's id as the seat sends it, to a bucket the
// seat alone writes (the server holds each id for
// [bus.SeatDuplicateWindow]); and, for reference, as a plain put (no
// condition, no header). The bytes per op include the server's, which
// runs in this process.
func BenchmarkConditionalPut(b *testing.B) {
	value := provisionValue(1)
	for _, how := range []string{"option", "PutAtMsg", "PutAtMsgID", "plain"} {
		b.Run(how, func(b *testing.B) {
			s := bustest.Server(b)
			_, js := bustest.Connect(b, s, "writer")
			ctx := context.Background()
			bucket := "bench_putat"
			if how == "PutAtMsgID" {
				bucket = mesh.PlansBucket
			}
			if _, err := bus.Bucket(ctx, js, bucket, 0); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				key := "node-a.k" + strconv.Itoa(i)
				var err error
				if how == "plain" {
					_, err = js.PublishAsync("$KV.bench_putat."+key, value)
				} else if how == "option" {
					_, err = js.PublishAsync("$KV.bench_putat."+key, value, jetstream.WithExpectLastSequencePerSubject(0))
				} else if how == "PutAtMsgID" {
					_, err = js.PublishMsgAsync(bus.PutAtMsgID(bucket, key, value, 0, "bench-put."+strconv.Itoa(i)))
				} else {
					_, err = js.PublishMsgAsync(bus.PutAtMsg(bucket, key, value, 0))
				}
				if err != nil {
					b.Fatal(err)
				}
				i++
				if i%1000 == 0 {
					<-js.PublishAsyncComplete()
				}
			}
			<-js.PublishAsyncComplete()
		})
	}
}

// TestTheStoreReservesEveryBucketsBound checks what docs/trust.md says of
// the server's store: each bucket's size bound is reserved when the
// bucket is made, so a bucket that does not fit is refused then, and a
// full bucket refuses its own writes only. On a store of 600 MiB two
// providers' buckets (256 MiB each) are made and a third is refused; the
// first filled to its bound refuses the next write, while the second
// still takes one.
func TestTheStoreReservesEveryBucketsBound(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t, "jetstream: {max_file_store: 600MB}")
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	for _, b := range []string{"a_bound", "b_bound"} {
		if _, err := bus.Bucket(ctx, js, b, 0); err != nil {
			t.Fatalf("make %s on a store of 600 MiB: %v", b, err)
		}
	}
	// Refused, saying what to set: the mesh's buckets with three
	// providers' and the spare room.
	set := "set max_file_store: " + bus.Size(access.StoreReserved(3)) + " (or more) in the jetstream block"
	if _, err := bus.Bucket(ctx, js, "c_bound", 0); !errors.Is(err, bus.ErrStoreTooSmall) ||
		!strings.Contains(err.Error(), "insufficient storage") || !strings.Contains(err.Error(), set) {
		t.Errorf("a third bucket of 256 MiB on a store of 600 MiB: %v; want it refused (insufficient storage), bus.ErrStoreTooSmall saying %q", err, set)
	}
	maxBytes, maxValue := access.BucketLimits("a_bound")
	value := make([]byte, maxValue)
	var refused error
	for i := 0; refused == nil; i++ {
		if i > int(maxBytes)/len(value)+16 {
			t.Fatalf("%d values of %d bytes written to a_bound, bound %d: none refused", i, len(value), maxBytes)
		}
		_, refused = js.Publish(ctx, "$KV.a_bound.k"+strconv.Itoa(i), value)
	}
	if !strings.Contains(refused.Error(), "maximum bytes") {
		t.Errorf("a write to the full a_bound: %v; want the refusal (maximum bytes)", refused)
	}
	if _, err := js.Publish(ctx, "$KV.b_bound.k", value); err != nil {
		t.Errorf("a write to b_bound beside the full a_bound: %v; want it stored", err)
	}
}
