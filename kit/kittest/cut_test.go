package kittest_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// failures is t for a test seat, keeping the failures it says so that the
// test can check them.
type failures struct {
	testing.TB
	mu   sync.Mutex
	said []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.said = append(f.said, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *failures) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.said...)
}

// TestSeatWritesAgainAPutLostWithItsConnection cuts the test seat's
// connection while a provision it wrote is stored but its answer has not
// reached the seat (the fault a loaded machine shows as an EOF): the put
// is tried again once the connection is back, and the seat holds the
// provision with no failure said.
func TestSeatWritesAgainAPutLostWithItsConnection(t *testing.T) {
	url := kittest.Server(t)
	c := bustest.NewRelay(t, url)
	f := &failures{TB: t}
	seat := kittest.NewSeat(f, c.URL())
	_, js := kittest.Connect(t, url, "reader")
	ctx := bustest.Context(t)
	kv, err := js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}

	key, p := kittest.Requirement(gitea, "shelf", "", shelf)
	c.Silence()
	done := make(chan struct{})
	go func() {
		defer close(done)
		seat.Need(key, p)
	}()
	bustest.WaitFor(t, 0, fmt.Sprintf("%s stored", key), func() bool {
		_, err := kv.Get(ctx, key.String())
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	})
	c.Cut() // the put's answer is lost with the connection
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Fatalf("the seat's put of %s has not returned 45 s after its connection was cut", key)
	}
	if said := f.all(); len(said) > 0 {
		t.Errorf("the seat failed its test: %q; want its put of %s tried again once the connection is back", said, key)
	}
	bustest.WaitFor(t, 0, fmt.Sprintf("the seat to hold %s asked", key), func() bool {
		got, ok := seat.Get(key)
		return ok && got.State == mesh.Asked && got.Why == kittest.WhyNoEntry(shelf)
	})
}
