package seat

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The seat's write path is a pipeline: the puts of one composition (or one
// judgement) are published together without waiting for their acks, as a
// flight, and the loop goes on to the next node while they are in flight.
// Flights land in the order they were launched: once every ack of the
// oldest is in, its writes are taken into the seat's copies and what its
// composition does after its writes (asks raised, OnResult) is done.
//
// What a composition reads stays what the serial seat read: each put is
// taken into the seat's mesh when it is published, so that the next node is
// composed on this node's result; a put the bus refuses is taken back out
// (the mesh gets the copy's value again, and the keys that depend on it are
// judged again). A key has at most one write in flight: its next write (or
// delete) waits until the first has landed, and expects its revision.

// maxFlying is the default of the seat's window (Seat.window, smaller in
// some tests): how many puts it publishes without their acks before it
// waits for the oldest (with maxTries tries each, 3,072 publishes, below
// jetstream's own limit of 4000 pending asynchronous publishes, past which
// a publish fails).
const maxFlying = 1024

// ackTimeout is how long a try of a put waits for its ack before the put
// is sent again (Seat.ackWait, shorter in some tests): a bus that answers
// late (a loaded machine, a replicated bucket electing its leader) or a
// connection lost with the put in flight. Every try of a put carries the
// same Nats-Msg-Id and expects the same revision, and the tries sent stay
// open for their answers: the first ack taken is the bus's word, so that a
// put acknowledged after ackTimeout is written, not failed and written
// again into a conflict with itself (see [Seat.await]).
const ackTimeout = 5 * time.Second

// maxTries is how many times a put is sent (the first try and two sent
// again, ackTimeout apart): the tries span 10 s, within the duplicate
// window of the seat's buckets ([bus.SeatDuplicateWindow], 30 s). A put
// none of whose tries is answered within ackTimeout of the last is a write
// the bus did not take (noAck): its node is composed again after a
// backoff (retry), and written with a new id. The select of [Seat.await]
// names each try.
const maxTries = 3

// noAck returns the error of a put none of whose maxTries tries was
// acknowledged, each waiting wait; it wraps errNoAck.
func noAck(wait time.Duration) error {
	return fmt.Errorf("seat: %w within %v of each of %d tries", errNoAck, wait, maxTries)
}

// errNoAck is wrapped by the error of a put the bus did not acknowledge
// (noAck): the seat then has the bucket's store checked (mend).
var errNoAck = errors.New("no acknowledgement")

// writeIDPrefix returns the start of a seat's put ids: 12 random
// characters and a dot.
func writeIDPrefix() string {
	var b [9]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:]) + "."
}

// writeID returns the Nats-Msg-Id of the seat's next put: its prefix and
// a count, some 15 bytes.
func (s *Seat) writeID() string {
	s.puts++
	return s.idPrefix + strconv.FormatUint(s.puts, 36)
}

// writes is what one composition or judgement writes.
type writes struct {
	plans        map[string][]byte // plan key -> value
	plansGone    []string
	refusals     map[string]mesh.Refusal
	refusalsGone []string
	provs        map[string]mesh.Provision
	retired      []string          // provision keys approved with yes whose entry is gone: deleted
	retiredWhy   map[string]string // what each retired key's provider removed (logged)
}

func (w *writes) empty() bool {
	return len(w.plans)+len(w.plansGone)+len(w.refusals)+len(w.refusalsGone)+len(w.provs)+len(w.retired) == 0
}

// flight is one batch of puts in flight, and what to do once it landed.
type flight struct {
	puts []pending
	// deleted is how many deletes the batch made (they are made at once,
	// not in flight).
	deleted int
	// then is called on the loop once every put's ack is in, with how many
	// keys the batch wrote or deleted and the provision keys it wrote.
	then func(n int, wrote map[string]bool)
	// later holds the changes of its keys that the seat's watches took
	// while it was in flight: taken once it landed (see ownEcho).
	later []bus.Change
	// acked counts the puts, from the first, known to be acknowledged
	// (makeRoom's cursor).
	acked int
	// Once landed: how many puts were written, and the provision keys.
	landed bool
	n      int
	wrote  map[string]bool
}

