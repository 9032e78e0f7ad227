package asks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// writeTimeout bounds one read or write of mesh-asks_records.
const writeTimeout = 5 * time.Second

// attempts is how often a write of a record is tried when another writer
// changed the record meanwhile.
const attempts = 3

// Router is a running ask router. Make one with [Start]; it runs until the
// context given to Start is done. It is safe for concurrent use.
type Router struct {
	ctx     context.Context
	ans     *bus.Answerer
	log     *slog.Logger
	records *bus.Copy
	expiry  *expiry
	subs    []*nats.Subscription

	mu sync.Mutex // held across each change of a record: one at a time
}

// Start follows mesh-asks_records (creating it when missing), waits until
// the records are read, arms the expiry of every open ask (an ask whose time
// is already up is expired at once), subscribes to "asks.*",
// "mesh-asks.answer.*", "mesh-asks.withdraw.*" and "mesh-asks.list" (queue
// group "mesh-asks"), and
// returns once the server has the subscriptions. It returns an error when
// ctx ends first or a subscription is refused. The router stops when ctx is
// done: it unsubscribes and disarms its timer.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (*Router, error) {
	return StartAnswering(ctx, &bus.Answerer{Conn: nc}, js, log)
}

// StartAnswering starts the router as [Start] does, answering on ans (the
// router's user in the services account): each request is taken from the
// user the server names ([bus.Answerer.Asker]), never from the subject
// alone. An ask on "asks.<module>" and a withdrawal on
// "mesh-asks.withdraw.<module>" are refused unless that module sent them,
// an answer on "mesh-asks.answer.<user>" unless that user did, and a list
// unless some user did (the server lets operators alone publish it).
func StartAnswering(ctx context.Context, ans *bus.Answerer, js jetstream.JetStream, log *slog.Logger) (*Router, error) {
	if log == nil {
		log = slog.Default()
	}
	nc := ans.Conn
	r := &Router{ctx: ctx, ans: ans, log: log.With("component", Module)}
	r.expiry = newExpiry(r.expire)
	r.records = bus.Follow(ctx, js, mesh.RecordsBucket, bus.Options{Create: true, Log: r.log, OnChange: r.changed})
	select {
	case <-r.records.Ready():
	case <-ctx.Done():
		return nil, fmt.Errorf("asks: start: records of %s not read: %w", mesh.RecordsBucket, ctx.Err())
	}
	if _, err := r.records.KV(ctx); err != nil {
		return nil, fmt.Errorf("asks: start: bucket %s: %w", mesh.RecordsBucket, err)
	}
	r.expiry.start()
	for _, s := range []struct {
		subject string
		handle  nats.MsgHandler
	}{
		{AsksWildcard, r.onAsk},
		{AnswerPrefix + "*", r.onAnswer},
		{WithdrawPrefix + "*", r.onWithdraw},
		{ListSubject, r.onList},
	} {
		sub, err := nc.QueueSubscribe(s.subject, queue, s.handle)
		if err != nil {
			r.stop()
			return nil, fmt.Errorf("asks: start: subscribe %s: %w", s.subject, err)
		}
		r.subs = append(r.subs, sub)
	}
	if err := nc.FlushTimeout(writeTimeout); err != nil {
		r.stop()
		return nil, fmt.Errorf("asks: start: flush subscriptions: %w", err)
	}
	r.log.Info("asks: router started", "open", r.expiry.len(), "records", r.records.Len())
	go func() {
		<-ctx.Done()
		r.stop()
	}()
	return r, nil
}

// stop unsubscribes and disarms the timer; calling it again does nothing
// more.
func (r *Router) stop() {
	r.expiry.stop()
	r.mu.Lock()
	subs := r.subs
	r.subs = nil
	r.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe() // fails only on a closed connection, which has no subscriptions left
	}
}

