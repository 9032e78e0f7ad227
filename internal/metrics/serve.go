package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is a health check: it reports whether the process is healthy, and
// a short text saying why (shown by /healthz).
type Check func() (ok bool, why string)

// Handler serves /metrics (m's registry only, in Prometheus' text format)
// and /healthz: 200 with "ok: <why>" when check reports healthy, 503 with
// "unhealthy: <why>" otherwise. A nil check is always healthy.
func (m *Metrics) Handler(check Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := true, "running"
		if check != nil {
			ok, why = check()
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %s\n", why)
			return
		}
		fmt.Fprintf(w, "ok: %s\n", why)
	})
	return mux
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves h
// until ctx is done. It returns the address it listens on, or the listen
// error at once. Errors of the server after it started go to log.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (net.Addr, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics: serving stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	return ln.Addr(), nil
}