// pending is one put of a flight.
type pending struct {
	bucket, key string
	value       []byte
	prev        uint64 // the revision the put expects
	// old is what the mesh held at the key before (a plan's []byte, a
	// mesh.Provision or a mesh.Refusal; nil when none): taken back when the
	// bus refuses the put.
	old any
	id  string // the put's Nats-Msg-Id, the same on each of its tries
	// tries holds the futures of the tries sent whose answer is not taken
	// (nil once taken); sent counts the tries sent.
	tries [maxTries]jetstream.PubAckFuture
	sent  int
	at    time.Time // when its last try was sent
	// conflict is a try's refusal as a conflict, and failed another try's
	// error, kept while other tries may still answer.
	conflict, failed error
	done             bool   // the ack (or its error) is in
	seq              uint64 // the put's revision, once acknowledged
	err              error  // why the bus refused or did not take the put
}

// flyKey names a key of a bucket in Seat.flying and Seat.echoes (a struct,
// not a joined string: no allocation per put).
type flyKey struct{ bucket, key string }

// owned reports whether the seat alone writes bucket.
func owned(bucket string) bool {
	return slices.Contains(ownBuckets, bucket)
}

// write launches w as a flight: its puts are published without waiting,
// each conditional on the revision of its key that the seat's mesh holds
// (so that a write based on a value another writer has changed meanwhile is
// refused by the bus: said, and the change composes the key's node again
// when it arrives), and taken into the mesh at once; its deletes are made
// at once. Nothing is written unless [Seat.Fence] passes before each write.
// Keys whose state or why changed have their dependents marked for
// re-judging (a dependent quotes the why of a key it waits for). then is
// called on the loop once every put has landed (see land), after the
// flights launched before; nil means nothing to do.
//
// A key both put and deleted by w (a retiring key whose warrant is written
// and which is retired at once) is deleted once its put has landed, with
// the put's revision; the flight then lands at once.
func (s *Seat) write(ctx context.Context, w writes, d *dirty, then func(n int, wrote map[string]bool)) {
	f := &flight{}
	s.flights = append(s.flights, f)
	if !w.empty() && s.Fence() == nil {
		f.puts = make([]pending, 0, len(w.plans)+len(w.refusals)+len(w.provs))
		s.publishAll(ctx, w, f, d)
		for _, k := range w.plansGone {
			f.deleted += s.del(ctx, mesh.PlansBucket, k, d)
		}
		for _, k := range w.refusalsGone {
			f.deleted += s.del(ctx, mesh.RefusedBucket, k, d)
		}
		f.deleted += s.retireAll(ctx, w.retired, w.retiredWhy, d)
	}
	if f.landed {
		if then != nil {
			then(f.n+f.deleted, f.wrote)
		}
		return
	}
	f.then = then
}

func (s *Seat) publishAll(ctx context.Context, w writes, f *flight, d *dirty) {
	for _, k := range sortedKeys(w.plans) {
		if !s.publish(ctx, f, d, mesh.PlansBucket, k, w.plans[k], nil) {
			return
		}
	}
	for _, k := range sortedKeys(w.refusals) {
		r := w.refusals[k]
		b, _ := encodeRefusal(&r)
		if !s.publish(ctx, f, d, mesh.RefusedBucket, k, b, r) {
			return
		}
	}
	for _, k := range sortedKeys(w.provs) {
		p := w.provs[k]
		old, had := s.mesh.Provision(k)
		if !had || old.State != p.State || old.Why != p.Why {
			for _, dep := range s.mesh.DependentsOf(k) {
				d.keys[dep] = true
			}
		}
		for _, dep := range s.mesh.Left(k, p) {
			d.keys[dep] = true
			if n, _, _ := strings.Cut(dep, "."); !strings.HasPrefix(k, n+".") {
				d.nodes[n] = true
			}
		}
		b, _ := encodeProvision(&p)
		if !s.publish(ctx, f, d, mesh.ProvisionsBucket, k, b, p) {
			return
		}
	}
}

