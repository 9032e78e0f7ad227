package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

func TestTransient(t *testing.T) {
	t.Parallel()
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
		{fmt.Errorf("read b: %w", &nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{&nats.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}, false},
		{&jetstream.APIError{Code: 500, ErrorCode: 10009, Description: "JetStream cluster can not handle request"}, true},
		{fmt.Errorf("bus: bucket b: %w", &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}), true},
		{fmt.Errorf("bus: connect: %w", nats.ErrNoServers), true},
		{&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}, false},
		{fmt.Errorf("bus: connect: %w", nats.ErrAuthorization), false},
		{jetstream.ErrKeyExists, false},
		{nats.ErrPermissionViolation, false},
		{errors.New("bad value"), false},
		{fmt.Errorf("bus: connect: %w", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), true},
		{fmt.Errorf("bus: connect: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), true},
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
	t.Parallel()
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
	var said strings.Builder
	log := slog.New(slog.NewTextHandler(&said, &slog.HandlerOptions{Level: slog.LevelDebug}))
	err = bus.Retry(ctx, 600*time.Millisecond, log, "test", func() error { n++; return nats.ErrTimeout })
	if !errors.Is(err, nats.ErrTimeout) || n < 2 || n > 4 {
		t.Errorf("Retry of timeouts with a 600 ms bound = %v after %d tries; want the timeout after 2 to 4", err, n)
	}
	if want := "the bus did not answer within 600ms: nats: timeout"; err == nil || err.Error() != want {
		t.Errorf("Retry of timeouts with a 600 ms bound = %v; want %q", err, want)
	}
	// The same why is said once at warn level, its further tries at debug.
	if w, d := strings.Count(said.String(), "level=WARN"), strings.Count(said.String(), "level=DEBUG"); w != 1 || d != n-2 {
		t.Errorf("%d tries of one why said %d times at warn level, %d at debug; want 1 and %d:\n%s", n, w, d, n-2, said.String())
	}
}

// TestConnectToASlowServerIsTransient checks that a first connect cut by
// a server too slow to finish its handshake is an error a component tries
// again (a loaded machine: the server says nothing within the connect
// timeout, or it ends the handshake with "Authentication Timeout" because
// the client's CONNECT came late), while a server's refusal of the
// credentials is not. Each server is a real socket speaking what a
// nats-server says at that moment.
func TestConnectToASlowServerIsTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		says string // what the server writes once it accepted; "" says nothing
		want bool
	}{
		{"silent", "", true},
		{"authentication timeout", "-ERR 'Authentication Timeout'\r\n", true},
		{"authorization violation", "-ERR 'Authorization Violation'\r\n", false},
		// Its auth timeout passed before the client's CONNECT: the
		// server ends the socket, and the client's write of CONNECT
		// meets a broken pipe (or its read a reset).
		{"closed before connect", "close", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					defer c.Close()
					if tc.says == "" {
						continue // accepted, then nothing: the client's timeout ends it
					}
					fmt.Fprintf(c, "INFO {\"server_id\":\"S\",\"version\":\"2.15.0\",\"proto\":1,\"max_payload\":1048576,\"auth_required\":true}\r\n")
					if tc.says == "close" {
						c.(*net.TCPConn).SetLinger(0) // a reset, not an orderly end
						c.Close()
						continue
					}
					// The client's CONNECT and PING, then the server's end.
					buf := make([]byte, 4096)
					c.SetReadDeadline(time.Now().Add(2 * time.Second))
					c.Read(buf)
					fmt.Fprint(c, tc.says)
				}
			}()
			nc, _, err := bus.Connect(bus.Dial{URL: "nats://" + ln.Addr().String(), Name: "slow-test", User: "u", Password: "p", Log: slog.New(slog.DiscardHandler)})
			if err == nil {
				nc.Close()
				t.Fatal("connect succeeded; want an error")
			}
			if got := bus.Transient(err); got != tc.want {
				t.Errorf("Transient(%v) = %v; want %v", err, got, tc.want)
			}
		})
	}
}

// TestRetrySaysEachWhyOnce: whys that come in turn (a read of two buckets
// on a cluster without a quorum, each refused or timed out in turn) are
// each said at warn level once, not at each change: why said 4 warnings
// for 3 whys in TestOperatorCommandsWaitForAClusterToAnswer under load.
func TestRetrySaysEachWhyOnce(t *testing.T) {
	unavailable := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	whys := []error{
		fmt.Errorf("get provisions: %w", unavailable),
		fmt.Errorf("get plans: %w", unavailable),
		fmt.Errorf("get plans: %w", context.DeadlineExceeded),
		fmt.Errorf("get provisions: %w", unavailable),
		fmt.Errorf("get plans: %w", unavailable),
	}
	var said strings.Builder
	log := slog.New(slog.NewTextHandler(&said, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n := 0
	err := bus.Retry(context.Background(), time.Minute, log, "test", func() error {
		if n < len(whys) {
			n++
			return whys[n-1]
		}
		return nil
	})
	if err != nil || n != len(whys) {
		t.Fatalf("Retry = %v after %d tries; want nil after %d", err, n, len(whys))
	}
	for _, why := range []string{"get provisions: nats: API error: code=503", "get plans: nats: API error: code=503", "get plans: context deadline exceeded"} {
		if c := strings.Count(said.String(), `level=WARN msg="bus: the bus did not answer; trying again" what=test err="`+why); c != 1 {
			t.Errorf("why %q said %d times at warn level; want once:\n%s", why, c, said.String())
		}
	}
	if w := strings.Count(said.String(), "level=WARN"); w != 3 {
		t.Errorf("3 whys in turn said %d times at warn level; want 3:\n%s", w, said.String())
	}
}