// changed follows every record the copy takes from the bus (also those it
// reads at start, and those another router writes): an open one is tracked
// for expiry, any other forgotten. A record that does not decode is said.
func (r *Router) changed(ch bus.Change) {
	if ch.Deleted {
		r.expiry.forget(ch.Key)
		return
	}
	var rec mesh.Record
	if err := json.Unmarshal(ch.Value, &rec); err != nil {
		r.log.Warn("asks: record does not decode; it is not tracked", "bucket", mesh.RecordsBucket, "key", ch.Key, "err", err)
		r.expiry.forget(ch.Key)
		return
	}
	if rec.State == mesh.RecordOpen {
		r.expiry.track(ch.Key, rec.Ask.Expires)
	} else {
		r.expiry.forget(ch.Key)
	}
}

// sentBy returns a refusal unless m was sent by user, the user its
// subject names, which the server's permissions pin
// ([bus.Answerer.SentBy]: the server's header must name the same), or for
// user "" by any user the server names; on a server without accounts it
// returns nil.
func (r *Router) sentBy(m *nats.Msg, user string) error {
	var err error
	if user == "" {
		_, err = r.ans.Asker(m)
	} else {
		err = r.ans.SentBy(m, user)
	}
	if err != nil {
		return refusal("not-yours", err.Error())
	}
	return nil
}

// onAsk records an ask published on "asks.<module>".
func (r *Router) onAsk(m *nats.Msg) {
	module := strings.TrimPrefix(m.Subject, "asks.")
	var rec *mesh.Record
	err := r.sentBy(m, module)
	if err == nil {
		rec, err = r.raise(module, m.Data)
	}
	if err != nil {
		r.log.Warn("asks: ask not recorded", "subject", m.Subject, "err", err)
	}
	if m.Reply != "" {
		r.respondJSON(m, reply(rec, err))
	}
}

// raise records the ask in data, published by module, unless its id is
// recorded already; it returns the record as held.
func (r *Router) raise(module string, data []byte) (*mesh.Record, error) {
	if !mesh.ValidName(module) {
		return nil, refusal("bad-ask", fmt.Sprintf("asks.%s does not name a module (lower-case [a-z0-9][a-z0-9-]*)", module))
	}
	var a mesh.Ask
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, refusal("bad-ask", fmt.Sprintf("ask on asks.%s is not a JSON ask: %v", module, err))
	}
	if a.Asker != "" && a.Asker != module {
		return nil, refusal("bad-ask", fmt.Sprintf("ask %s names the asker %q but was published on asks.%s", a.ID, a.Asker, module))
	}
	a.Asker = module
	if err := Validate(a); err != nil {
		return nil, refusal("bad-ask", err.Error())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Whether the id is recorded is the bucket's word, not the copy's: a
	// record deleted while the copy's watch is behind (starting again, or
	// not yet at the delete) is still in the copy, and an ask raised again
	// for it would be answered "recorded" with no record left. Create
	// succeeds only where the bucket holds no record of the id.
	rec := mesh.Record{State: mesh.RecordOpen, Ask: a}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, refusal("bad-ask", fmt.Sprintf("ask %s does not encode: %v", a.ID, err))
	}
	kv, err := r.kv()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, writeTimeout)
	defer cancel()
	rev, err := kv.Create(ctx, a.ID, b)
	var held mesh.Record
	switch {
	case err == nil:
		r.records.Took(a.ID, b, rev)
		r.expiry.track(a.ID, a.Expires)
		r.log.Info("asks: ask recorded", "ask", a.ID, "asker", module, "headline", a.Headline, "expires", a.Expires)
		return &rec, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		// Recorded already (by this router, or another).
		var found bool
		if held, _, found, err = r.current(a.ID, true); err != nil {
			return nil, err
		}
		if !found {
			return nil, refusal("records", fmt.Sprintf("ask %s: the record exists but cannot be read", a.ID))
		}
	default:
		return nil, refusal("records", fmt.Sprintf("ask %s: record in %s: %v", a.ID, mesh.RecordsBucket, err))
	}
	if held.Ask.Asker != module {
		return nil, refusal("bad-ask", fmt.Sprintf("ask id %s is already recorded for the asker %q, not %q", a.ID, held.Ask.Asker, module))
	}
	r.log.Debug("asks: ask already recorded; not recorded again", "ask", a.ID, "asker", module, "state", held.State)
	return &held, nil
}

