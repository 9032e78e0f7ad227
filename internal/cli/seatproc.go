package cli

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/internal/registry"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

// seatProcess is what "serve" and "up" run on the seat's connection: the
// provisioning verb (every instance answers it), and the seat itself, which
// once it holds the lease also keeps the registry and deletes the retired
// needs state's leftovers. A lost lease is waited for again.
type seatProcess struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	id       string
	ttl      time.Duration
	log      *slog.Logger
	onResult func(*compose.Result)
	// seat is the running seat, set before run starts it.
	seat *seat.Seat
}

func (p *seatProcess) newSeat() *seat.Seat {
	return seat.New(p.js, seat.Config{ID: p.id, LeaseTTL: p.ttl, Log: p.log, OnResult: p.onResult, OnLease: p.onLease})
}

func (p *seatProcess) onLease(ctx context.Context) {
	n, err := provisioning.DropNeeds(ctx, p.js)
	if err != nil {
		p.log.Error("seat: deleting the leftovers of the retired needs state", "err", err)
	} else {
		p.log.Info("seat: deleted the leftover keys of the retired needs state", "keys", n)
	}
	if err := registry.Keep(ctx, p.js, registry.KeepOptions{Log: p.log}); err != nil && ctx.Err() == nil {
		p.log.Error("seat: keeping the registry", "err", err)
	}
}

// run starts the verb, then runs the seat until ctx is done.
func (p *seatProcess) run(ctx context.Context) error {
	if err := provisioning.Start(ctx, p.nc, p.js, provisioning.Options{Log: p.log}); err != nil {
		return err
	}
	if p.seat == nil {
		p.seat = p.newSeat()
	}
	for {
		err := p.seat.Run(ctx)
		if !errors.Is(err, seat.ErrLeaseLost) {
			return err
		}
		p.log.Warn("seat: the lease was lost; waiting to take it again", "err", err)
		p.seat = p.newSeat()
	}
}
