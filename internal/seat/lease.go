package seat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// ErrLeaseLost is returned by [Seat.Run] when another instance took the
// seat's lease (or the bus refused its renewal) while this one held it, or
// when the bus took no renewal for a whole TTL; and by [Seat.Fence] then.
var ErrLeaseLost = errors.New("seat: lease lost")

// LeaseState is where a [Seat] stands with its lease, for a health check:
// see [Seat.Lease].
type LeaseState string

// The states of a seat's lease.
const (
	// LeaseWaiting: the seat has not taken the lease yet, or waits for
	// another instance's lease to lapse (a healthy standby).
	LeaseWaiting LeaseState = "waiting"
	// LeaseHeld: the seat holds the lease and composes.
	LeaseHeld LeaseState = "held"
	// LeaseFailing: the bus refused or did not answer the last try to take
	// the lease, or does not take the renewals of the lease the seat holds
	// (see [Seat.Lease]); the seat tries again with backoff.
	LeaseFailing LeaseState = "failing"
	// LeaseStopped: [Seat.Run] has returned (ctx done, the lease lost, or
	// the seat's buckets could not be made).
	LeaseStopped LeaseState = "stopped"
)

// ErrBadLease is returned by [Seat.Run] and [CheckLease] for a lease time to
// live under [MinLease].
var ErrBadLease = errors.New("seat: lease too short")

// MinLease is the shortest lease a seat takes: NATS refuses a key-value
// bucket whose keys live less than 100 ms.
const MinLease = 100 * time.Millisecond

// CheckLease returns an error wrapping [ErrBadLease] when ttl, the time the
// seat's lease outlives a holder that stopped, is under [MinLease]
// (negative and zero included).
func CheckLease(ttl time.Duration) error {
	if ttl < MinLease {
		return fmt.Errorf("%w: %v is under %v, the shortest time to live NATS gives a key", ErrBadLease, ttl, MinLease)
	}
	return nil
}

// lease is the seat's hold on mesh-provisioner_seat "holder": a key that
// lapses TTL after its last write, renewed every TTL/6 ([renewal]).
type lease struct {
	kv  jetstream.KeyValue
	js  jetstream.JetStream // for reads from the lease's stream's leader
	id  string
	ttl time.Duration
	rev uint64
	// wait, if set (by tests), is called before each renewal and may block:
	// it holds the renewal still as a stopped process is held.
	wait func()

	mu sync.Mutex
	// renewed is when the request of the last successful take or renewal
	// was sent (the key lapses TTL after the bus wrote it, which is later),
	// read on the monotonic clock, which runs on while the process is
	// stopped. Zero once a renewal failed.
	renewed time.Time
	// failing says the last try to renew was not answered (or refused):
	// the seat may still hold the lease, but cannot reach the bus.
	failing bool
	// changed is closed (and made anew) each time renewed changes: a
	// renewal taken, or the lease lost.
	changed chan struct{}
}

// setRenewed sets renewed (zero: the lease is lost), with the revision
// of the renewal taken, and wakes whoever waits for it ([Seat.Fence]).
func (l *lease) setRenewed(at time.Time, rev uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewed = at
	if !at.IsZero() {
		l.rev, l.failing = rev, false
	}
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// state returns how long ago the request of the last successful renewal
// was sent (false when the lease is lost) and a channel closed when that
// changes.
func (l *lease) state() (time.Duration, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	if l.renewed.IsZero() {
		return 0, false, l.changed
	}
	return time.Since(l.renewed), true, l.changed
}

// unrenewed says why a held lease is not renewed as it should be (its
// last try failed, or no renewal was written for half a renewal period
// more than the period), or "" while it is renewed on time.
func (l *lease) unrenewed() string {
	l.mu.Lock()
	renewed, failing := l.renewed, l.failing
	l.mu.Unlock()
	if renewed.IsZero() {
		return "its last renewal failed"
	}
	age := time.Since(renewed)
	if period := renewal(l.ttl); failing || age > period+period/2 {
		return fmt.Sprintf("the bus has not taken a renewal for %v (renewed every %v; the seat stops writing %v after the last one)",
			age.Round(100*time.Millisecond), renewal(l.ttl), l.fence())
	}
	return ""
}

// renewal is how often a holder renews its lease of TTL ttl: a sixth of
// it, so that five renewals in a row may fail (a bucket electing a
// leader) before the fence.
func renewal(ttl time.Duration) time.Duration { return ttl / 6 }

// standby is how often an instance waiting for a lease of TTL ttl tries
// to take it: every second (a third of the TTL when that is shorter), so
// that it takes over within about a second of the lease's lapse.
func standby(ttl time.Duration) time.Duration { return min(ttl/3, time.Second) }

// fence is how long after its last renewal's request a seat still writes:
// three quarters of the TTL, so that one renewal may be late.
func (l *lease) fence() time.Duration { return l.ttl - l.ttl/4 }

// age returns how long ago the request of the last successful renewal was
// sent, and false when a renewal failed.
func (l *lease) age() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewed.IsZero() {
		return 0, false
	}
	return time.Since(l.renewed), true
}

