package assemble_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// A seat started on a server whose max store (max_file_store 1 GiB)
// cannot hold the mesh's buckets fails at once with bus.ErrStoreTooSmall
// saying the max_file_store to set (what access.StoreReserved says with no
// provider yet), rather than trying the bucket again.
func TestSeatOnATooSmallStoreSaysWhatToSet(t *testing.T) {
	s := bustest.Server(t, "jetstream: {max_file_store: 1GB}")
	ctx := bustest.Context(t)
	var logged syncBuffer
	a := &assemble.Assembly{Dial: assemble.Shared(s.URL(), "", slog.New(slog.NewTextHandler(&logged, nil))),
		Log: slog.New(slog.NewTextHandler(&logged, nil))}
	_, err := a.StartSeat(ctx, assemble.SeatConfig{ID: "seat-1", LeaseTTL: 10 * time.Second})
	set := "set max_file_store: " + bus.Size(access.StoreReserved(0)) + " (or more) in the jetstream block"
	if !errors.Is(err, bus.ErrStoreTooSmall) || !strings.Contains(err.Error(), set) {
		t.Fatalf("a seat on a max store of 1 GiB: %v; want bus.ErrStoreTooSmall saying %q", err, set)
	}
	if ctx.Err() != nil {
		t.Errorf("the seat's start ended with the test's context: %v; want it refused at once", ctx.Err())
	}
	if strings.Contains(logged.String(), "retry") || strings.Contains(logged.String(), "again") {
		t.Errorf("the seat tried the bucket again:\n%s", logged.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