// onAnswer answers a request on "mesh-asks.answer.<user>"; every refusal is
// said in the log too.
func (r *Router) onAnswer(m *nats.Msg) {
	user, req, err := answerOf(m)
	var rec *mesh.Record
	if err == nil {
		err = r.sentBy(m, user)
	}
	if err == nil {
		rec, err = r.answer(user, req)
	}
	if err != nil {
		r.log.Warn("asks: answer refused", "subject", m.Subject, "ask", req.Ask, "option", req.Option, "err", err)
	} else {
		r.log.Info("asks: ask answered", "ask", req.Ask, "option", req.Option, "user", user)
	}
	r.respondJSON(m, reply(rec, err))
}

// answerOf reads the user from the subject of m and the request from its
// data.
func answerOf(m *nats.Msg) (string, AnswerRequest, error) {
	var req AnswerRequest
	user, err := token.Unescape(strings.TrimPrefix(m.Subject, AnswerPrefix))
	if err != nil || user == "" {
		return "", req, refusal("bad-request", fmt.Sprintf("subject %s does not name a user", m.Subject))
	}
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return "", req, refusal("bad-request", fmt.Sprintf("answer is not JSON {\"ask\",\"option\"}: %v", err))
	}
	if req.Ask == "" || req.Option == "" {
		return "", req, refusal("bad-request", fmt.Sprintf("answer names no ask or no option: ask %q, option %q", req.Ask, req.Option))
	}
	return user, req, nil
}

// answer writes user's choice of req.Option into the open ask req.Ask.
func (r *Router) answer(user string, req AnswerRequest) (*mesh.Record, error) {
	return r.change(req.Ask, "answered", func(rec mesh.Record, rev uint64) (*mesh.Record, error) {
		if err := notOpen(rec); err != nil {
			return nil, err
		}
		now := time.Now().UTC()
		if !now.Before(rec.Ask.Expires) {
			// Its time is up, though the timer has not rung yet.
			if _, err := r.write(rec, rev, expired(rec, now)); err != nil {
				r.log.Warn("asks: expiry not written", "ask", req.Ask, "err", err)
			}
			return nil, refusal("not-open", fmt.Sprintf("ask %s expired at %s; it is not open", req.Ask, stamp(rec.Ask.Expires)))
		}
		opt, ok := rec.Ask.Option(req.Option)
		if !ok {
			return nil, refusal("unknown-option", fmt.Sprintf("ask %s offers no option %q (it offers %s)", req.Ask, req.Option, offered(rec.Ask)))
		}
		next := rec
		next.State = mesh.RecordAnswered
		next.Warrant = &mesh.RecordWarrant{
			Asker: rec.Ask.Asker, Ask: rec.Ask.ID, Outcome: mesh.OutcomeChosen,
			Option: opt.ID, Binds: opt.Binds,
			By: mesh.Identity{Who: user, Kind: IdentityKind, Identity: user, JWT: req.JWT, Sig: req.Sig},
			At: now,
		}
		return &next, nil
	})
}

// change reads the record of ask id (from the copy, then from the bucket
// after a conflict), lets decide return the record to write (or an error,
// or nil when nothing is to be written: the record is returned as it is),
// and writes it with
// compare-and-set, trying again while the record changes meanwhile. what
// names the act in the error said when it keeps changing.
func (r *Router) change(id, what string, decide func(rec mesh.Record, rev uint64) (*mesh.Record, error)) (*mesh.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fresh := false
	for range attempts {
		rec, rev, found, err := r.current(id, fresh)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, refusal("unknown-ask", fmt.Sprintf("no ask %s is recorded", id))
		}
		next, err := decide(rec, rev)
		if err != nil {
			return nil, err
		}
		if next == nil {
			return &rec, nil
		}
		ok, err := r.write(rec, rev, *next)
		if err != nil {
			return nil, err
		}
		if ok {
			return next, nil
		}
		fresh = true // changed meanwhile: read it again from the bucket
	}
	return nil, refusal("records", fmt.Sprintf("ask %s kept changing while it was %s; try again", id, what))
}

