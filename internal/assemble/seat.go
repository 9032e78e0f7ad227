package assemble

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/metrics"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/internal/registry"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

// SeatConfig configures the seat [Assembly.StartSeat] runs.
type SeatConfig struct {
	// ID names this instance in the seat's lease. Empty means host name,
	// process id and start time.
	ID string
	// LeaseTTL is how long the lease outlives a holder that stopped. Zero
	// means the seat's default (10 s, or [seat.ReplicatedLease] on a
	// connection that makes replicated buckets).
	LeaseTTL time.Duration
	// OnResult, if set, is called after each node's result is written, on
	// the seat's loop: it must not block.
	OnResult func(*compose.Result)
	// Metrics, if set, is the address (host:port; port 0 picks a free one)
	// on which the seat process serves Prometheus metrics (/metrics) and
	// its health (/healthz: healthy while connected and holding the lease
	// or waiting for it). Empty means none.
	Metrics string
}

// SeatRunning is a started seat process: the verb
// mesh-provisioner.provisioning, which every instance answers, and the
// seat, which once it holds the lease also keeps the registry and deletes
// the leftovers of the retired needs state. A lost lease is waited for
// again with a new seat.
type SeatRunning struct {
	*Running
	// MetricsAt is the address metrics and health are served on, or nil
	// without [SeatConfig.Metrics].
	MetricsAt net.Addr

	mu   sync.Mutex
	seat *seat.Seat
}

// Seat returns the seat that runs now (a new one after a lost lease).
func (s *SeatRunning) Seat() *seat.Seat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seat
}

// StartSeat starts the seat process on the seat's own connection and
// returns once the verb answers (and metrics are served, with
// cfg.Metrics); the seat then waits for its lease while another instance
// holds it. It returns an error when the connection or the verb's
// subscription fails, or the metrics address cannot be listened on.
func (a *Assembly) StartSeat(ctx context.Context, cfg SeatConfig) (*SeatRunning, error) {
	s := &SeatRunning{}
	r, err := a.start(ctx, Component{Role: Seat}, func(ctx context.Context, cs conns) (func() error, error) {
		nc, js := cs.nc, cs.js
		// The seat alone makes buckets: every bucket of the mesh's
		// setup, before anything waits on one.
		if err := makeBuckets(ctx, js, a.log()); err != nil {
			return nil, err
		}
		p := &seatProcess{nc: nc, js: js, answer: cs.answer, ask: cs.ask, cfg: cfg, log: a.log(), holder: s}
		// The scoped parties' watches: every seat process makes their
		// consumers, the one waiting for the lease too.
		if err := bus.ServeWatches(ctx, cs.answer, js, p.log); err != nil {
			return nil, err
		}
		if err := provisioning.Start(ctx, cs.answer.Conn, js, provisioning.Options{Log: p.log}); err != nil {
			return nil, err
		}
		if cfg.Metrics != "" {
			p.metrics = metrics.New()
			p.metrics.Follow(ctx, js)
		}
		// The seat is made before health is served: /healthz reads it.
		s.seat = p.newSeat()
		if p.metrics != nil {
			at, err := metrics.Serve(ctx, cfg.Metrics, p.metrics.Handler(p.health), p.log)
			if err != nil {
				return nil, err
			}
			s.MetricsAt = at
		}
		return func() error { return p.run(ctx) }, nil
	})
	if err != nil {
		return nil, err
	}
	s.Running = r
	return s, nil
}

// seatProcess runs the seat on its connection, again after a lost lease.
type seatProcess struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	answer *bus.Answerer // the verbs it answers
	ask    *nats.Conn    // the verbs it asks (the ask router's)
	cfg    SeatConfig
	log    *slog.Logger
	holder *SeatRunning
	// metrics, if set, counts the seat's results and failed writes.
	metrics *metrics.Metrics
}

func (p *seatProcess) newSeat() *seat.Seat {
	var s *seat.Seat
	cfg := seat.Config{ID: p.cfg.ID, LeaseTTL: p.cfg.LeaseTTL, Log: p.log, OnResult: p.cfg.OnResult,
		Answer: p.answer, Ask: p.ask,
		OnLease: func(ctx context.Context) { p.onLease(ctx, s.Fence) }}
	if m := p.metrics; m != nil {
		cfg.OnResult = func(r *compose.Result) {
			m.Result(r)
			if p.cfg.OnResult != nil {
				p.cfg.OnResult(r)
			}
		}
		cfg.OnWriteError = m.WriteError
	}
	s = seat.New(p.js, cfg)
	return s
}

// health reports the process healthy while its connection is up and its
// seat holds the lease or waits for it.
func (p *seatProcess) health() (bool, string) {
	if !p.nc.IsConnected() {
		return false, "not connected to the bus (" + p.nc.Status().String() + ")"
	}
	st, why := p.holder.Seat().Lease()
	return st == seat.LeaseHeld || st == seat.LeaseWaiting, "seat lease " + string(st) + ": " + why
}

// onLease does the work only the holder does; each of its writes passes
// fence (the seat's [seat.Seat.Fence]) first.
func (p *seatProcess) onLease(ctx context.Context, fence func() error) {
	if err := fence(); err != nil {
		return
	}
	n, err := provisioning.DropNeeds(ctx, p.js)
	if err != nil {
		p.log.Error("seat: deleting the leftovers of the retired needs state", "err", err)
	} else {
		p.log.Info("seat: deleted the leftover keys of the retired needs state", "keys", n)
	}
	if err := registry.Keep(ctx, p.js, registry.KeepOptions{Log: p.log, Fence: fence}); err != nil && ctx.Err() == nil {
		p.log.Error("seat: keeping the registry", "err", err)
	}
}

// run runs the seat until ctx is done, with a new seat after each lost
// lease.
func (p *seatProcess) run(ctx context.Context) error {
	for {
		err := p.holder.Seat().Run(ctx)
		if !errors.Is(err, seat.ErrLeaseLost) {
			return err
		}
		p.log.Warn("seat: the lease was lost; waiting to take it again", "err", err)
		st := p.newSeat()
		p.holder.mu.Lock()
		p.holder.seat = st
		p.holder.mu.Unlock()
	}
}
