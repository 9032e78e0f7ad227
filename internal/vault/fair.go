package vault

import (
	"context"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/kit"
)

// Fairness of the vault's verbs: each asker's requests wait in a queue of
// their own, at most maxPerAsker of them (a request past that is refused
// at once), and answerers take the queues in turn, so that one party
// asking very often delays another's answer by one turn, not by its whole
// flood.
const (
	// maxPerAsker is how many requests of one asker wait at once.
	maxPerAsker = 16
	// answerers is how many requests are answered at once.
	answerers = 4
)

// job is one request and the verb's handler of it.
type job struct {
	m      *nats.Msg
	answer nats.MsgHandler
}

// fair holds the waiting requests per asker and the order in which askers
// are served. It is safe for concurrent use.
type fair struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queues map[string][]job
	turns  []string // the askers with a request waiting, in turn
	done   bool
}

func newFair(ctx context.Context) *fair {
	f := &fair{queues: map[string][]job{}}
	f.cond = sync.NewCond(&f.mu)
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		f.done = true
		f.mu.Unlock()
		f.cond.Broadcast()
	})
	return f
}

// push queues j under who and reports whether it did: false when who has
// maxPerAsker requests waiting already.
func (f *fair) push(who string, j job) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[who]
	if len(q) >= maxPerAsker {
		return false
	}
	if len(q) == 0 {
		f.turns = append(f.turns, who)
	}
	f.queues[who] = append(q, j)
	f.cond.Signal()
	return true
}

// pop returns the next request, the first of the asker whose turn it is;
// false once the vault stops.
func (f *fair) pop() (job, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.turns) == 0 && !f.done {
		f.cond.Wait()
	}
	if f.done {
		return job{}, false
	}
	who := f.turns[0]
	f.turns = f.turns[1:]
	q := f.queues[who]
	j := q[0]
	if len(q) == 1 {
		delete(f.queues, who)
	} else {
		f.queues[who] = q[1:]
		f.turns = append(f.turns, who)
	}
	return j, true
}

// serve answers the queued requests on [answerers] goroutines until the
// vault stops.
func (f *fair) serve() {
	for range answerers {
		go func() {
			for {
				j, ok := f.pop()
				if !ok {
					return
				}
				j.answer(j.m)
			}
		}()
	}
}

// queued returns a handler that queues each request of answer under its
// asker (the user the server names, or the subject's last token on a
// server without accounts), and refuses at once one past [maxPerAsker].
func (v *Vault) queued(answer nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		who, err := v.ans.Asker(m)
		if err != nil {
			answer(m) // refused by the handler, at once
			return
		}
		if who == "" {
			who = m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		}
		if !v.fair.push(who, job{m, answer}) {
			v.reply(m, kit.VaultAnswer{Error: whyTooMany(who)}, "subject", m.Subject, "user", who)
		}
	}
}
