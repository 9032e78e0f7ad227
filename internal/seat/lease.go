package seat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// ErrLeaseLost is returned by [Seat.Run] when another instance took the
// seat's lease (or the bus refused its renewal) while this one held it.
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
	// the lease; the seat tries again with backoff.
	LeaseFailing LeaseState = "failing"
	// LeaseStopped: [Seat.Run] has returned (ctx done, the lease lost, or
	// the seat's buckets could not be made).
	LeaseStopped LeaseState = "stopped"
)

// lease is the seat's hold on mesh-provisioner_seat "holder": a key that
// lapses TTL after its last write, renewed every TTL/3.
type lease struct {
	kv  jetstream.KeyValue
	id  string
	ttl time.Duration
	rev uint64
}

// acquire waits until it holds the lease, trying again every TTL/3 while
// another instance holds it, and with backoff while the bus does not answer
// (each failure said): a waiting instance outlives a restart of the bus.
// Each try's outcome is handed to note (waiting or failing, with why).
func acquire(ctx context.Context, js jetstream.JetStream, id string, ttl time.Duration, log *slog.Logger, note func(LeaseState, string)) (*lease, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = ttl
	said := false
	for {
		wait := ttl / 3
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
	b, _ := json.Marshal(mesh.Lease{Holder: id, Since: time.Now().UTC()})
	rev, err := kv.Create(ctx, mesh.HolderKey, b)
	if err == nil {
		return &lease{kv: kv, id: id, ttl: ttl, rev: rev}, "", nil
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

// hold renews the lease every TTL/3 until ctx is done, and returns
// ErrLeaseLost when a renewal fails.
func (l *lease) hold(ctx context.Context) error {
	b, _ := json.Marshal(mesh.Lease{Holder: l.id, Since: time.Now().UTC()})
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(l.ttl / 3):
		}
		rev, err := l.kv.Update(ctx, mesh.HolderKey, b, l.rev)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%w: %v", ErrLeaseLost, err)
		}
		l.rev = rev
	}
}

// release gives the lease up at once, so that a waiting instance need not
// wait for it to lapse.
func (l *lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.kv.Delete(ctx, mesh.HolderKey, jetstream.LastRevision(l.rev))
}
