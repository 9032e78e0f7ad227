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
// when the seat found its lease may have lapsed before a write (its last
// renewal is older than the fence, see [Seat.Fence]).
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
	bo.MaxInterval = ttl
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
		return &lease{kv: kv, id: id, ttl: ttl, rev: rev, renewed: sent}, "", nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, "", fmt.Errorf("seat: take lease: %w", err)
	}
	holder := "another instance"
	if e, err := kv.Get(ctx, mesh.HolderKey); err == nil {
		var h mesh.Lease
		if json.Unmarshal(e.Value(), &h) == nil && h.Holder != "" {
			holder = h.Holder
		}
	}
	return nil, holder, nil
}

// hold renews the lease every [renewal] until ctx is done. It returns
// ErrLeaseLost when the bus refuses a renewal (another instance holds the
// key, or it lapsed), or when no renewal was written for a whole TTL. A
// renewal the bus did not answer (a lost connection, the seat's bucket
// electing a new leader on a cluster) is tried again soon, with backoff:
// meanwhile the fence counts from the last renewal known written, so that
// the seat writes on only while the key cannot have lapsed.
func (l *lease) hold(ctx context.Context) error {
	b, _ := json.Marshal(mesh.Lease{Holder: l.id, Since: time.Now().UTC()})
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = min(100*time.Millisecond, l.ttl/10)
	bo.MaxInterval = max(l.ttl/10, bo.InitialInterval)
	unsure := false // a renewal the bus did not answer may have been written
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
		rev, err := l.renew(ctx, b, unsure)
		if err == nil {
			l.mu.Lock()
			l.renewed, l.rev, l.failing = sent, rev, false
			l.mu.Unlock()
			unsure, wait = false, renewal(l.ttl)
			bo.Reset()
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		age, _ := l.age()
		if bus.IsConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) || age >= l.ttl {
			l.mu.Lock()
			l.renewed = time.Time{}
			l.mu.Unlock()
			return fmt.Errorf("%w: %v", ErrLeaseLost, err)
		}
		l.mu.Lock()
		l.failing = true
		l.mu.Unlock()
		unsure, wait = true, bo.NextBackOff()
	}
}

// renew writes the lease's value b again, expecting its last revision,
// and waits at most TTL/8 (100 ms at least) for the bus to answer, so that
// a request lost with a server has time to be tried again before the
// fence (three quarters of the TTL) stops the seat's writes.
// After a renewal the bus did not answer (unsure), that renewal may have
// been written: a conflict whose key holds b itself is taken at the key's
// revision, by a compare-and-set (a stale replica's answer to the read
// fails it).
func (l *lease) renew(ctx context.Context, b []byte, unsure bool) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, max(l.ttl/8, 100*time.Millisecond))
	defer cancel()
	rev, err := l.kv.Update(ctx, mesh.HolderKey, b, l.rev)
	if err == nil || !unsure || !bus.IsConflict(err) {
		return rev, err
	}
	e, gerr := l.kv.Get(ctx, mesh.HolderKey)
	if gerr != nil || !bytes.Equal(e.Value(), b) {
		return 0, err
	}
	return l.kv.Update(ctx, mesh.HolderKey, b, e.Revision())
}

// release gives the lease up at once, so that a waiting instance need not
// wait for it to lapse.
func (l *lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.kv.Delete(ctx, mesh.HolderKey, jetstream.LastRevision(l.rev))
}
