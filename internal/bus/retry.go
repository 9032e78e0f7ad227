package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream error codes of a cluster that is forming or recovering:
// "JetStream system temporarily unavailable" (electing its meta leader, a
// server that has not joined it yet), "no suitable peers for placement"
// (peers offline or not yet known; also a bucket of more replicas than the
// cluster has servers, which a retry meets again until its bound),
// "JetStream cluster can not handle request" (no leader to take it),
// "insufficient resources" (a server still catching up on its store),
// "incomplete results" (a peer that did not answer a listing) and
// "expected last sequence per subject temporarily unavailable" (a stream
// leader just elected).
const (
	jsClusterNotAvailable jetstream.ErrorCode = 10008
	jsClusterNoPeers      jetstream.ErrorCode = 10005
	jsClusterNotLeader    jetstream.ErrorCode = 10009
	jsInsufficient        jetstream.ErrorCode = 10023
	jsClusterIncomplete   jetstream.ErrorCode = 10004
	jsLastSeqNotReady     jetstream.ErrorCode = 10163
)

// Transient reports whether err is one the bus gives while it recovers
// and that a try a little later may not meet: a request that timed out
// (context.DeadlineExceeded, nats.ErrTimeout), no responder yet
// (nats.ErrNoResponders), JetStream without a leader to answer
// (jetstream.ErrNoStreamResponse, "temporarily unavailable", "no suitable
// peers", "can not handle request", "insufficient resources", "incomplete
// results"), no server to connect to yet (nats.ErrNoServers), or a
// connection reconnecting or disconnected a moment (nats.ErrDisconnected:
// a reconnect on a user signed anew), or a first connect cut by a server
// too slow to finish its handshake (a network timeout, the server's
// "Authentication Timeout", or the socket it then ended: a broken pipe, a
// reset; a loaded machine). A refusal (permissions, bad
// credentials, a conflict, a bad value) is not transient.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	code, api := apiCode(err)
	if api {
		switch code {
		case jsClusterNotAvailable, jsClusterNoPeers, jsClusterNotLeader, jsInsufficient, jsClusterIncomplete, jsLastSeqNotReady:
			return true
		}
		return false
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	// The server ends a handshake whose CONNECT came after its auth
	// timeout with this -ERR, which nats.go gives as text only; a client
	// slower still meets the socket the server ended: its write of
	// CONNECT a broken pipe, its read a reset.
	if strings.Contains(strings.ToLower(err.Error()), authTimeout) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	for _, t := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders,
		jetstream.ErrNoStreamResponse, nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrNoServers} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// authTimeout is the server's -ERR for a client whose CONNECT came too
// late, lower case, as nats.go passes it on ("nats: Authentication
// Timeout").
const authTimeout = "nats: authentication timeout"

// ErrNoAnswer is wrapped by the error of [Retry] when the bus's errors
// were still transient at its bound: "the bus did not answer within 10s:
// <the last error>".
var ErrNoAnswer = errors.New("the bus did not answer")

// maxSaid bounds how many whys [Retry] keeps to say each once: past it,
// it forgets them and says each again once.
const maxSaid = 64

// Retry calls try until it returns nil or an error that is not
// [Transient], trying again after a transient one with backoff (250 ms,
// growing to 2 s) for at most bound after the first try, and returns nil
// or try's last error: a transient one still at the bound wrapped as "the
// bus did not answer within <bound>: ..."; joined with ctx's error when
// ctx ends first. Each why it tries again for is said in log as what, at
// warn level the first time (at debug level after, also when it comes back
// after another: a read of several buckets on a cluster without a quorum
// meets their errors in turn).
// A try must be safe to repeat (an apply that diffs the bucket anew, a
// read, a request nobody took).
func Retry(ctx context.Context, bound time.Duration, log *slog.Logger, what string, try func() error) error {
	if log == nil {
		log = slog.Default()
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 250 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	deadline := time.Now().Add(bound)
	said := map[string]bool{} // the whys said at warn level
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
			return fmt.Errorf("%w within %v: %w", ErrNoAnswer, bound, err)
		}
		level := slog.LevelDebug
		if why := err.Error(); !said[why] {
			if len(said) >= maxSaid {
				clear(said) // whys that never repeat (a long wait): said anew
			}
			said[why], level = true, slog.LevelWarn
		}
		log.Log(ctx, level, "bus: the bus did not answer; trying again", "what", what, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// apiCode returns the JetStream error code of err, an API error of the
// jetstream package or of the nats package (which the server's JSON
// answers to a plain request decode into), and whether err is one.
func apiCode(err error) (jetstream.ErrorCode, bool) {
	if api, ok := errors.AsType[*jetstream.APIError](err); ok {
		return api.ErrorCode, true
	}
	if api, ok := errors.AsType[*nats.APIError](err); ok {
		return jetstream.ErrorCode(api.ErrorCode), true
	}
	return 0, false
}
