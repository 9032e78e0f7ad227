package vault

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/kit"
)

// Fairness of the vault's verbs: the subscription's handler only queues
// each request under its asker, in a queue of the asker's own, at most
// maxPerAsker of them: a request past that is dropped, not answered
// (counted, and said once per asker per dropInterval), so that the read
// loop keeps up with a flood and the server drops no other asker's
// request. Answerers take the queues in turn, so that one party asking
// very often delays another's answer by one turn, not by its whole flood.
const (
	// maxPerAsker is how many requests of one asker wait at once.
	maxPerAsker = 16
	// answerers is how many requests are answered at once.
	answerers = 4
	// dropInterval is how often the drops of one asker are said.
	dropInterval = time.Minute
	// pendingMsgs and pendingBytes bound what a verb's subscription holds
	// before the handler takes it (nats.go's defaults are 512 Ki
	// messages and 64 MiB): a burst of small requests waits there rather
	// than being dropped by the library.
	pendingMsgs  = 4 << 20
	pendingBytes = 512 << 20
)

// queuedNote is a request queued while [fair].record is set: its asker,
// how many requests the answerers had taken before it (the length of
// [fair].taken then), and how many of the other askers' requests waited.
type queuedNote struct {
	who    string
	taken  int
	others int
}

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
	// dropped counts each asker's requests dropped since said[asker],
	// when its drops were last said.
	dropped map[string]int
	said    map[string]time.Time
	done    bool
	// held stops the answerers taking requests (tests only: see
	// export_test.go's Hold).
	held bool
	// record makes pop append to taken the asker of each request it
	// takes, in order (tests only: see export_test.go's Record).
	record bool
	taken  []string
	// queued notes, while record is set, each request push queues
	// (tests only: see export_test.go's RecordQueued).
	queued []queuedNote
	// answering counts the answerers running: [fair.wait] waits for
	// them.
	answering sync.WaitGroup
}

func newFair(ctx context.Context) *fair {
	f := &fair{queues: map[string][]job{}, dropped: map[string]int{}, said: map[string]time.Time{}}
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
// maxPerAsker requests waiting already, and then with say the number of
// who's requests dropped since its drops were last said, when they are
// to be said now (once per dropInterval), else 0.
func (f *fair) push(who string, j job) (queued bool, say int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[who]
	if len(q) >= maxPerAsker {
		f.dropped[who]++
		if now := time.Now(); now.Sub(f.said[who]) >= dropInterval {
			say = f.dropped[who]
			f.said[who], f.dropped[who] = now, 0
		}
		return false, say
	}
	if f.record {
		others := 0
		for w, q := range f.queues {
			if w != who {
				others += len(q)
			}
		}
		f.queued = append(f.queued, queuedNote{who, len(f.taken), others})
	}
	if len(q) == 0 {
		f.turns = append(f.turns, who)
	}
	f.queues[who] = append(q, j)
	f.cond.Signal()
	return true, 0
}

// pop returns the next request, the first of the asker whose turn it is;
// false once the vault stops.
func (f *fair) pop() (job, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for (len(f.turns) == 0 || f.held) && !f.done {
		f.cond.Wait()
	}
	if f.done {
		return job{}, false
	}
	who := f.turns[0]
	f.turns = f.turns[1:]
	q := f.queues[who]
	j := q[0]
	if f.record {
		f.taken = append(f.taken, who)
	}
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
		f.answering.Go(func() {
			for {
				j, ok := f.pop()
				if !ok {
					return
				}
				j.answer(j.m)
			}
		})
	}
}

// wait returns once the vault has stopped and every answerer has answered
// the request in hand: no verb touches the store after.
func (f *fair) wait() { f.answering.Wait() }

// queued returns a handler that queues each request of answer under its
// asker, and drops one past [maxPerAsker] unanswered (the asker's request
// times out), saying the drops once per asker per [dropInterval]. The
// asker is the subject's last token: the user that the server's publish
// permission pins there ("mesh-vault.secret.<module>.<asker>"), or for
// "mesh-vault.rotate", which operators alone may ask, the operators
// together ([operatorsTurn], which no user's name is: a module named
// "rotate" once shared the operators' turn, and its requests of its own
// secrets filled it). No header decides a turn: an asker could write one naming
// anyone (see bus.Answerer.SentBy). A message with no reply subject is
// dropped at once, in no turn: it has nobody to answer, and it may be no
// asker's request but an answer that an asker aimed at a verb's subject
// (the server routes an answer to a literal verb's subject, such as
// "mesh-vault.rotate", back through the import, where the subject's
// last token is the asker's choice, not the server's: aimed there, the
// answers of any verb answered at once took the operators' turn and the
// vault dropped their rotations). The request's reply is its asker's
// inbox or another subject; the answer, published by an answerer, has
// none.
// operatorsTurn is the asker the vault queues the operators' rotations
// under: the verb's subject, whose "." no user name holds ([a-z0-9-]), so
// that it is no module's or client's turn.
const operatorsTurn = kit.RotateVerb

func (v *Vault) queued(answer nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		if m.Reply == "" {
			v.log.Debug("vault: a message with no reply dropped, in no asker's turn", "subject", m.Subject)
			return
		}
		who := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		if m.Subject == kit.RotateVerb {
			who = operatorsTurn
		}
		if ok, say := v.fair.push(who, job{m, answer}); !ok && say > 0 {
			v.log.Warn("vault: "+whyTooMany(who), "user", who, "dropped", say, "subject", m.Subject, "per", dropInterval)
		}
	}
}
