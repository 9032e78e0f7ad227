package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("put: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{fmt.Errorf("ask: %w", nats.ErrNoResponders), true},
		{jetstream.ErrNoStreamResponse, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}, false},
		{jetstream.ErrKeyExists, false},
		{nats.ErrPermissionViolation, false},
		{errors.New("bad value"), false},
	} {
		if got := bus.Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

// TestRetry checks that Retry tries again after transient errors until
// the try succeeds, returns a refusal at once, and gives up after its
// bound with the last transient error.
func TestRetry(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	n := 0
	err := bus.Retry(ctx, 10*time.Second, quiet, "test", func() error {
		if n++; n < 3 {
			return fmt.Errorf("apply: %w", context.DeadlineExceeded)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Errorf("Retry over two timeouts = %v after %d tries; want nil after 3", err, n)
	}
	n = 0
	refused := errors.New("refused")
	if err := bus.Retry(ctx, 10*time.Second, quiet, "test", func() error { n++; return refused }); !errors.Is(err, refused) || n != 1 {
		t.Errorf("Retry of a refusal = %v after %d tries; want it after 1", err, n)
	}
	n = 0
	err = bus.Retry(ctx, 600*time.Millisecond, quiet, "test", func() error { n++; return nats.ErrTimeout })
	if !errors.Is(err, nats.ErrTimeout) || n < 2 || n > 4 {
		t.Errorf("Retry of timeouts with a 600 ms bound = %v after %d tries; want the timeout after 2 to 4", err, n)
	}
}