// onWithdraw answers a request on "mesh-asks.withdraw.<asker>"; every
// refusal is said in the log too.
func (r *Router) onWithdraw(m *nats.Msg) {
	asker, req, err := withdrawOf(m)
	var rec *mesh.Record
	if err == nil {
		err = r.sentBy(m, asker)
	}
	if err == nil {
		rec, err = r.withdraw(asker, req)
	}
	if err != nil {
		r.log.Warn("asks: withdrawal refused", "subject", m.Subject, "ask", req.Ask, "why", req.Why, "err", err)
	}
	r.respondJSON(m, reply(rec, err))
}

// withdrawOf reads the asker from the subject of m and the request from its
// data.
func withdrawOf(m *nats.Msg) (string, WithdrawRequest, error) {
	var req WithdrawRequest
	asker, err := token.Unescape(strings.TrimPrefix(m.Subject, WithdrawPrefix))
	if err != nil || !mesh.ValidName(asker) {
		return "", req, refusal("bad-request", fmt.Sprintf("subject %s does not name an asker module (lower-case [a-z0-9][a-z0-9-]*)", m.Subject))
	}
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return "", req, refusal("bad-request", fmt.Sprintf("withdrawal is not JSON {\"ask\",\"why\"}: %v", err))
	}
	if req.Ask == "" || req.Why == "" {
		return "", req, refusal("bad-request", fmt.Sprintf("withdrawal names no ask or no why: ask %q, why %q", req.Ask, req.Why))
	}
	return asker, req, nil
}

// withdraw ends the open ask req.Ask that asker raised: expired, with a
// warrant by asker of the kind [mesh.KindWithdrawn] that keeps req.Why. An
// ask already expired is left as it is and returned; an ask whose time is
// up is expired by the clock and returned. An answered ask is refused
// (not-open): the operator's answer is not undone.
func (r *Router) withdraw(asker string, req WithdrawRequest) (*mesh.Record, error) {
	rec, err := r.change(req.Ask, "withdrawn", func(rec mesh.Record, _ uint64) (*mesh.Record, error) {
		if rec.Ask.Asker != asker {
			return nil, refusal("other-asker", fmt.Sprintf("ask %s was raised by %q, not %q; only its asker withdraws it", req.Ask, rec.Ask.Asker, asker))
		}
		if rec.State == mesh.RecordExpired {
			r.log.Debug("asks: ask already expired; withdrawn as it is", "ask", req.Ask, "asker", asker, "why", req.Why)
			return nil, nil
		}
		if rec.State != mesh.RecordOpen {
			return nil, notOpen(rec)
		}
		now := time.Now().UTC()
		next := expired(rec, now)
		if now.Before(rec.Ask.Expires) {
			next.Warrant.By = mesh.Identity{Who: asker, Kind: mesh.KindWithdrawn, Identity: asker}
			next.Warrant.Why = req.Why
		}
		return &next, nil
	})
	if err == nil && rec.Warrant != nil && rec.State == mesh.RecordExpired {
		if rec.Warrant.By.Kind == mesh.KindWithdrawn {
			r.log.Info("asks: ask withdrawn", "ask", req.Ask, "asker", asker, "why", req.Why)
		} else {
			r.log.Info("asks: ask expired as it was withdrawn", "ask", req.Ask, "asker", asker, "expires", rec.Ask.Expires, "why", req.Why)
		}
	}
	return rec, err
}

// expire marks each of the asks ids expired whose time is up; the timer
// calls it. A write that fails is said, and tried again a second later.
func (r *Router) expire(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		fresh := false
		for range attempts {
			rec, rev, found, err := r.current(id, fresh)
			if err != nil || !found {
				if err != nil {
					r.log.Warn("asks: record not read for its expiry; tried again in 1s", "ask", id, "err", err)
					r.expiry.track(id, time.Now().Add(time.Second))
				}
				break
			}
			if rec.State != mesh.RecordOpen {
				break
			}
			now := time.Now().UTC()
			if now.Before(rec.Ask.Expires) {
				r.expiry.track(id, rec.Ask.Expires)
				break
			}
			ok, err := r.write(rec, rev, expired(rec, now))
			if err != nil {
				r.log.Warn("asks: expiry not written; tried again in 1s", "ask", id, "err", err)
				r.expiry.track(id, time.Now().Add(time.Second))
				break
			}
			if ok {
				r.log.Info("asks: ask expired", "ask", id, "asker", rec.Ask.Asker, "expires", rec.Ask.Expires)
				break
			}
			fresh = true
		}
	}
}