// acquire waits until it holds the lease, trying again every [standby] while
// another instance holds it, and with backoff while the bus does not answer
// (each failure said): a waiting instance outlives a restart of the bus.
// Each try's outcome is handed to note (waiting or failing, with why).
func acquire(ctx context.Context, js jetstream.JetStream, id string, ttl time.Duration, log *slog.Logger, note func(LeaseState, string)) (*lease, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	// At most a few standby periods: a bus that answers again (a bucket
	// that elected its leader) is found soon after, and a lapsed lease
	// taken within about 2 s.
	bo.MaxInterval = min(ttl, 2*time.Second)
	said := false
	for {
		wait := standby(ttl)
		l, held, err := try(ctx, js, id, ttl)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			wait = bo.NextBackOff()
			note(LeaseFailing, "cannot take the lease: "+err.Error())
			log.Warn("seat: cannot take the lease; trying again", "err", err, "retry_in", wait)
		case held != "":
			bo.Reset()
			note(LeaseWaiting, "the lease is held by "+held)
			if !said {
				log.Info("seat: the lease is held; waiting for it to lapse", "holder", held, "ttl", ttl)
				said = true
			}
		default:
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// try takes the lease once. It returns the lease, or the holder's name
// when another instance holds it, or the bus's error.
func try(ctx context.Context, js jetstream.JetStream, id string, ttl time.Duration) (*lease, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := bus.LeaseBucket(ctx, js, mesh.SeatBucket, ttl)
	if err != nil {
		return nil, "", err
	}
	// A bucket made earlier with a shorter TTL lets the key lapse sooner:
	// renew and fence by the shorter one.
	if st, err := kv.Status(ctx); err == nil && st.TTL() > 0 && st.TTL() < ttl {
		ttl = st.TTL()
	}
	sent := time.Now()
	b, _ := json.Marshal(mesh.Lease{Holder: id, Since: sent.UTC()})
	rev, err := kv.Create(ctx, mesh.HolderKey, b)
	if err == nil {
		return &lease{kv: kv, js: js, id: id, ttl: ttl, rev: rev, renewed: sent}, "", nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, "", fmt.Errorf("seat: take lease: %w", err)
	}
	// Who holds it, from the stream's leader: a server cut off from the
	// others answers the create from what it last had (its own stale
	// copy), and has no leader to read from: the instance then says it
	// cannot take the lease, not that it waits as a healthy standby.
	holder := "another instance"
	e, err := bus.LeaderGet(ctx, js, mesh.SeatBucket, mesh.HolderKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || err == nil && e.Deleted:
		// It lapsed since: the next try takes it.
	case err != nil:
		return nil, "", fmt.Errorf("seat: read the lease's holder from its stream's leader: %w", err)
	default:
		var h mesh.Lease
		if json.Unmarshal(e.Value, &h) == nil && h.Holder != "" {
			holder = h.Holder
		}
	}
	return nil, holder, nil
}

// hold renews the lease every [renewal] until ctx is done. It returns
// ErrLeaseLost when the bus refuses a renewal (another instance holds the
// key, or it lapsed), or when no renewal was taken for a whole TTL. A
// renewal the bus does not answer (a lost connection, the seat's bucket
// electing a new leader on a cluster, a slow machine) is waited for and
// sent again meanwhile ([lease.renew]), then begun anew with backoff.
// Meanwhile the fence counts from the last renewal known written, so that
// the seat writes only while the key cannot have lapsed, and writes again
// once a renewal is taken ([Seat.Fence]).
func (l *lease) hold(ctx context.Context) error {
	b, _ := json.Marshal(mesh.Lease{Holder: l.id, Since: time.Now().UTC()})
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = min(100*time.Millisecond, l.ttl/10)
	bo.MaxInterval = max(l.ttl/10, bo.InitialInterval)
	wait := renewal(l.ttl)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if l.wait != nil {
			l.wait()
		}
		sent := time.Now()
		rev, err := l.renew(ctx, b)
		if err == nil {
			l.setRenewed(sent, rev)
			wait = renewal(l.ttl)
			bo.Reset()
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		age, _ := l.age()
		if bus.IsConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) || age >= l.ttl {
			l.setRenewed(time.Time{}, 0)
			return fmt.Errorf("%w: %v", ErrLeaseLost, err)
		}
		l.mu.Lock()
		l.failing = true
		l.mu.Unlock()
		wait = bo.NextBackOff()
	}
}

// renewAnswer is the bus's answer to one try of a renewal.
type renewAnswer struct {
	ack *jetstream.PubAck
	err error
}

// renew writes the lease's value b again, expecting its last revision,
// and returns the key's new revision. A try the bus has not answered
// within TTL/8 is sent again (then every TTL/8 to TTL/4, with backoff),
// and every try sent stays open for its answer: the first answer taken is
// the bus's word, so that a slow bus (a machine under load, a cluster
// busy electing leaders) whose answers take longer than a try's period
// renews the lease all the same, where a try given up for the next would
// never see its answer. Every try carries the same message ID (the
// holder's and the revision it expects): a replicated stream answers a
// try whose earlier copy it wrote as a duplicate, with that copy's
// revision. renew gives up, with the last error and the deadline, once
// the last renewal taken is a TTL old (at the fence at least): the lease
// is given up then ([lease.hold]).
//
// The fence counts from the time renew began, not from the try the bus
// answered: whichever try the bus wrote, it wrote it after that time.
//
// A conflict may be the answer to a try whose earlier copy the bus wrote
// (a standalone server checks the revision before the message ID): the
// key is read then from its stream's leader (a replica may answer a
// direct get with an older revision of the same bytes), and when it holds
// b itself it is taken at that revision, by a compare-and-set. A read the
// bus does not answer says nothing of the holder: its error is returned,
// not the conflict, so that [lease.hold] tries again.
func (l *lease) renew(ctx context.Context, b []byte) (uint64, error) {
	began := time.Now()
	age, _ := l.age()
	ctx, cancel := context.WithTimeout(ctx, max(l.fence(), l.ttl-age))
	defer cancel()
	rev := l.rev
	id := fmt.Sprintf("%s@%d", l.id, rev)
	answers := make(chan renewAnswer, 1)
	send := func() {
		m := bus.PutAtMsg(mesh.SeatBucket, mesh.HolderKey, b, rev)
		m.Header.Set(jetstream.MsgIDHeader, id)
		ack, err := l.js.PublishMsg(ctx, m)
		select {
		case answers <- renewAnswer{ack, err}:
		case <-ctx.Done():
		}
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = max(l.ttl/8, 100*time.Millisecond)
	bo.MaxInterval = max(l.ttl/4, bo.InitialInterval)
	next := time.NewTimer(bo.NextBackOff())
	defer next.Stop()
	go send()
	last := errors.New("no answer")
	for {
		select {
		case a := <-answers:
			switch {
			case a.err == nil:
				return a.ack.Sequence, nil
			case bus.IsConflict(a.err):
				return l.conflict(ctx, b, a.err)
			}
			last = a.err // the next try goes on time
		case <-next.C:
			go send()
			next.Reset(bo.NextBackOff())
		case <-ctx.Done():
			return 0, fmt.Errorf("seat: renew the lease: not taken within %v (%v): %w", time.Since(began).Round(time.Millisecond), last, ctx.Err())
		}
	}
}

// conflict decides a renewal the bus refused with err, a conflict: the
// lease is lost (err) unless the key, read from its stream's leader, holds
// b itself, written by a try whose answer was lost, in which case it is
// renewed at that revision.
func (l *lease) conflict(ctx context.Context, b []byte, err error) (uint64, error) {
	e, gerr := bus.LeaderGet(ctx, l.js, mesh.SeatBucket, mesh.HolderKey)
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound) || gerr == nil && (e.Deleted || !bytes.Equal(e.Value, b)):
		return 0, err // lapsed, released, or another instance's
	case gerr != nil:
		return 0, fmt.Errorf("seat: read the lease after a conflict: %w", gerr)
	}
	return l.kv.Update(ctx, mesh.HolderKey, b, e.Revision)
}

// release gives the lease up at once, so that a waiting instance need not
// wait for it to lapse.
func (l *lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.kv.Delete(ctx, mesh.HolderKey, jetstream.LastRevision(l.rev))
}