// publish puts value at key of bucket into flight f once the key's write
// in flight (if any) has landed and [Seat.Fence] passes, and takes it into
// the mesh (see put). It reports false when the fence failed: nothing more
// is written.
func (s *Seat) publish(ctx context.Context, f *flight, d *dirty, bucket, key string, value []byte, v any) bool {
	fk := flyKey{bucket, key}
	if g := s.flying[fk]; g != nil {
		s.waitKey(ctx, g, d, bucket, key)
	}
	s.makeRoom(ctx, f, d)
	if s.Fence() != nil {
		return false
	}
	prev := s.mesh.Revision(bucket, key)
	if prev == 0 {
		// A key the mesh never held may still have a delete on the bus
		// (a plan removed before this seat started): expect it.
		if c := s.copies[bucket]; c != nil {
			if rev, ok := c.DeletedAt(key); ok {
				prev = rev
			}
		}
	}
	p := pending{bucket: bucket, key: key, value: value, prev: prev, id: s.writeID()}
	if err := s.send(&p); err != nil {
		s.writeFailed(bucket, key, err)
		return true
	}
	p.old = s.held(bucket, key)
	f.puts = append(f.puts, p)
	s.flying[fk] = f
	s.inFlight++
	s.put(bucket, key, value, v, prev)
	return true
}

// put takes a put of value at key of bucket (plans, provisions or refused)
// that expects revision rev into the mesh, without decoding it: v is what
// value encodes (a mesh.Provision or a mesh.Refusal), or nil for a plan,
// which names its key's node and module (a composition writes the plan of
// each of its node's modules at that module's key).
func (s *Seat) put(bucket, key string, value []byte, v any, rev uint64) {
	switch v := v.(type) {
	case mesh.Provision:
		s.mesh.PutProvision(key, v, rev)
	case mesh.Refusal:
		s.mesh.PutRefusal(key, v, rev)
	default:
		k, _ := mesh.ParseNodeModule(key) // a key out of shape is odd in PutPlan
		s.mesh.PutPlan(key, value, k, rev)
	}
}

// waitKey lands flights up to g, which holds a write of key of bucket that
// the loop must see acknowledged before it writes the key again.
func (s *Seat) waitKey(ctx context.Context, g *flight, d *dirty, bucket, key string) {
	s.waitsFor.Store(bucket + " " + key)
	defer s.waitsFor.Store("")
	s.landThrough(ctx, g, d)
}

// makeRoom waits while the window's puts (maxFlying) are not
// acknowledged: it lands the oldest flights, and when only f (which write
// is filling, the newest) is left, waits for its oldest acks. It first
// waits for the ack of the put a quarter of the window deep (acks come in
// about the order of their puts), then takes every ack that is in, so that
// the loop publishes about a quarter of the window before it waits again:
// a full window no longer wakes the loop at each ack to publish one put.
func (s *Seat) makeRoom(ctx context.Context, f *flight, d *dirty) {
	if s.inFlight < s.window {
		return
	}
	s.roomWaits.Add(1)
	began := time.Now()
	defer func() { s.roomWait += time.Since(began) }()
	if p := s.pendingAt(max(s.window/4, 1)); p != nil {
		s.await(ctx, p, block)
	}
	for s.inFlight >= s.window && ctx.Err() == nil {
		if len(s.flights) > 1 {
			s.landHead(ctx, d, block)
			continue
		}
		if f.acked < len(f.puts) && s.await(ctx, &f.puts[f.acked], block) {
			f.acked++
		}
	}
	// Every older flight whose acks are in lands, and f's acks that are in
	// are taken; f itself lands only once write has filled it.
	for len(s.flights) > 1 && s.landHead(ctx, d, poll) {
	}
	if len(s.flights) == 1 {
		for f.acked < len(f.puts) && s.await(ctx, &f.puts[f.acked], poll) {
			f.acked++
		}
	}
}

