package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
	c := bus.Follow(ctx, js, "test_restart", bus.Options{})
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
