package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

func TestCopyFollowsPutsAndDeletes(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	kv, err := bus.Bucket(ctx, js, "test_things", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	_, rjs := bustest.Connect(t, s, "reader")
	var mu sync.Mutex
	var changes []string
	c := bus.Follow(ctx, rjs, "test_things", bus.Options{OnChange: func(ch bus.Change) {
		mu.Lock()
		changes = append(changes, fmt.Sprintf("%s=%s del=%v", ch.Key, ch.Value, ch.Deleted))
		mu.Unlock()
	}})
	<-c.Ready()
	if it, ok := c.Get("a"); !ok || string(it.Value) != "1" {
		t.Fatalf("Get(a) = %q, %v; want 1, true", it.Value, ok)
	}
	kv.Put(ctx, "b", []byte(`2`))
	kv.Delete(ctx, "a")
	bustest.WaitFor(t, 0, "b and no a", func() bool {
		_, hasA := c.Get("a")
		_, hasB := c.Get("b")
		return !hasA && hasB
	})
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a=1 del=false", "b=2 del=false", "a= del=true"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("changes = %v; want %v", changes, want)
	}
}

func TestCopyTookIsNotReportedAgain(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "owner")
	var mu sync.Mutex
	n := 0
	c := bus.Follow(ctx, js, "test_own", bus.Options{Create: true, OnChange: func(bus.Change) {
		mu.Lock()
		n++
		mu.Unlock()
	}})
	<-c.Ready()
	wrote, err := bus.PutIfChanged(ctx, c, "k", []byte(`"v"`))
	if err != nil || !wrote {
		t.Fatalf("PutIfChanged = %v, %v; want true, nil", wrote, err)
	}
	wrote, _ = bus.PutIfChanged(ctx, c, "k", []byte(`"v"`))
	if wrote {
		t.Error("PutIfChanged of the same bytes wrote again")
	}
	kv, _ := c.KV(ctx)
	kv.Put(ctx, "other", []byte(`1`))
	bustest.WaitFor(t, 0, "other", func() bool { _, ok := c.Get("other"); return ok })
	mu.Lock()
	defer mu.Unlock()
	if n != 1 {
		t.Errorf("OnChange calls = %d; want 1 (only the foreign write)", n)
	}
}

func TestCopySurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, js, err := bus.Connect(bus.Dial{URL: s.URL(), Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kv, _ := bus.Bucket(ctx, js, "test_restart", 0)
	kv.Put(ctx, "before", []byte(`1`))
	kv.Put(ctx, "doomed", []byte(`1`))
	said := &logBuffer{}
	c := bus.Follow(ctx, js, "test_restart", bus.Options{Log: slog.New(slog.NewTextHandler(said, nil))})
	<-c.Ready()
	s.Shutdown()
	s2, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	_, js2, err := bus.Connect(bus.Dial{URL: s2.URL(), Name: "writer"})
	if err != nil {
		t.Fatal(err)
	}
	kv2, _ := js2.KeyValue(ctx, "test_restart")
	kv2.Put(ctx, "after", []byte(`2`))
	kv2.Delete(ctx, "doomed")
	bustest.WaitFor(t, 20*time.Second, "the copy to follow after the restart", func() bool {
		_, a := c.Get("after")
		_, b := c.Get("before")
		_, d := c.Get("doomed")
		return a && b && !d
	})
	// The watch broke with the server and came back: both are counted for
	// the bucket (metrics read them).
	bustest.WaitFor(t, 0, "the restart to be counted", func() bool {
		return bus.WatchCounts()["test_restart"].Restarts >= 1
	})
	if n := bus.WatchCounts()["test_restart"]; n.GiveUps < n.Restarts {
		t.Errorf("WatchCounts()[test_restart] = %+v; want at least as many give-ups as restarts", n)
	}
	if n, ok := bus.WatchCounts()["never_followed"]; ok {
		t.Errorf("WatchCounts()[never_followed] = %+v; want no entry", n)
	}
	// The same store holds the same bucket: it is neither gone nor new.
	if said.has("made anew") || said.has("is gone") {
		t.Errorf("after a restart on the same store the copy said:\n%s", said)
	}
}

func TestCopyFilterFollowsOnlyMatchingKeys(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	kv, err := bus.Bucket(ctx, js, "test_filter", 0)
	if err != nil {
		t.Fatal(err)
	}
	kv.Put(ctx, "ace.a", []byte(`1`))
	kv.Put(ctx, "g14.a", []byte(`1`))
	c := bus.Follow(ctx, js, "test_filter", bus.Options{Filter: "ace.>"})
	<-c.Ready()
	kv.Put(ctx, "ace.b", []byte(`2`))
	kv.Put(ctx, "g14.b", []byte(`2`))
	bustest.WaitFor(t, 0, "ace.b", func() bool { _, ok := c.Get("ace.b"); return ok })
	var keys []string
	c.Range(func(k string, _ bus.Item) bool { keys = append(keys, k); return true })
	if c.Len() != 2 {
		t.Errorf("keys of a copy filtered on ace.> = %v; want ace.a and ace.b only", keys)
	}
	if _, ok := c.Get("g14.a"); ok {
		t.Error("copy filtered on ace.> holds g14.a")
	}
}

// logBuffer collects what a component logs, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// recorder follows bucket into a copy whose changes it records as
// "key=value" or "key deleted".
type recorder struct {
	c   *bus.Copy
	log *logBuffer
	mu  sync.Mutex
	chs []string
}

func record(ctx context.Context, t *testing.T, js jetstream.JetStream, bucket string, create bool) *recorder {
	t.Helper()
	r := &recorder{log: &logBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the copy of %s said:\n%s", bucket, r.log)
		}
	})
	r.c = bus.Follow(ctx, js, bucket, bus.Options{Create: create, Log: slog.New(slog.NewTextHandler(r.log, nil)),
		OnChange: func(ch bus.Change) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if ch.Deleted {
				r.chs = append(r.chs, ch.Key+" deleted")
				return
			}
			r.chs = append(r.chs, ch.Key+"="+string(ch.Value))
		}})
	<-r.c.Ready()
	return r
}

