package bus

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream error codes of a cluster that is forming or recovering:
// "JetStream system temporarily unavailable" (electing its meta leader, a
// server that has not joined it yet) and "no suitable peers for
// placement" (peers offline or not yet known; also a bucket of more
// replicas than the cluster has servers, which a retry meets again until
// its bound).
const (
	jsClusterNotAvailable jetstream.ErrorCode = 10008
	jsClusterNoPeers      jetstream.ErrorCode = 10005
)

// Transient reports whether err is one the bus gives while it recovers
// and that a try a little later may not meet: a request that timed out
// (context.DeadlineExceeded, nats.ErrTimeout), no responder yet
// (nats.ErrNoResponders), JetStream without a leader to answer
// (jetstream.ErrNoStreamResponse, "temporarily unavailable", "no suitable
// peers"), or a
// connection reconnecting. A refusal (permissions, a conflict, a bad
// value) is not transient.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.ErrorCode == jsClusterNotAvailable || api.ErrorCode == jsClusterNoPeers
	}
	for _, t := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders,
		jetstream.ErrNoStreamResponse, nats.ErrConnectionReconnecting, nats.ErrNoServers} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// Retry calls try until it returns nil or an error that is not
// [Transient], trying again after a transient one with backoff (250 ms,
// growing to 2 s) for at most bound after the first try (each retry said
// in log as what), and returns try's last error; ctx's error when ctx
// ends first. A try must be safe to repeat (an apply that diffs the bucket
// anew, a read).
func Retry(ctx context.Context, bound time.Duration, log *slog.Logger, what string, try func() error) error {
	if log == nil {
		log = slog.Default()
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 250 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	deadline := time.Now().Add(bound)
	for {
		err := try()
		if !Transient(err) || ctx.Err() != nil {
			if ctx.Err() != nil && err != nil {
				return errors.Join(err, ctx.Err())
			}
			return err
		}
		wait := bo.NextBackOff()
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		log.Warn("bus: the bus did not answer; trying again", "what", what, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
}
