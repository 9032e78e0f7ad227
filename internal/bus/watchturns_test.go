package bus_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// TestSeatServesWatchAskersInTurn: ace floods watch requests past its
// bound (those past bus.WatchesWaiting are not queued), g14 asks two. The
// seat takes one request of an asker at a time: while ace's request is in
// hand, g14's are taken and none more of ace's, so that ace has at most one
// request (up to eight consumer creates, one after the other) in the
// server's API queue; once ace's is done its next takes its turn after
// g14's.
func TestSeatServesWatchAskersInTurn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	turns := bus.NewTurns(ctx)
	queued := 0
	for i := range bus.WatchesWaiting + 10 {
		if turns.Push("ace", &nats.Msg{Subject: fmt.Sprintf("ace.%d", i)}) {
			queued++
		}
	}
	if queued != bus.WatchesWaiting {
		t.Fatalf("ace's %d requests: %d queued; want %d", bus.WatchesWaiting+10, queued, bus.WatchesWaiting)
	}
	turns.Push("g14", &nats.Msg{Subject: "g14.0"})
	turns.Push("g14", &nats.Msg{Subject: "g14.1"})

	take := func(want string) {
		t.Helper()
		who, m, ok := turns.Pop()
		if !ok || m.Subject != want {
			t.Fatalf("took %s %v (%v); want %s", who, m, ok, want)
		}
	}
	take("ace.0")
	take("g14.0") // ace's request in hand: g14's, not ace's next
	turns.Done("g14")
	take("g14.1")
	turns.Done("ace")
	take("ace.1") // ace's next, once its first was done
	turns.Done("g14")
	turns.Done("ace")
	take("ace.2")

	// With ace's in hand and no other asker waiting, nothing is taken
	// until the seat stops.
	taken := make(chan bool)
	go func() {
		_, _, ok := turns.Pop()
		taken <- ok
	}()
	cancel()
	if <-taken {
		t.Error("a second request of ace's was taken while one was in hand; want none until it is done")
	}
}
