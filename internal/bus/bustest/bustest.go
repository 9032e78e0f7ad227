// Package bustest starts a real embedded nats-server with JetStream for a
// test: its store in t.TempDir, on a random loopback port, shut down in
// t.Cleanup. There are no fakes of the bus.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// Server starts an embedded server for t and returns it. Optional config is
// nats-server configuration text (users, permissions).
func Server(t testing.TB, config ...string) *bus.Server {
	t.Helper()
	cfg := bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0"}
	if len(config) > 0 {
		cfg.Config = config[0]
	}
	s, err := bus.StartServer(cfg)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Long skips t under -short (the README's quick tier, go test -short),
// saying what it proves and that CI runs it: for a test that must run
// long (servers through kills and failover, a node's leaf link, a whole
// up with PostgreSQL moving a provider). proves completes "it proves ...".
func Long(t testing.TB, proves string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("long (not in -short; CI, .ci/run, runs it): it proves %s", proves)
	}
}

// Connect dials s as the component name and closes the connection in
// t.Cleanup.
func Connect(t testing.TB, s *bus.Server, name string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js, err := bus.Connect(bus.Dial{URL: s.URL(), Name: name})
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

// Context returns a context cancelled in t.Cleanup.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond every 10 ms until it returns true, failing t with what
// after the deadline d (0 means 30 s: generous, for a loaded machine).
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if d == 0 {
		d = 30 * time.Second
	}
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("bustest: after %v still waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FoldedKey and Folded are a provision's key and a value of it whose field
// names are the spec's in another case ("Provision", "LOCAL", "State"...):
// encoding/json, which folds case, reads it as the vault's provided
// credential, but names are exact (spec 2), so every reader of the bus must
// say it is odd.
const (
	FoldedKey = "ace.gitea.credential.gitea_gitea-read"
	Folded    = `{"Provision":"credential","LOCAL":"gitea_gitea-read","Consumer":{"Module":"gitea","Node":"ace"},` +
		`"Provider":{"Module":"mesh-vault","Node":"control"},"State":"provided",` +
		`"Reference":{"ID":"ace.gitea.credential.gitea_gitea-read","Generation":1},"at":"2026-12-01T09:41:36Z"}`
)

// ServeWatches answers scoped parties' watches on s as the seat does
// ([bus.ServeWatches]) until the test ends, on a connection of its own
// with no credentials (a server without accounts: the consumers take
// names of chance).
func ServeWatches(t testing.TB, s *bus.Server) {
	t.Helper()
	nc, js := Connect(t, s, "watches")
	if err := bus.ServeWatches(Context(t), bus.AnswererIn(nc, ""), js, nil); err != nil {
		t.Fatalf("bustest: %v", err)
	}
}

// ServeWatchesAs answers scoped parties' watches as the seat whose
// storage credentials file is creds (its services user's file beside it,
// as "auth gen" writes them), at url, until the test ends.
func ServeWatchesAs(t testing.TB, url, creds string) {
	t.Helper()
	d := bus.Dial{URL: url, Name: "watches", Creds: creds}
	nc, js, err := bus.Connect(d)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	t.Cleanup(nc.Close)
	a, err := bus.ConnectAnswerer(d)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	t.Cleanup(a.Close)
	if err := bus.ServeWatches(Context(t), a, js, nil); err != nil {
		t.Fatalf("bustest: %v", err)
	}
}
