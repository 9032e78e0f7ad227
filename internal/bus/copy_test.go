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
	t.Parallel()
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
	t.Parallel()
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
	// OnChange runs after the copy holds the key: wait for both.
	bustest.WaitFor(t, 0, "other and its OnChange", func() bool {
		_, ok := c.Get("other")
		mu.Lock()
		defer mu.Unlock()
		return ok && n > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if n != 1 {
		t.Errorf("OnChange calls = %d; want 1 (only the foreign write)", n)
	}
}

func TestCopySurvivesServerRestart(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// count returns how many lines hold s.
func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
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
	return recordWith(ctx, t, js, bucket, bus.Options{Create: create})
}

// recordWith is record with the copy's options (Log and OnChange its
// own).
func recordWith(ctx context.Context, t *testing.T, js jetstream.JetStream, bucket string, opts bus.Options) *recorder {
	t.Helper()
	r := &recorder{log: &logBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the copy of %s said:\n%s", bucket, r.log)
		}
	})
	opts.Log = slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.OnChange = func(ch bus.Change) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if ch.Deleted {
			r.chs = append(r.chs, ch.Key+" deleted")
			return
		}
		r.chs = append(r.chs, ch.Key+"="+string(ch.Value))
	}
	r.c = bus.Follow(ctx, js, bucket, opts)
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
// new value; the key the new bucket lacks is kept as last known by a
// reader, said, and taken as deleted by a copy whose owner writes it.
func TestCopyTakesABucketMadeAnew(t *testing.T) {
	t.Parallel()
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
	_, ojs := bustest.Connect(t, s, "owner")
	o := recordWith(ctx, t, ojs, "route-proxy_bound", bus.Options{Writes: true})
	for _, c := range []*recorder{r, o} {
		if !c.holds(map[string]string{"route": `"provided 4"`, "other": `"provided 4"`}) {
			t.Fatalf("the copy does not hold the bucket's two keys")
		}
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
	bustest.WaitFor(t, 0, "the reader to hold route=failed and other as last known", func() bool {
		return r.holds(map[string]string{"route": `"failed"`, "other": `"provided 4"`}) && r.c.Known()
	})
	bustest.WaitFor(t, 0, "the owner's copy to hold route=failed alone", func() bool {
		return o.holds(map[string]string{"route": `"failed"`}) && slices.Contains(o.changes(), "other deleted")
	})
	if ch := r.changes(); !slices.Contains(ch, `route="failed"`) || slices.Contains(ch, "other deleted") {
		t.Errorf("reader's changes = %q; want route=\"failed\" and no delete of other", ch)
	}
	if !r.log.has("bus: the bucket is back without keys the copy held") {
		t.Errorf("the reader did not say it keeps other as last known:\n%s", r.log)
	}
	// Later writes of the new bucket are taken as usual, and a kept key's
	// write at a revision below the one it was kept at too.
	kv.Put(ctx, "later", []byte(`1`))
	kv.Put(ctx, "other", []byte(`"provided 5"`))
	bustest.WaitFor(t, 0, "later and other=provided 5", func() bool {
		return r.holds(map[string]string{"route": `"failed"`, "other": `"provided 5"`, "later": "1"})
	})
	kv.Delete(ctx, "other")
	bustest.WaitFor(t, 0, "other deleted", func() bool { _, ok := r.c.Get("other"); return !ok })
}

// TestCopyOfABucketGone deletes a followed bucket: a reader keeps every key
// it held, reports none, is not known and says so once while it waits
// (with backoff) for the bucket; the copy of an owner that creates and
// writes the bucket makes it again and takes its keys as deleted. Once the
// bucket has a key again, the reader takes it (from revision 1) and is
// known. Before, the reader took every key as deleted.
func TestCopyOfABucketGone(t *testing.T) {
	t.Parallel()
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
	if !reader.c.Known() {
		t.Fatal("the reader is not known once ready")
	}
	before := bus.WatchCounts()["test_gone"].GiveUps
	if err := js.DeleteKeyValue(ctx, "test_gone"); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the reader to find the bucket gone", func() bool { return !reader.c.Known() })
	// It looks again with backoff: three looks, one warning.
	bustest.WaitFor(t, 20*time.Second, "the reader to look for the bucket three times", func() bool {
		return bus.WatchCounts()["test_gone"].GiveUps >= before+3
	})
	if !reader.holds(map[string]string{"route": `"provided 4"`, "other": `"provided 4"`}) {
		t.Errorf("the reader does not hold what it held before the bucket was deleted")
	}
	if ch := reader.changes(); len(ch) != 2 {
		t.Errorf("reader's changes = %q; want only the two initial values", ch)
	}
	if n := reader.log.count("level=WARN msg=\"bus: the bucket is gone; the copy keeps the keys it held"); n != 1 {
		t.Errorf("the reader said the bucket gone %d times; want once:\n%s", n, reader.log)
	}
	if n := reader.log.count("level=WARN"); n > 2 {
		t.Errorf("the reader warned %d times while the bucket was gone; want the loss and one give-up:\n%s", n, reader.log)
	}

	_, ojs := bustest.Connect(t, s, "owner")
	kv, _ = bus.Bucket(ctx, ojs, "test_gone", 0)
	fill(ctx, t, kv)
	owner := recordWith(ctx, t, ojs, "test_gone", bus.Options{Create: true, Writes: true})
	if err := js.DeleteKeyValue(ctx, "test_gone"); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the owner's copy to hold nothing, route and other reported deleted", func() bool {
		ch := owner.changes()
		return owner.c.Len() == 0 && slices.Contains(ch, "route deleted") && slices.Contains(ch, "other deleted")
	})
	if !owner.log.has("bus: the bucket is gone; every key it held is taken as deleted") {
		t.Errorf("the owner's copy did not say the bucket is gone:\n%s", owner.log)
	}
	bustest.WaitFor(t, 0, "the owner to make the bucket again", func() bool {
		_, err := js.KeyValue(ctx, "test_gone")
		return err == nil
	})
	kv, _ = js.KeyValue(ctx, "test_gone")
	if rev, err := kv.Put(ctx, "route", []byte(`"failed"`)); err != nil || rev != 1 {
		t.Fatalf("put in the bucket made again = revision %d, %v; want 1", rev, err)
	}
	bustest.WaitFor(t, 20*time.Second, "route=failed in the owner's copy", func() bool {
		return owner.holds(map[string]string{"route": `"failed"`})
	})
	bustest.WaitFor(t, 20*time.Second, "route=failed in the reader, other kept, known", func() bool {
		return reader.holds(map[string]string{"route": `"failed"`, "other": `"provided 4"`}) && reader.c.Known()
	})
	if ch := reader.changes(); slices.Contains(ch, "other deleted") || slices.Contains(ch, "route deleted") {
		t.Errorf("reader's changes = %q; want no delete", ch)
	}
	if !reader.log.has("bus: the bucket exists again") {
		t.Errorf("the reader did not say the bucket exists again:\n%s", reader.log)
	}
}