// expired returns rec ended by the router's clock at now.
func expired(rec mesh.Record, now time.Time) mesh.Record {
	rec.State = mesh.RecordExpired
	rec.Warrant = &mesh.RecordWarrant{
		Asker: rec.Ask.Asker, Ask: rec.Ask.ID, Outcome: mesh.OutcomeExpired, By: clock, At: now,
	}
	return rec
}

// onList answers a [ListRequest] on "mesh-asks.list". A message with no
// reply subject is dropped at debug: nobody is to be answered, and an
// answer an asker aimed at the verb's subject comes so (the server routes
// it back through the import), which would otherwise be two lines of the
// log each.
func (r *Router) onList(m *nats.Msg) {
	if m.Reply == "" {
		r.log.Debug("asks: a list with no reply dropped: nobody to answer", "subject", m.Subject)
		return
	}
	if err := r.sentBy(m, ""); err != nil {
		r.log.Warn("asks: list refused", "err", err)
		var re *RouterError
		errors.As(err, &re)
		r.respondJSON(m, Listing{Error: re.Why, Code: re.Code})
		return
	}
	var req ListRequest
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			r.respondJSON(m, Listing{Error: fmt.Sprintf("list request is not JSON {\"state\"}: %v", err), Code: "bad-request"})
			return
		}
	}
	state := req.State
	switch state {
	case "":
		state = mesh.RecordOpen
	case "all", mesh.RecordOpen, mesh.RecordAnswered, mesh.RecordExpired:
	default:
		r.respondJSON(m, Listing{Error: fmt.Sprintf("list: unknown state %q (open, answered, expired or all)", state), Code: "bad-request"})
		return
	}
	if req.Ask != "" {
		r.respondJSON(m, r.one(req.Ask))
		return
	}
	r.respondJSON(m, r.list(state))
}

// one returns the listing of the record of ask id alone, in any state.
func (r *Router) one(id string) Listing {
	l := Listing{Records: []mesh.Record{}}
	it, ok := r.records.Get(id)
	if !ok {
		return l
	}
	var rec mesh.Record
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		l.Odd = append(l.Odd, Odd{Key: id, Why: fmt.Sprintf("record does not decode: %v", err)})
		return l
	}
	l.Records = append(l.Records, rec)
	return l
}

// list returns the records of state ("all" for every one).
func (r *Router) list(state string) Listing {
	l := Listing{Records: []mesh.Record{}}
	r.records.Range(func(key string, it bus.Item) bool {
		var rec mesh.Record
		if err := json.Unmarshal(it.Value, &rec); err != nil {
			l.Odd = append(l.Odd, Odd{Key: key, Why: fmt.Sprintf("record does not decode: %v", err)})
			return true
		}
		if state == "all" || rec.State == state {
			l.Records = append(l.Records, rec)
		}
		return true
	})
	slices.SortFunc(l.Records, func(a, b mesh.Record) int {
		return cmp.Or(a.Ask.Expires.Compare(b.Ask.Expires), cmp.Compare(a.Ask.ID, b.Ask.ID))
	})
	slices.SortFunc(l.Odd, func(a, b Odd) int { return cmp.Compare(a.Key, b.Key) })
	return l
}