func (r *recorder) changes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.chs...)
}

// holds reports whether the copy holds exactly want (key -> value).
func (r *recorder) holds(want map[string]string) bool {
	if r.c.Len() != len(want) {
		return false
	}
	for k, v := range want {
		if it, ok := r.c.Get(k); !ok || string(it.Value) != v {
			return false
		}
	}
	return true
}

// fill writes keys so that the bucket's revisions run well past 1.
func fill(ctx context.Context, t *testing.T, kv jetstream.KeyValue) {
	t.Helper()
	for i := range 5 {
		for _, k := range []string{"route", "other"} {
			if _, err := kv.Put(ctx, k, fmt.Appendf(nil, `"provided %d"`, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCopyTakesABucketMadeAnew deletes a followed bucket and makes it again
// with one key at revision 1, below what the copy held: the copy takes the
// new value, and takes the key the new bucket lacks as deleted, saying so.
func TestCopyTakesABucketMadeAnew(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	kv, err := bus.Bucket(ctx, js, "route-proxy_bound", 0)
	if err != nil {
		t.Fatal(err)
	}
	fill(ctx, t, kv)
	_, rjs := bustest.Connect(t, s, "reader")
	r := record(ctx, t, rjs, "route-proxy_bound", false)
	if !r.holds(map[string]string{"route": `"provided 4"`, "other": `"provided 4"`}) {
		t.Fatalf("the copy does not hold the bucket's two keys")
	}
	if err := js.DeleteKeyValue(ctx, "route-proxy_bound"); err != nil {
		t.Fatal(err)
	}
	// Right after a delete the server may still be removing the old store
	// ("error creating store for stream"): try again until it is gone.
	bustest.WaitFor(t, 0, "route-proxy_bound made again", func() bool {
		kv, err = bus.Bucket(ctx, js, "route-proxy_bound", 0)
		return err == nil
	})
	rev, err := kv.Put(ctx, "route", []byte(`"failed"`))
	if err != nil || rev != 1 {
		t.Fatalf("put in the new bucket = revision %d, %v; want 1", rev, err)
	}
	bustest.WaitFor(t, 0, "the copy to hold route=failed alone", func() bool {
		return r.holds(map[string]string{"route": `"failed"`})
	})
	ch := r.changes()
	if !slices.Contains(ch, `route="failed"`) || !slices.Contains(ch, "other deleted") {
		t.Errorf("changes = %q; want route=\"failed\" and other deleted reported", ch)
	}
	if !r.log.has("bus: the bucket was made anew") && !r.log.has("bus: the bucket is gone") {
		t.Errorf("the copy did not say the bucket was gone or made anew")
	}
	// Later writes of the new bucket are taken as usual.
	kv.Put(ctx, "later", []byte(`1`))
	bustest.WaitFor(t, 0, "later", func() bool { _, ok := r.c.Get("later"); return ok })
}

// TestCopyOfABucketGone deletes a followed bucket: a copy that does not
// create its bucket holds nothing any more (each key reported deleted, the
// loss said); one that creates its bucket makes it again and takes its new
// writes from revision 1.
func TestCopyOfABucketGone(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	kv, err := bus.Bucket(ctx, js, "test_gone", 0)
	if err != nil {
		t.Fatal(err)
	}
	fill(ctx, t, kv)
	_, rjs := bustest.Connect(t, s, "reader")
	reader := record(ctx, t, rjs, "test_gone", false)
	_, ojs := bustest.Connect(t, s, "owner")
	owner := record(ctx, t, ojs, "test_gone", true)
	if err := js.DeleteKeyValue(ctx, "test_gone"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recorder{reader, owner} {
		// The copy empties itself before it reports the deletes to
		// OnChange: wait for both.
		bustest.WaitFor(t, 0, "the copies to hold nothing, route and other reported deleted", func() bool {
			ch := r.changes()
			return r.c.Len() == 0 && slices.Contains(ch, "route deleted") && slices.Contains(ch, "other deleted")
		})
		// The reader may look only once the owner has made the bucket
		// again: then it finds it made anew.
		if !r.log.has("bus: the bucket is gone; every key it held is taken as deleted") &&
			(r == owner || !r.log.has("bus: the bucket was made anew")) {
			t.Errorf("the copy did not say the bucket is gone (or, for the reader, made anew)")
		}
	}
	bustest.WaitFor(t, 0, "the owner to make the bucket again", func() bool {
		_, err := js.KeyValue(ctx, "test_gone")
		return err == nil
	})
	kv, _ = js.KeyValue(ctx, "test_gone")
	if rev, err := kv.Put(ctx, "route", []byte(`"failed"`)); err != nil || rev != 1 {
		t.Fatalf("put in the bucket made again = revision %d, %v; want 1", rev, err)
	}
	for _, r := range []*recorder{reader, owner} {
		bustest.WaitFor(t, 20*time.Second, "route=failed in both copies", func() bool {
			return r.holds(map[string]string{"route": `"failed"`})
		})
	}
}

// TestCopyOfAServerBackOnAWipedStore restarts the server on an empty store
// at the same address: a copy that creates its bucket makes it again and
// holds only what is written anew; a copy that does not holds nothing until
// the bucket is made again, then takes its keys from revision 1.
func TestCopyOfAServerBackOnAWipedStore(t *testing.T) {
	dir := t.TempDir()
	s, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	for _, b := range []string{"test_owned", "test_read"} {
		kv, err := bus.Bucket(ctx, js, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		fill(ctx, t, kv)
	}
	_, rjs := bustest.Connect(t, s, "reader")
	owned := record(ctx, t, rjs, "test_owned", true)
	read := record(ctx, t, rjs, "test_read", false)
	s.Shutdown()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s2, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Shutdown)
	bustest.WaitFor(t, 20*time.Second, "both copies to hold nothing", func() bool {
		return owned.c.Len() == 0 && read.c.Len() == 0
	})
	bustest.WaitFor(t, 0, "the owned bucket to be made again", func() bool {
		_, err := js.KeyValue(ctx, "test_owned")
		return err == nil
	})
	for _, b := range []string{"test_owned", "test_read"} {
		kv, err := bus.Bucket(ctx, js, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rev, err := kv.Put(ctx, "route", []byte(`"failed"`)); err != nil || rev != 1 {
			t.Fatalf("put in %s on the wiped server = revision %d, %v; want 1", b, rev, err)
		}
	}
	for _, r := range []*recorder{owned, read} {
		bustest.WaitFor(t, 20*time.Second, "route=failed in both copies", func() bool {
			return r.holds(map[string]string{"route": `"failed"`})
		})
		if ch := r.changes(); !slices.Contains(ch, "other deleted") {
			t.Errorf("changes = %q; want other reported deleted", ch)
		}
	}
}

// TestCopyGoesOnAfterTheCreationOfItsOwnStream hands a copy the server's
// advisory that its bucket's stream was created while the stream is still
// the one its watch follows (the advisory of the copy's own creation of the
// bucket, which the server sends a moment after the watch started): the
// watch goes on, neither giving up nor saying that the bucket was made
// anew. A cold start of `up` said "the bucket was deleted or made anew" of
// postgres_bound, a bucket the seat had just made.
func TestCopyGoesOnAfterTheCreationOfItsOwnStream(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	nc, js := bustest.Connect(t, s, "writer")
	const bucket = "test_advised"
	_, rjs := bustest.Connect(t, s, "reader")
	log := &logBuffer{}
	c := bus.Follow(ctx, rjs, bucket, bus.Options{Create: true,
		Log: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	<-c.Ready()
	before := bus.WatchCounts()[bucket].GiveUps
	if err := nc.Publish("$JS.EVENT.ADVISORY.STREAM.CREATED.KV_"+bucket, []byte(`{"stream":"KV_`+bucket+`","action":"create"}`)); err != nil {
		t.Fatal(err)
	}
	const goesOn = "bus: the stream the watch follows is the one created"
	bustest.WaitFor(t, 0, "the copy to take the advisory", func() bool {
		return log.has(goesOn) || log.has("bus: watch gave up")
	})
	if log.has("bus: watch gave up") || log.has("made anew") {
		t.Errorf("the copy took the creation of its own stream as a bucket made anew:\n%s", log)
	}
	if n := bus.WatchCounts()[bucket].GiveUps; n != before {
		t.Errorf("give-ups of %s = %d, want %d", bucket, n, before)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "later", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "later in the copy", func() bool { _, ok := c.Get("later"); return ok })
}

// TestCopyFoundGoneKeyExpectsNoMessage has a copy hold a key of which the
// stream has no message (an owner's write that landed from a stream since
// lost), then starts its watch again (the advisory of a new leader): the
// key, found gone, is reported deleted at revision 0, DeletedAt gives 0
// (what a conditional write of it expects: the bus has no message of it),
// and the late write is not taken again. Before, DeletedAt gave the
// stream's last sequence, and the owner's next write was refused ("wrong
// last sequence: 0").
func TestCopyFoundGoneKeyExpectsNoMessage(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	nc, js := bustest.Connect(t, s, "writer")
	const bucket = "test_found_gone"
	kv, err := bus.Bucket(ctx, js, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(ctx, k, []byte(`1`)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var gone []bus.Change
	c := bus.Follow(ctx, js, bucket, bus.Options{RevisionsOnly: true, OnChange: func(ch bus.Change) {
		if ch.Key == "ghost" {
			mu.Lock()
			gone = append(gone, ch)
			mu.Unlock()
		}
	}})
	<-c.Ready()
	c.Took("ghost", []byte(`1`), 2)
	if err := nc.Publish("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_"+bucket, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the copy to find ghost gone", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(gone) > 0
	})
	if ch := gone[0]; !ch.Deleted || ch.Revision != 0 {
		t.Errorf("change of ghost = %+v; want deleted at revision 0", ch)
	}
	rev, ok := c.DeletedAt("ghost")
	if rev != 0 || !ok {
		t.Errorf("DeletedAt(ghost) = %d, %v; want 0, true (removed, no message of ghost on the bus)", rev, ok)
	}
	// The late write is older than the loss: not taken again (before any
	// newer message of ghost, which the copy would hold instead).
	c.Took("ghost", []byte(`1`), 2)
	if it, held := c.Get("ghost"); held && it.Revision == 2 {
		t.Errorf("the copy took the late write of ghost at revision 2 again")
	}
	if _, err := js.Publish(ctx, "$KV."+bucket+".ghost", []byte(`2`), jetstream.WithExpectLastSequencePerSubject(rev)); err != nil {
		t.Errorf("a put of ghost expecting revision %d (DeletedAt): %v", rev, err)
	}
}