// pendingAt returns the n-th put (from 1) whose ack is not taken, oldest
// first, or nil when fewer are.
func (s *Seat) pendingAt(n int) *pending {
	for _, g := range s.flights {
		for i := g.acked; i < len(g.puts); i++ {
			if p := &g.puts[i]; !p.done {
				if n--; n == 0 {
					return p
				}
			}
		}
	}
	return nil
}

// How land and await wait for an ack.
type waitMode int

const (
	poll        waitMode = iota // not at all
	block                       // until it is in, or ctx is done
	blockOrWake                 // until it is in, a change arrives, or ctx is done
)

// send sends a try of p: its value at its key, expecting its revision,
// with its id.
func (s *Seat) send(p *pending) error {
	ack, err := s.js.PublishMsgAsync(bus.PutAtMsgID(p.bucket, p.key, p.value, p.prev, p.id))
	if err != nil {
		return err
	}
	p.tries[p.sent] = ack
	p.sent++
	p.at = time.Now()
	return nil
}

// await takes p's ack (or its error) when it is in, waiting as mode says,
// and reports whether it is in.
//
// A put is sent again, with the same id and the same expected revision,
// when none of its tries has been answered ackTimeout after the last was
// sent, or when every try was answered that the connection was lost
// (nats.ErrDisconnected: the bus may or may not have written it), up to
// maxTries tries; the tries sent before stay open. The first ack of any
// try is the put's: a try whose earlier copy the bus wrote is answered by
// a replicated bucket as a duplicate with that copy's revision (within
// the bucket's duplicate window), so the put is one write. A standalone
// server checks the revision first and refuses such a try as a conflict:
// the earlier try's own ack, sent before, is taken first on the same
// connection, unless the connection lost it. So a conflict of a put sent
// more than once is settled once no other try may answer (see settle);
// the conflict of a put sent once is the bus's word at once. A put none
// of whose tries is answered ackTimeout after the last is taken as the
// error noAck.
func (s *Seat) await(ctx context.Context, p *pending, mode waitMode) bool {
	if p.done {
		return true
	}
	var wake <-chan struct{}
	if mode == blockOrWake {
		wake = s.wake
	}
	if held := s.paused.acksHeld(); held != nil {
		// A test holds the acks back: they are not in yet.
		if mode == poll {
			return false
		}
		select {
		case <-held:
			p.at = time.Now() // the wait for the ack starts now
		case <-wake:
			return false // the caller drains what arrived
		case <-ctx.Done():
			return false
		}
	}
	for !s.answered(ctx, p) {
		late := time.Until(p.at.Add(s.ackWait))
		if late <= 0 {
			s.overdue(ctx, p)
			continue
		}
		if mode == poll {
			return false
		}
		if s.lostAcks && !s.sweeping {
			s.resendLost(ctx)
			if p.done {
				return true // taken by the sweep, which awaited p too
			}
			continue
		}
		// Each try's answer, or nil for a try not sent or taken.
		var oks [maxTries]<-chan *jetstream.PubAck
		var errs [maxTries]<-chan error
		for i, t := range p.tries {
			if t != nil {
				oks[i], errs[i] = t.Ok(), t.Err()
			}
		}
		timer := time.NewTimer(late)
		select {
		case a := <-oks[0]:
			p.seq, p.done = a.Sequence, true
		case a := <-oks[1]:
			p.seq, p.done = a.Sequence, true
		case a := <-oks[2]:
			p.seq, p.done = a.Sequence, true
		case err := <-errs[0]:
			s.refused(p, 0, err)
		case err := <-errs[1]:
			s.refused(p, 1, err)
		case err := <-errs[2]:
			s.refused(p, 2, err)
		case <-timer.C:
		case <-wake: // the caller drains what arrived
			timer.Stop()
			return false
		case <-ctx.Done():
			timer.Stop()
			return false
		}
		timer.Stop()
	}
	s.inFlight--
	// What the put no longer needs: its futures (which hold its
	// messages; a try still open is answered to no one), and, once it is
	// written, the value to take back.
	p.tries = [maxTries]jetstream.PubAckFuture{}
	p.conflict, p.failed = nil, nil
	if p.err == nil {
		p.old = nil
	}
	return true
}

