package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Waiting returns how many changes c's watch read while c was held and has
// yet to take.
func Waiting(c *Copy) int { return c.waiting() }

// SizeHint returns sizeHint(st): how many keys a copy's maps are made for
// before its watch's initial values.
func SizeHint(st jetstream.StreamState) int { return sizeHint(st) }

// ScopedFor returns js binding buckets as a user whose JWT allows
// publishing publish ([withScoping]), asking the seat for its watches on
// nc itself (a server without accounts).
func ScopedFor(nc *nats.Conn, js jetstream.JetStream, publish []string) (jetstream.JetStream, error) {
	return withScoping(nc, js, publish, func() (*watchAsk, error) { return &watchAsk{nc: nc, user: "_"}, nil })
}

// WatchSubject returns the subject a scoped party's watch w receives its
// consumer's messages on ("" for another watch).
func WatchSubject(w jetstream.KeyWatcher) string {
	sw, ok := w.(*scopedWatcher)
	if !ok {
		return ""
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.sub.Subject
}

// SetWatchHeartbeat sets how often a scoped watch's consumer beats (three
// missed make it anew) until the test ends.
func SetWatchHeartbeat(t interface{ Cleanup(func()) }, d time.Duration) {
	old := watchHeartbeat
	watchHeartbeat = d
	t.Cleanup(func() { watchHeartbeat = old })
}

// SetSeen sets the highest revision c's watch has delivered, as a copy
// that read a stream further than a replica it is served by next.
func SetSeen(c *Copy, rev uint64) { c.seen.Store(rev) }

// AskersSaid returns how many headers a's Asker holds what it made of.
func AskersSaid(a *Answerer) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.said)
}

// MaxAskersSaid is how many headers an Answerer holds at most.
const MaxAskersSaid = askersSaid

// Turns are the seat's watch requests waiting per asker (watchTurns), for
// a test to push and pop by hand.
type Turns struct{ t *watchTurns }

// NewTurns returns empty turns, stopped when ctx is done.
func NewTurns(ctx context.Context) Turns { return Turns{newWatchTurns(ctx)} }

// Push queues m under who and reports whether it was queued.
func (t Turns) Push(who string, m *nats.Msg) bool { ok, _ := t.t.push(who, m); return ok }

// Pop takes the next request in turn, or false once stopped.
func (t Turns) Pop() (string, *nats.Msg, bool) {
	who, m, _, ok := t.t.pop()
	return who, m, ok
}

// Done ends who's request in hand.
func (t Turns) Done(who string) { t.t.done(who) }

// WatchesWaiting is how many requests of one asker wait at once.
const WatchesWaiting = watchesWaiting
