package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

// freeAddr returns a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeMetricsAndHealth runs two "serve --metrics": the holder and the
// standby are both healthy (the lease held, the lease waited for), and the
// holder serves its series on /metrics.
func TestServeMetricsAndHealth(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t)
	ctx, cancel := context.WithCancel(bustest.Context(t))
	var stopped []chan struct{}
	defer func() {
		cancel()
		for _, c := range stopped {
			<-c
		}
	}()
	serve := func(id string) string {
		addr := freeAddr(t)
		root := Root()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs([]string{"serve", "--nats", srv.URL(), "--id", id, "--metrics", addr, "--log-level", "error"})
		done := make(chan struct{})
		stopped = append(stopped, done)
		go func() {
			defer close(done)
			if err := root.ExecuteContext(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("serve %s: %v", id, err)
			}
		}()
		return "http://" + addr
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	first := serve("first")
	bustest.WaitFor(t, 0, "first's /healthz to say it holds the lease", func() bool {
		code, body := get(first + "/healthz")
		return code == http.StatusOK && strings.Contains(body, "seat lease held")
	})
	second := serve("second")
	bustest.WaitFor(t, 0, "second's /healthz to say it waits for first", func() bool {
		code, body := get(second + "/healthz")
		return code == http.StatusOK && strings.Contains(body, "seat lease waiting: the lease is held by first")
	})
	if code, body := get(first + "/metrics"); code != http.StatusOK ||
		!strings.Contains(body, "\nmesh_provisioner_write_errors_total 0\n") ||
		!strings.Contains(body, "\nmesh_provisioner_open_asks 0\n") {
		t.Errorf("first's /metrics = %d, without write_errors_total 0 or open_asks 0:\n%s", code, body)
	}
}

// serve refuses a lease under NATS's floor at once, before it dials the
// bus (no server listens at --nats here).
func TestServeRefusesALeaseUnderTheFloor(t *testing.T) {
	t.Parallel()
	for _, lease := range []string{"-3s", "0s", "50ms"} {
		_, _, err := run(t, "serve", "--nats", "nats://127.0.0.1:1", "--lease", lease)
		if !errors.Is(err, seat.ErrBadLease) || !strings.Contains(err.Error(), "--lease") {
			t.Errorf("serve --lease %s = %v; want ErrBadLease naming --lease", lease, err)
		}
	}
}
