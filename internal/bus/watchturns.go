package bus

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The seat serves watch requests ([ServeWatches]) per asker, in turn: the
// subscription's handler only queues each request under its asker, at
// most watchesWaiting of them (a request past that is dropped, not
// answered: the asker's watch times out and its supervisor tries again
// later; the drops are counted and said once per asker per
// watchDropsSaid), and each asker has at most one request in hand. One
// request makes the seat send up to [access.WatchNames] consumer creates,
// one after the other, each waiting in the server's JetStream API queue,
// which every account shares: so one asker, however fast it asks, has at
// most one of the seat's requests in that queue, and another asker's watch
// waits for one turn of each asker, not for a flood. A cold start of many
// askers (each a few watches) keeps all [watchWorkers] busy.
const (
	// watchesWaiting is how many watch requests of one asker wait at
	// once: a node's client asks about ten at its start.
	watchesWaiting = 32
	// watchDropsSaid is how often the drops of one asker are said.
	watchDropsSaid = time.Minute
)

// waitingWatch is a watch request waiting for its turn, and when it came.
type waitingWatch struct {
	m  *nats.Msg
	at time.Time
}

// watchTurns holds the waiting watch requests per asker and the order in
// which askers are served. It is safe for concurrent use.
type watchTurns struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queues map[string][]waitingWatch
	// turns are the askers with a request waiting and none in hand, in
	// turn; inHand the askers with one in hand.
	turns  []string
	inHand map[string]bool
	// dropped counts each asker's requests dropped since said[asker],
	// when its drops were last said.
	dropped map[string]int
	said    map[string]time.Time
	stopped bool
}

func newWatchTurns(ctx context.Context) *watchTurns {
	t := &watchTurns{queues: map[string][]waitingWatch{}, inHand: map[string]bool{},
		dropped: map[string]int{}, said: map[string]time.Time{}}
	t.cond = sync.NewCond(&t.mu)
	context.AfterFunc(ctx, func() {
		t.mu.Lock()
		t.stopped = true
		t.mu.Unlock()
		t.cond.Broadcast()
	})
	return t
}

// push queues m under who and reports whether it did: false when who has
// watchesWaiting requests waiting already, and then with say the number
// of who's requests dropped since its drops were last said, when they
// are to be said now (once per watchDropsSaid), else 0.
func (t *watchTurns) push(who string, m *nats.Msg) (queued bool, say int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.queues[who]
	if len(q) >= watchesWaiting {
		t.dropped[who]++
		if now := time.Now(); now.Sub(t.said[who]) >= watchDropsSaid {
			say = t.dropped[who]
			t.said[who], t.dropped[who] = now, 0
		}
		return false, say
	}
	if len(q) == 0 && !t.inHand[who] {
		t.turns = append(t.turns, who)
		t.cond.Signal()
	}
	t.queues[who] = append(q, waitingWatch{m: m, at: time.Now()})
	return true, 0
}

// pop returns the first request of the asker whose turn it is, which is
// in hand until done(who), and how long it waited; false once the seat
// stops.
func (t *watchTurns) pop() (who string, m *nats.Msg, waited time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.turns) == 0 && !t.stopped {
		t.cond.Wait()
	}
	if t.stopped {
		return "", nil, 0, false
	}
	who = t.turns[0]
	t.turns = t.turns[1:]
	q := t.queues[who]
	m, waited = q[0].m, time.Since(q[0].at)
	if len(q) == 1 {
		delete(t.queues, who)
	} else {
		t.queues[who] = q[1:]
	}
	t.inHand[who] = true
	return who, m, waited, true
}

// done ends who's request in hand: who's next waiting request, if any,
// takes its turn after the askers waiting now.
func (t *watchTurns) done(who string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inHand, who)
	if len(t.queues[who]) > 0 {
		t.turns = append(t.turns, who)
		t.cond.Signal()
	}
}

// watchAskerOf returns who asks the watch request m, as the seat queues
// it: the user its subject names (the server's permission pins it, and
// its header agrees: watchAskerIn), or on a server without accounts (one
// connection space) the asker's connection, told by its reply subject's
// inbox ("_INBOX.<nuid>" of "_INBOX.<nuid>.<token>").
func watchAskerOf(user string, m *nats.Msg) string {
	if user != "" {
		return user
	}
	if i := strings.LastIndexByte(m.Reply, '.'); i > 0 {
		return m.Reply[:i]
	}
	return m.Reply
}