// current returns the record of ask id and its revision, from the copy, or
// from the bucket itself when fresh; found is false when there is none.
func (r *Router) current(id string, fresh bool) (rec mesh.Record, rev uint64, found bool, err error) {
	var value []byte
	if fresh {
		kv, err := r.kv()
		if err != nil {
			return rec, 0, false, err
		}
		ctx, cancel := context.WithTimeout(r.ctx, writeTimeout)
		defer cancel()
		e, err := kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return rec, 0, false, nil
		}
		if err != nil {
			return rec, 0, false, refusal("records", fmt.Sprintf("ask %s: read %s: %v", id, mesh.RecordsBucket, err))
		}
		value, rev = e.Value(), e.Revision()
		r.records.Took(id, value, rev)
	} else {
		it, ok := r.records.Get(id)
		if !ok {
			return rec, 0, false, nil
		}
		value, rev = it.Value, it.Revision
	}
	if err := json.Unmarshal(value, &rec); err != nil {
		return rec, 0, false, refusal("records", fmt.Sprintf("the record of ask %s in %s does not decode: %v", id, mesh.RecordsBucket, err))
	}
	return rec, rev, true, nil
}

// write replaces the record at revision rev with next. It reports false
// (and no error) when the record changed meanwhile; the caller reads it
// again.
func (r *Router) write(old mesh.Record, rev uint64, next mesh.Record) (bool, error) {
	b, err := json.Marshal(next)
	if err != nil {
		return false, refusal("records", fmt.Sprintf("the record of ask %s does not encode: %v", old.Ask.ID, err))
	}
	kv, err := r.kv()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, writeTimeout)
	defer cancel()
	nrev, err := kv.Update(ctx, old.Ask.ID, b, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, refusal("records", fmt.Sprintf("ask %s: write %s: %v", old.Ask.ID, mesh.RecordsBucket, err))
	}
	r.records.Took(old.Ask.ID, b, nrev)
	if next.State != mesh.RecordOpen {
		r.expiry.forget(old.Ask.ID)
	}
	return true, nil
}

func (r *Router) kv() (jetstream.KeyValue, error) {
	kv, err := r.records.KV(r.ctx)
	if err != nil {
		return nil, refusal("records", fmt.Sprintf("bucket %s: %v", mesh.RecordsBucket, err))
	}
	return kv, nil
}

// notOpen returns why rec is not open, or nil when it is.
func notOpen(rec mesh.Record) error {
	switch rec.State {
	case mesh.RecordOpen:
		return nil
	case mesh.RecordAnswered:
		if w := rec.Warrant; w != nil {
			return refusal("not-open", fmt.Sprintf("ask %s was answered %q by %s at %s; it is not open", rec.Ask.ID, w.Option, w.By.Who, stamp(w.At)))
		}
		return refusal("not-open", fmt.Sprintf("ask %s is answered; it is not open", rec.Ask.ID))
	case mesh.RecordExpired:
		if w := rec.Warrant; w != nil && w.By.Kind == mesh.KindWithdrawn {
			return refusal("not-open", fmt.Sprintf("ask %s was withdrawn by %s at %s (%s); it is not open", rec.Ask.ID, w.By.Who, stamp(w.At), w.Why))
		}
		return refusal("not-open", fmt.Sprintf("ask %s expired at %s; it is not open", rec.Ask.ID, stamp(rec.Ask.Expires)))
	}
	return refusal("not-open", fmt.Sprintf("ask %s is %q; it is not open", rec.Ask.ID, rec.State))
}

// offered lists the option ids of a: "yes, no".
func offered(a mesh.Ask) string {
	ids := make([]string, len(a.Options))
	for i, o := range a.Options {
		ids[i] = o.ID
	}
	return strings.Join(ids, ", ")
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// reply builds the [Reply] of a record or an error.
func reply(rec *mesh.Record, err error) Reply {
	if err == nil {
		return Reply{Record: rec}
	}
	var re *RouterError
	if errors.As(err, &re) {
		return Reply{Error: re.Why, Code: re.Code}
	}
	return Reply{Error: err.Error(), Code: "records"}
}

// respondJSON answers m with v; a failure is said.
func (r *Router) respondJSON(m *nats.Msg, v any) {
	b, err := json.Marshal(v)
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil {
		r.log.Warn("asks: reply not sent", "subject", m.Subject, "err", err)
	}
}