// resendLost takes, without waiting, the answers that are in of every
// put in flight, once a put's acks were found lost with the connection:
// the others' were lost too (nats.ErrDisconnected), and each is sent
// again now, in one go, rather than one round trip after the other as the
// loop comes to wait for each.
func (s *Seat) resendLost(ctx context.Context) {
	s.lostAcks, s.sweeping = false, true
	defer func() { s.sweeping = false }()
	for _, f := range s.flights {
		for i := range f.puts {
			s.await(ctx, &f.puts[i], poll)
		}
	}
}

// answered takes the answers of p's tries that are in, without waiting,
// and reports whether p is decided (done): a try acknowledged, or every try
// sent refused (see decide).
func (s *Seat) answered(ctx context.Context, p *pending) bool {
	for i, t := range p.tries {
		if p.done {
			break
		}
		if t == nil {
			continue
		}
		select {
		case a := <-t.Ok():
			p.seq, p.done = a.Sequence, true
		case err := <-t.Err():
			s.refused(p, i, err)
		default:
		}
	}
	if !p.done {
		s.decide(ctx, p)
	}
	return p.done
}

// refused takes the error of p's try i.
func (s *Seat) refused(p *pending, i int, err error) {
	p.tries[i] = nil
	if bus.IsConflict(err) {
		p.conflict = err
	} else {
		p.failed = err
	}
}

// open reports whether a try of p is not answered yet.
func (p *pending) open() bool {
	for _, t := range p.tries {
		if t != nil {
			return true
		}
	}
	return false
}

// decide decides p, not acknowledged, once every try sent was refused: a
// conflict is the put's (settled when it was sent more than once); a
// connection lost with the tries in flight has p sent again (while tries
// are left and the fence passes); else the last error is the put's.
func (s *Seat) decide(ctx context.Context, p *pending) {
	if p.open() {
		return
	}
	switch {
	case p.conflict != nil:
		s.settle(ctx, p)
	case errors.Is(p.failed, nats.ErrDisconnected) && p.sent < maxTries && s.Fence() == nil:
		if err := s.send(p); err != nil {
			p.err, p.done = err, true
			return
		}
		s.resent.Add(1)
		s.lostAcks = true
		s.log.Debug("seat: a put's ack was lost with the connection; sent again", "bucket", p.bucket, "key", p.key, "try", p.sent)
	default:
		p.err, p.done = p.failed, true
	}
}

// overdue acts on p, none of whose open tries was answered ackTimeout
// after the last was sent: a try refused as a conflict is settled (a try
// sent again would be refused too); else p is sent again while tries are
// left and the fence passes, or decided as noAck.
func (s *Seat) overdue(ctx context.Context, p *pending) {
	switch {
	case p.conflict != nil:
		s.settle(ctx, p)
	case p.sent < maxTries && s.Fence() == nil:
		if err := s.send(p); err != nil {
			p.err, p.done = fmt.Errorf("%w; sending it again: %w", noAck(s.ackWait), err), true
			return
		}
		s.resent.Add(1)
		s.log.Debug("seat: a put's ack is late; sent again", "bucket", p.bucket, "key", p.key, "try", p.sent, "wait", s.ackWait)
	default:
		p.err, p.done = noAck(s.ackWait), true
	}
}

