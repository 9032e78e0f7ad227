package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// busWait is how long an operator's command tries again while the bus's
// errors are transient ([bus.Transient]: a cluster that lost its quorum
// or elects a leader, a server restarting), its reads and its requests
// nobody took, unless --timeout says (see addTimeout).
const busWait = requestTimeout

// componentWait bounds how long a component a command runs (the page of
// web) waits for a bus that does not answer yet: as long as it runs.
const componentWait = 100 * 365 * 24 * time.Hour

// addTimeout adds --timeout, the bound of the command's retries.
func (f *busFlags) addTimeout(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.wait, "timeout", busWait, "how long the command tries again while the bus does not answer (a cluster electing a leader, a server restarting)")
}

// retry runs try until it returns nil or an error that is not transient
// (or a request nobody took: see untaken), trying again with backoff
// ([bus.Retry]) while --timeout (busWait) has not passed since the first
// try, and saying each change of why once on the command's stderr as what.
// A try in flight is never cut (a long read of a large mesh is no
// failure): each request of a try has its own timeout. A try must be
// safe to repeat (a read). Past the bound it returns an error wrapping
// [bus.ErrNoAnswer] and the last error ("the bus did not answer within
// 10s: ..."); after a refusal of the server or ctx's end, the error of
// that try joined with ctx's.
func (f *busFlags) retry(ctx context.Context, what string, try func(ctx context.Context) error) error {
	wait := f.wait
	if wait <= 0 {
		wait = busWait
	}
	return bus.Retry(ctx, wait, f.sayer(), what, func() error {
		err := try(ctx)
		if untaken(err) && !bus.Transient(err) {
			return nobody{err}
		}
		return err
	})
}

// nobody is an error saying nobody took a request (see untaken) that
// [bus.Transient] does not take as such (asks.ErrNoRouter): shown as
// it, taken as nats.ErrNoResponders.
type nobody struct{ err error }

func (n nobody) Error() string   { return n.err.Error() }
func (n nobody) Unwrap() []error { return []error{n.err, nats.ErrNoResponders} }

// retryUntaken is retry for a request that changes something (an answer,
// a rotation, an unkeep): tried again only while nobody took it (no
// responder: the ask router, the vault or the seat restarting, or no
// JetStream to answer a read before it), never after a timeout, which
// leaves unknown whether it was done.
func (f *busFlags) retryUntaken(ctx context.Context, what string, try func(ctx context.Context) error) error {
	err := f.retry(ctx, what, func(ctx context.Context) error {
		err := try(ctx)
		if err != nil && !untaken(err) {
			return final{err}
		}
		return err
	})
	if fe, ok := errors.AsType[final](err); ok {
		return fe.err
	}
	return err
}

// untaken reports whether err says nobody took a request: no responder
// (asks.ErrNoRouter says it so), or no server to send it.
func untaken(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, asks.ErrNoRouter) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrNoServers)
}

// final is an error a retry does not try again: it hides what it wraps
// from [bus.Transient].
type final struct{ err error }

func (f final) Error() string { return f.err.Error() }

// sayer is where a command's retries are said: its stderr (set by add),
// warnings and worse.
func (f *busFlags) sayer() *slog.Logger {
	var w io.Writer = os.Stderr
	if f.errOut != nil {
		w = f.errOut
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
