package seat

import (
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// retry holds the nodes whose write the bus did not take for another
// reason than a conflict: a lost connection, an acknowledgement that did
// not come, a replicated bucket electing a new leader. A conflict brings
// its own change through the seat's watch, which composes the node again;
// these bring none, so the node is composed again (and its keys written
// anew) after a backoff that grows with each failed try and starts again
// once every node tried again has had a write land. Its methods are safe
// for concurrent use.
type retry struct {
	mu    sync.Mutex
	bo    *backoff.ExponentialBackOff
	nodes map[string]bool // failed, waiting for the backoff
	due   []string        // the backoff is over: for the loop
	armed bool            // a timer will hand nodes to the loop
	tried map[string]bool // handed to the loop again, until a write of theirs lands
}

// The backoff of the seat's failed writes: from 250 ms, growing to 10 s.
const (
	retryMin = 250 * time.Millisecond
	retryMax = 10 * time.Second
)

// fail notes that a write of key failed (key is "<node>.…" in every bucket
// the seat writes) and, unless a retry is already armed, arms one: after
// the backoff, the failed nodes are handed to the loop and wake is called.
func (r *retry) fail(key string, wake func(), log *slog.Logger) {
	node, _, _ := strings.Cut(key, ".")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodes == nil {
		r.nodes = map[string]bool{}
	}
	if r.bo == nil {
		r.bo = backoff.NewExponentialBackOff()
		r.bo.InitialInterval = retryMin
		r.bo.MaxInterval = retryMax
	}
	r.nodes[node] = true
	if r.armed {
		return
	}
	r.armed = true
	wait := r.bo.NextBackOff()
	log.Warn("seat: writes the bus did not take; their nodes are composed and written again", "retry_in", wait)
	time.AfterFunc(wait, func() {
		r.mu.Lock()
		for n := range r.nodes {
			r.due = append(r.due, n)
		}
		r.nodes = map[string]bool{}
		r.armed = false
		r.mu.Unlock()
		wake()
	})
}

// take returns the nodes whose backoff is over, for the loop to compose
// again.
func (r *retry) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	due := r.due
	r.due = nil
	for _, n := range due {
		if r.tried == nil {
			r.tried = map[string]bool{}
		}
		r.tried[n] = true
	}
	return due
}

// landed notes that a write of key landed. Once every node tried again has
// had one land and none waits for the backoff, the backoff starts again
// from its least; until then each failure waits longer than the last
// (whether its write failed at once or only when its ack did not come).
func (r *retry) landed(key string) {
	node, _, _ := strings.Cut(key, ".")
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.tried[node] {
		return
	}
	delete(r.tried, node)
	if len(r.tried) == 0 && len(r.nodes) == 0 && len(r.due) == 0 && !r.armed {
		r.bo.Reset()
	}
}

// pending reports whether failed nodes wait to be composed again.
func (r *retry) pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.nodes) > 0 || len(r.due) > 0
}

// poke wakes the seat's loop without blocking.
func (s *Seat) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