// settle decides p, a try of which was refused as a conflict. Sent once,
// the conflict is the put's: the key changed since the seat read it. Sent
// more than once, the conflict may refuse a try whose earlier copy the bus
// wrote, whose ack was lost with the connection or is still on its way (a
// standalone server checks the revision before the id): the key is read
// from its stream's leader, and when its last message carries p's id, p
// was written there. Anything else (another value, no answer) leaves the
// conflict p's: the seat's watch brings the key's change, whichever it is.
func (s *Seat) settle(ctx context.Context, p *pending) {
	if p.sent > 1 {
		rctx, cancel := context.WithTimeout(ctx, s.ackWait)
		e, err := bus.LeaderGet(rctx, s.js, p.bucket, p.key)
		cancel()
		if err == nil && !e.Deleted && e.Header.Get(jetstream.MsgIDHeader) == p.id {
			s.recognised.Add(1)
			p.seq, p.done = e.Revision, true
			return
		}
	}
	p.err, p.done = p.conflict, true
}

// landHead lands the oldest flight once every ack of it is in, waiting as
// mode says; it reports whether it landed.
func (s *Seat) landHead(ctx context.Context, d *dirty, mode waitMode) bool {
	f := s.flights[0]
	for i := range f.puts {
		if !s.await(ctx, &f.puts[i], mode) {
			return false
		}
	}
	s.flights[0] = nil // the array keeps no landed flight
	s.flights = s.flights[1:]
	s.land(f, d)
	return true
}

// landReady lands the oldest flights whose acks are all in, without
// waiting, all but the newest (which a composition may still be filling:
// it lands at the next write's makeRoom or when the loop is idle).
func (s *Seat) landReady(ctx context.Context, d *dirty) {
	for len(s.flights) > 1 && s.landHead(ctx, d, poll) {
	}
}

// landThrough lands every flight up to and including f, waiting for their
// acks (or until ctx is done).
func (s *Seat) landThrough(ctx context.Context, f *flight, d *dirty) {
	for len(s.flights) > 0 && ctx.Err() == nil {
		h := s.flights[0]
		if !s.landHead(ctx, d, block) {
			continue
		}
		if h == f {
			return
		}
	}
}

// land takes a flight whose acks are all in: each acknowledged put into
// the seat's copy (the mesh took it when it was published) with its
// revision; each refused put is said and taken back out of the mesh. Then
// the flight's then is called.
func (s *Seat) land(f *flight, d *dirty) {
	n := 0
	wrote := map[string]bool{}
	lost := foundGone(f.later)
	for i := range f.puts {
		p := &f.puts[i]
		fk := flyKey{p.bucket, p.key}
		if s.flying[fk] == f {
			delete(s.flying, fk)
		}
		if p.err != nil {
			s.writeFailed(p.bucket, p.key, p.err)
			s.takeBack(p, d)
			continue
		}
		if lost[fk] {
			// The key was found gone while the put was in flight: its
			// bucket was deleted (or made anew), and the ack may be the
			// lost stream's. Neither the copy nor the mesh takes the
			// put's revision: takeBack drops the put's value from the
			// mesh (the value before it was let go at the ack, so the
			// key is taken as deleted, which is what the loss says too);
			// the loss, taken below, has the node composed and the key
			// written again, expecting no message (and if the put did
			// reach the new stream, the watch brings it).
			s.takeBack(p, d)
			continue
		}
		if s.copies[p.bucket].Took(p.key, p.value, p.seq) {
			// The watch took the write first and handed it to the queue:
			// that change is the seat's own, not another writer's.
			s.echoes[fk] = p.seq
		}
		s.mesh.Wrote(p.bucket, p.key, p.seq)
		s.retry.landed(p.key)
		s.wrote.Add(1)
		if p.bucket == mesh.ProvisionsBucket {
			wrote[p.key] = true
		}
		n++
	}
	f.landed, f.n, f.wrote = true, n, wrote
	later := f.later
	f.later = nil
	for _, ch := range later {
		s.take(ch, d)
	}
	if f.then != nil {
		f.then(n+f.deleted, wrote)
	}
}

