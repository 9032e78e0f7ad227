package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/metrics"
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
	// metrics, if set, counts the seat's results and failed writes.
	metrics *metrics.Metrics

	mu sync.Mutex
	// seat is the running seat, set before run starts it (held by mu:
	// health checks read it while run replaces a seat that lost the
	// lease).
	seat *seat.Seat
}

func (p *seatProcess) newSeat() *seat.Seat {
	cfg := seat.Config{ID: p.id, LeaseTTL: p.ttl, Log: p.log, OnResult: p.onResult, OnLease: p.onLease}
	if m := p.metrics; m != nil {
		cfg.OnResult = func(r *compose.Result) {
			m.Result(r)
			if p.onResult != nil {
				p.onResult(r)
			}
		}
		cfg.OnWriteError = m.WriteError
	}
	s := seat.New(p.js, cfg)
	p.mu.Lock()
	p.seat = s
	p.mu.Unlock()
	return s
}

// current returns the seat run runs now.
func (p *seatProcess) current() *seat.Seat {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seat
}

// health reports the process healthy while its connection is up and its
// seat holds the lease or waits for it.
func (p *seatProcess) health() (bool, string) {
	if !p.nc.IsConnected() {
		return false, "not connected to the bus (" + p.nc.Status().String() + ")"
	}
	s := p.current()
	if s == nil {
		return false, "the seat has not started"
	}
	st, why := s.Lease()
	return st == seat.LeaseHeld || st == seat.LeaseWaiting, "seat lease " + string(st) + ": " + why
}

// serveMetrics serves p's metrics and health on addr until ctx is done;
// the gauges follow through p's connection. Call it before newSeat.
func (p *seatProcess) serveMetrics(ctx context.Context, addr string, out io.Writer) error {
	p.metrics = metrics.New()
	p.metrics.Follow(ctx, p.js)
	at, err := metrics.Serve(ctx, addr, p.metrics.Handler(p.health), p.log)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "metrics on http://%s/metrics, health on http://%s/healthz\n", at, at)
	return nil
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
	s := p.current()
	if s == nil {
		s = p.newSeat()
	}
	for {
		err := s.Run(ctx)
		if !errors.Is(err, seat.ErrLeaseLost) {
			return err
		}
		p.log.Warn("seat: the lease was lost; waiting to take it again", "err", err)
		s = p.newSeat()
	}
}