// TestCopyOfAServerBackOnAWipedStore restarts the server on an empty store
// at the same address: a copy that creates and writes its bucket makes it
// again and holds only what is written anew; a reader keeps what it held
// until the bucket is made again, then takes its keys from revision 1 and
// keeps the others as last known.
func TestCopyOfAServerBackOnAWipedStore(t *testing.T) {
	t.Parallel()
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
	owned := recordWith(ctx, t, rjs, "test_owned", bus.Options{Create: true, Writes: true})
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
	bustest.WaitFor(t, 20*time.Second, "the owner's copy to hold nothing, the reader not known", func() bool {
		return owned.c.Len() == 0 && !read.c.Known()
	})
	if read.c.Len() != 2 {
		t.Errorf("the reader holds %d keys while its bucket is gone; want the 2 it held", read.c.Len())
	}
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
	bustest.WaitFor(t, 20*time.Second, "route=failed in the owner's copy", func() bool {
		return owned.holds(map[string]string{"route": `"failed"`})
	})
	if ch := owned.changes(); !slices.Contains(ch, "other deleted") {
		t.Errorf("owner's changes = %q; want other reported deleted", ch)
	}
	bustest.WaitFor(t, 20*time.Second, "route=failed in the reader, other kept", func() bool {
		return read.holds(map[string]string{"route": `"failed"`, "other": `"provided 4"`}) && read.c.Known()
	})
	if ch := read.changes(); slices.Contains(ch, "other deleted") {
		t.Errorf("reader's changes = %q; want no delete of other", ch)
	}
}

// TestCopyRestartedOnTheSameStreamTakesWhatChanged starts a copy's watch
// again (the advisory of a new leader) on the stream it follows while its
// stream says a last sequence below what the copy has seen (a replica
// behind, a server that rejoined its cluster): the same creation time is
// the same stream, so nothing is taken anew nor reported. Before, the
// copy took the stream as made anew and reported every key again.
func TestCopyRestartedOnTheSameStreamTakesWhatChanged(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	nc, js := bustest.Connect(t, s, "writer")
	const bucket = "test_same_stream"
	kv, err := bus.Bucket(ctx, js, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	fill(ctx, t, kv)
	r := record(ctx, t, js, bucket, false)
	bus.SetSeen(r.c, 1000) // past the stream's last sequence, 10
	before := bus.WatchCounts()[bucket]
	if err := nc.Publish("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_"+bucket, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the watch to start again", func() bool {
		return bus.WatchCounts()[bucket].Restarts > before.Restarts
	})
	if r.log.has("bus: the bucket was made anew") {
		t.Errorf("the copy took its own stream as made anew:\n%s", r.log)
	}
	if ch := r.changes(); len(ch) != 2 {
		t.Errorf("changes = %q; want only the two initial values", ch)
	}
	kv.Put(ctx, "later", []byte(`1`))
	bustest.WaitFor(t, 0, "later", func() bool { _, ok := r.c.Get("later"); return ok })
}

// TestCopyGoesOnAfterTheCreationOfItsOwnStream hands a copy the server's
// advisory that its bucket's stream was created while the stream is still
// the one its watch follows (the advisory of the copy's own creation of the
// bucket, which the server sends a moment after the watch started): the
// watch goes on, neither giving up nor saying that the bucket was made
// anew. A cold start of `up` said "the bucket was deleted or made anew" of
// postgres_bound, a bucket the seat had just made.
func TestCopyGoesOnAfterTheCreationOfItsOwnStream(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