// foundGone returns the keys that later, the changes a flight kept back,
// has found gone (a delete with no revision: see [bus.Change]); nil when
// none (the common case: no allocation).
func foundGone(later []bus.Change) map[flyKey]bool {
	var lost map[flyKey]bool
	for _, ch := range later {
		if ch.Deleted && ch.Revision == 0 {
			if lost == nil {
				lost = map[flyKey]bool{}
			}
			lost[flyKey{ch.Bucket, ch.Key}] = true
		}
	}
	return lost
}

// held returns what the mesh holds at key of bucket (plans, provisions or
// refused), or nil.
func (s *Seat) held(bucket, key string) any {
	switch bucket {
	case mesh.PlansBucket:
		if v, ok := s.mesh.Plan(key); ok {
			return v
		}
	case mesh.ProvisionsBucket:
		if p, ok := s.mesh.Provision(key); ok {
			return p
		}
	case mesh.RefusedBucket:
		if r, ok := s.mesh.Refusal(key); ok {
			return r
		}
	}
	return nil
}

// takeBack takes a put the bus refused back out of the mesh: the key gets
// the value the mesh held before (or none) with the revision it held, and
// the keys that depend on it are judged again. Its node is composed again
// when the change that made the bus refuse it arrives, or after a backoff
// (writeFailed).
func (s *Seat) takeBack(p *pending, d *dirty) {
	switch old := p.old.(type) {
	case []byte:
		s.put(p.bucket, p.key, old, nil, p.prev)
	case mesh.Provision, mesh.Refusal:
		s.put(p.bucket, p.key, nil, old, p.prev)
	default:
		s.mesh.Take(bus.Change{Bucket: p.bucket, Key: p.key, Revision: p.prev, Deleted: true})
	}
	if p.bucket == mesh.ProvisionsBucket {
		for _, dep := range s.mesh.DependentsOf(p.key) {
			d.keys[dep] = true
		}
	}
}

// writeFailed says a write the bus refused or did not take. A write the
// bus did not take for another reason than a conflict has its node
// composed again after a backoff (see retry).
func (s *Seat) writeFailed(bucket, key string, err error) {
	if bus.IsConflict(err) {
		s.log.Warn("seat: the key changed since the seat read it; not written, its node is composed again when that change arrives",
			"bucket", bucket, "key", key, "err", err)
	} else {
		s.log.Error("seat: write failed", "bucket", bucket, "key", key, "err", err)
		s.retry.fail(key, s.poke, s.log)
		if errors.Is(err, errNoAck) {
			s.mend(bucket)
		}
	}
	if s.cfg.OnWriteError != nil {
		s.cfg.OnWriteError(bucket, key, err)
	}
}

// del deletes key once its write in flight (if any) has landed and
// [Seat.Fence] passes, conditional on the revision of the key the seat's
// mesh holds, and waits for the bus's answer. It returns 1 when deleted.
func (s *Seat) del(ctx context.Context, bucket, key string, d *dirty, headers ...bus.Header) int {
	fk := flyKey{bucket, key}
	if g := s.flying[fk]; g != nil {
		s.waitKey(ctx, g, d, bucket, key)
	}
	if s.Fence() != nil {
		return 0
	}
	rev, err := bus.DeleteAt(ctx, s.js, bucket, key, s.mesh.Revision(bucket, key), headers...)
	if err != nil {
		s.writeFailed(bucket, key, err)
		return 0
	}
	if s.copies[bucket].Took(key, nil, rev) {
		s.echoes[fk] = rev
	}
	s.mesh.Take(bus.Change{Bucket: bucket, Key: key, Deleted: true, Revision: rev})
	s.wrote.Add(1)
	return 1
}

