package assemble_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// lines is a log writer that keeps each line.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// text returns every line.
func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count returns how many lines hold every part.
func (l *lines) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line := range strings.SplitSeq(l.b.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// A component started before the seat looks for its bucket again and
// again (issue 17): it says that it waits once, each further look at debug
// level only, and that the bucket is found.
func TestAwaitSaysItWaitsOnce(t *testing.T) {
	s := bustest.Server(t)
	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := &assemble.Assembly{Dial: assemble.Shared(s.URL(), "", log), Log: log, AwaitMax: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		a.Wait()
	})
	started := make(chan error, 1)
	go func() {
		_, err := a.StartRouter(ctx)
		started <- err
	}()
	waiting := "assemble: waiting for a bucket the seat makes"
	bustest.WaitFor(t, 0, "five looks for the bucket", func() bool { return said.count(waiting, "level=DEBUG") >= 5 })
	if n := said.count(waiting) - said.count(waiting, "level=DEBUG"); n != 1 {
		t.Errorf("the wait was said %d times above debug level; want once", n)
	}
	_, js := bustest.Connect(t, s, "seat")
	if _, err := js.CreateKeyValue(bustest.Context(t), jetstream.KeyValueConfig{Bucket: mesh.RecordsBucket}); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("the router did not start once its bucket was made: %v", err)
	}
	if n := said.count("assemble: bucket found", "bucket="+mesh.RecordsBucket); n != 1 {
		t.Errorf("the bucket found was said %d times; want once", n)
	}
}
