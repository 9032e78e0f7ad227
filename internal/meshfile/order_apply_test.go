package meshfile_test

import (
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

// Apply publishes without waiting for each ack, but a bucket's keys are all
// stored before the next bucket's first (manifests, builds, modules, have,
// wants, then placement), so that a seat watching never sees a placement
// whose modules are not there yet: each bucket's last key was stored
// (the server's time of the message) before the next bucket's first.
func TestApplyWritesBucketsInOrder(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "operator")
	f, err := meshfile.Parse("gen.yaml", gen.Generate(60, 8, 1))
	if err != nil {
		t.Fatal(err)
	}
	st, err := meshfile.Apply(ctx, js, f, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, c := range st.Buckets {
		written += c.Written
	}
	var lastBucket string
	var last time.Time
	for _, bucket := range meshfile.Buckets {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var first, end time.Time
		n := 0
		for k := range lister.Keys() {
			e, err := kv.Get(ctx, k)
			if err != nil {
				t.Fatalf("%s %s: %v", bucket, k, err)
			}
			if first.IsZero() || e.Created().Before(first) {
				first = e.Created()
			}
			if e.Created().After(end) {
				end = e.Created()
			}
			n++
		}
		if n == 0 {
			t.Fatalf("bucket %s holds no key after the apply", bucket)
		}
		if !last.IsZero() && !first.After(last) {
			t.Errorf("the first key of %s was stored at %v, not after the last of %s at %v", bucket, first, lastBucket, last)
		}
		lastBucket, last = bucket, end
		written -= n
	}
	if written != 0 {
		t.Errorf("Apply counted %d written keys more than the buckets hold", written)
	}
}