// ownEcho reports whether ch, a change taken by the seat's watches, is
// to be left out for now: a change of a key whose write is in flight waits
// in that flight until it has landed (only then is it known whether it is
// the seat's own write); the echo of the seat's own write (or a change
// older than it), which the mesh holds already, is left out.
//
// A key found gone (Revision 0: its bucket was deleted, or made anew
// without it) waits too: taken before its write has landed, it would be
// undone by the landing (the write's revision, from the stream that is
// gone, or the value taken back), and the key's next write would expect a
// revision the bus does not have ("wrong last sequence: 0"), a conflict no
// change ever follows.
func (s *Seat) ownEcho(ch bus.Change) bool {
	if !owned(ch.Bucket) {
		return false
	}
	fk := flyKey{ch.Bucket, ch.Key}
	if f := s.flying[fk]; f != nil {
		f.later = append(f.later, ch)
		return true
	}
	if ch.Revision == 0 {
		// A key found gone has no revision: always taken. An echo the
		// seat still waited for is of the stream lost (or of a message
		// gone): the key's revisions start again, and a change of a new
		// stream must not be taken for it.
		delete(s.echoes, fk)
		return false
	}
	rev, ok := s.echoes[fk]
	if !ok || ch.Revision > rev {
		return false
	}
	if ch.Revision == rev {
		delete(s.echoes, fk)
	}
	return true
}

// retireAll deletes keys approved with yes whose provider's entry is gone,
// and returns how many it deleted. The nodes of the keys they depended on
// are composed again: a shared credential may now be unneeded.
func (s *Seat) retireAll(ctx context.Context, keys []string, whys map[string]string, d *dirty) int {
	n := 0
	for _, k := range keys {
		p, _ := s.mesh.Provision(k)
		for _, dep := range p.DependsOn {
			if dk, err := mesh.ParseProvisionKey(dep); err == nil {
				d.nodes[dk.Node] = true
			}
		}
		// The marker names the ask whose yes retired the key: a reader of
		// this key alone finds why it is gone (mesh.AskHeader).
		var named []bus.Header
		if p.Warrant != nil && p.Warrant.Ask != "" {
			named = append(named, bus.Header{Name: mesh.AskHeader, Value: p.Warrant.Ask})
		}
		if s.del(ctx, mesh.ProvisionsBucket, k, d, named...) == 1 {
			s.log.Info("seat: retired", "key", k, "why", whys[k])
			n++
		}
	}
	return n
}

// dropJunk deletes the values of the seat's own buckets that are not of
// their kind (forged, or written by an older or foreign writer) and that no
// composition wrote anew: the seat alone writes those buckets.
func (s *Seat) dropJunk(ctx context.Context, junk map[string]map[string]bool, d *dirty) {
	for _, bucket := range sortedKeys(junk) {
		for _, key := range sortedKeys(junk[bucket]) {
			if _, ok := s.mesh.Junk(bucket, key); !ok {
				continue // written anew or deleted meanwhile
			}
			if s.del(ctx, bucket, key, d) == 1 {
				s.log.Warn("seat: deleted a value that is not of its kind from a bucket the seat alone writes",
					"bucket", bucket, "key", key)
			}
		}
	}
}

// mend has the bus check the store of bucket, whose put was not
// acknowledged, and make the bucket again when the server lost it
// ([bus.Mend]: a bucket made while the server still removed the stream
// deleted under its name answers no put until it is made again). It runs
// off the loop, one check of a bucket at a time, while the seat holds its
// lease; the seat's copy then finds the bucket made anew and the seat
// writes its keys again. A put not acknowledged for another reason (a
// connection lost with it in flight) finds the store kept: nothing is
// made again.
func (s *Seat) mend(bucket string) {
	s.mu.Lock()
	ctx := s.running
	s.mu.Unlock()
	if ctx == nil || ctx.Err() != nil || s.Fence() != nil {
		return
	}
	if _, busy := s.mending.LoadOrStore(bucket, true); busy {
		return
	}
	go func() {
		defer s.mending.Delete(bucket)
		again, err := bus.Mend(ctx, s.js, bucket)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Error("seat: a put was not acknowledged; the bucket's store could not be checked or made again", "bucket", bucket, "err", err)
		case again:
			s.log.Warn("seat: a put was not acknowledged: the server had lost the bucket's store; the bucket was made again, its keys are written again", "bucket", bucket)
		}
	}()
}
