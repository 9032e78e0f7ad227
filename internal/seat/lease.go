package seat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// ErrLeaseLost is returned by [Seat.Run] when another instance took the
// seat's lease (or the bus refused its renewal) while this one held it.
var ErrLeaseLost = errors.New("seat: lease lost")

// lease is the seat's hold on mesh-provisioner_seat "holder": a key that
// lapses TTL after its last write, renewed every TTL/3.
type lease struct {
	kv  jetstream.KeyValue
	id  string
	ttl time.Duration
	rev uint64
}

// acquire waits until it holds the lease, trying again every TTL/3 while
// another instance holds it.
func acquire(ctx context.Context, js jetstream.JetStream, id string, ttl time.Duration, log func(string, ...any)) (*lease, error) {
	kv, err := bus.LeaseBucket(ctx, js, mesh.SeatBucket, ttl)
	if err != nil {
		return nil, err
	}
	l := &lease{kv: kv, id: id, ttl: ttl}
	b, _ := json.Marshal(mesh.Lease{Holder: id, Since: time.Now().UTC()})
	said := false
	for {
		rev, err := kv.Create(ctx, mesh.HolderKey, b)
		if err == nil {
			l.rev = rev
			return l, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("seat: take lease: %w", err)
		}
		if !said {
			holder := "another instance"
			if e, err := kv.Get(ctx, mesh.HolderKey); err == nil {
				var h mesh.Lease
				if json.Unmarshal(e.Value(), &h) == nil {
					holder = h.Holder
				}
			}
			log("seat: the lease is held; waiting for it to lapse", "holder", holder, "ttl", ttl)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(ttl / 3):
		}
	}
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
