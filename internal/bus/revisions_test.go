package bus_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestCopyRevisionsOnlyKeepsNoValues checks a copy made with RevisionsOnly:
// it holds every key at its revision but no value, its owner still gets
// each value from OnChange, and PutIfChanged (with nothing to compare
// with) writes every time and takes the write in at its revision.
func TestCopyRevisionsOnlyKeepsNoValues(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	kv, err := bus.Bucket(ctx, js, "test_revs", 0)
	if err != nil {
		t.Fatal(err)
	}
	revA, _ := kv.Put(ctx, "a", []byte(`"one"`))
	revB, _ := kv.Put(ctx, "b", []byte(`"two"`))
	_, rjs := bustest.Connect(t, s, "reader")
	var mu sync.Mutex
	values := map[string]string{}
	c := bus.Follow(ctx, rjs, "test_revs", bus.Options{RevisionsOnly: true, OnChange: func(ch bus.Change) {
		mu.Lock()
		values[ch.Key] = string(ch.Value)
		mu.Unlock()
	}})
	<-c.Ready()
	for key, rev := range map[string]uint64{"a": revA, "b": revB} {
		it, ok := c.Get(key)
		if !ok || it.Revision != rev || it.Value != nil {
			t.Errorf("Get(%s) = %q at %d, %v; want no value at %d, true", key, it.Value, it.Revision, ok, rev)
		}
	}
	mu.Lock()
	if values["a"] != `"one"` || values["b"] != `"two"` {
		t.Errorf("OnChange got %v; want a=\"one\" b=\"two\"", values)
	}
	mu.Unlock()
	n := 0
	c.Range(func(_ string, it bus.Item) bool {
		if it.Value != nil {
			t.Errorf("Range gave a value %q", it.Value)
		}
		n++
		return true
	})
	if n != 2 || c.Len() != 2 {
		t.Errorf("Range gave %d keys, Len %d; want 2, 2", n, c.Len())
	}
	for range 2 {
		wrote, err := bus.PutIfChanged(ctx, c, "a", []byte(`"one"`))
		if err != nil || !wrote {
			t.Fatalf("PutIfChanged = %v, %v; want true, nil (no value to compare with)", wrote, err)
		}
	}
	e, err := kv.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if it, _ := c.Get("a"); it.Revision != e.Revision() || it.Value != nil {
		t.Errorf("after PutIfChanged Get(a) = %q at %d; want no value at %d", it.Value, it.Revision, e.Revision())
	}
}

// provisionValue is a provision as the seat writes it, about 300 bytes.
func provisionValue(i int) []byte {
	return fmt.Appendf(nil, `{"provision":"credential","local":"postgres_database","consumer":{"module":"mail-%d","node":"node-%04d"},`+
		`"provider":{"module":"mesh-vault","node":"control"},"state":"provided","reference":{"id":"node-%04d.mail-%d.credential.postgres_database","generation":1},`+
		`"at":"2026-12-01T02:44:51.884238615Z"}`, i%8, i/8, i/8, i%8)
}

// BenchmarkCopyOfProvisions follows a bucket of N provisions (about 300
// bytes each) until the copy is ready and reports the heap the copy holds
// per key (B/key, after a GC), keeping values and keeping revisions only.
func BenchmarkCopyOfProvisions(b *testing.B) {
	s := bustest.Server(b)
	ctx := bustest.Context(b)
	_, js := bustest.Connect(b, s, "writer")
	for _, n := range []int{1000, 10000} {
		bucket := fmt.Sprintf("bench_provisions_%d", n)
		if _, err := bus.Bucket(ctx, js, bucket, 0); err != nil {
			b.Fatal(err)
		}
		fillProvisions(ctx, b, js, bucket, n)
		for _, mode := range []struct {
			name      string
			revisions bool
		}{{"values", false}, {"revisions", true}} {
			b.Run(fmt.Sprintf("%s/%d", mode.name, n), func(b *testing.B) {
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				_, rjs := bustest.Connect(b, s, "reader")
				check := bus.Follow(cctx, rjs, bucket, bus.Options{RevisionsOnly: mode.revisions})
				<-check.Ready()
				if it, ok := check.Get("node-0000.mail-0.credential.postgres_database"); check.Len() != n || !ok || (it.Value == nil) != mode.revisions {
					b.Fatalf("copy holds %d keys, a value %v; want %d, a value %v", check.Len(), it.Value != nil, n, !mode.revisions)
				}
				// Every copy made is kept until the end, so that the heap
				// measured holds each whole (none is being torn down).
				var copies []*bus.Copy
				b.ReportAllocs()
				before := heap()
				for b.Loop() {
					c := bus.Follow(cctx, rjs, bucket, bus.Options{RevisionsOnly: mode.revisions})
					<-c.Ready()
					copies = append(copies, c)
				}
				held := float64(heap()) - float64(before)
				b.ReportMetric(held/float64(len(copies))/float64(n), "B/key")
				runtime.KeepAlive(copies)
			})
		}
	}
}

// fillProvisions puts n provisions into bucket with asynchronous publishes.
func fillProvisions(ctx context.Context, b *testing.B, js jetstream.JetStream, bucket string, n int) {
	b.Helper()
	for i := range n {
		key := fmt.Sprintf("node-%04d.mail-%d.credential.postgres_database", i/8, i%8)
		if _, err := js.PublishAsync("$KV."+bucket+"."+key, provisionValue(i)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
}

// heap returns the bytes of live heap objects after a GC.
func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestCopyReadsOnWhileHeld holds a copy while its owner writes one key and
// another writer writes fifty: the watch goes on reading (the changes wait
// in the copy, not taken), and once released takes them in order,
// reporting the other writer's fifty and never the owner's own echo.
func TestCopyReadsOnWhileHeld(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "owner")
	var mu sync.Mutex
	var reported []string
	c := bus.Follow(ctx, js, "test_held", bus.Options{Create: true, OnChange: func(ch bus.Change) {
		mu.Lock()
		reported = append(reported, ch.Key)
		mu.Unlock()
	}})
	<-c.Ready()
	kv, err := c.KV(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, ojs := bustest.Connect(t, s, "other")
	okv, err := ojs.KeyValue(ctx, "test_held")
	if err != nil {
		t.Fatal(err)
	}
	release := c.Hold()
	rev, err := kv.Put(ctx, "own", []byte(`"mine"`))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 50 {
		key := fmt.Sprintf("k%02d", i)
		if _, err := okv.Put(ctx, key, []byte(`1`)); err != nil {
			t.Fatal(err)
		}
		want = append(want, key)
	}
	bustest.WaitFor(t, 0, "51 changes waiting in the held copy", func() bool { return bus.Waiting(c) == 51 })
	if _, ok := c.Get("k00"); ok || c.Len() != 0 {
		t.Errorf("the held copy took changes: Len %d", c.Len())
	}
	c.Took("own", []byte(`"mine"`), rev)
	release()
	bustest.WaitFor(t, 0, "every change taken", func() bool { return c.Len() == 51 && bus.Waiting(c) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(reported) != fmt.Sprint(want) {
		t.Errorf("reported %v; want the other writer's %v in order, not the owner's own", reported, want)
	}
	if c.Seen() < rev+50 {
		t.Errorf("Seen = %d; want at least %d", c.Seen(), rev+50)
	}
}
