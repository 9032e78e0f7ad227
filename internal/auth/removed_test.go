package auth_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// lines is a slog handler keeping every record as "LEVEL message
// attrs...", for a test to count what a connection said.
type lines struct {
	mu   sync.Mutex
	said []string
	// waits are the values of the "wait" attribute of each "bus:
	// reconnecting" record, in order.
	waits []time.Duration
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *lines) WithGroup(string) slog.Handler            { return l }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	var wait time.Duration
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		if a.Key == "wait" {
			wait = a.Value.Duration()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.said = append(l.said, line)
	if r.Message == "bus: reconnecting" {
		l.waits = append(l.waits, wait)
	}
	return nil
}

// count returns how many lines hold part, and the reconnect waits so far.
func (l *lines) count(part string) (int, []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.said {
		if strings.Contains(s, part) {
			n++
		}
	}
	return n, append([]time.Duration(nil), l.waits...)
}

// TestRevokedConnectionBacksOff revokes client-n2 while its bus.Connect
// connection is open: the connection says once that its access to the
// mesh was removed (naming the user, to OnRemoved and its log), says each
// refusal text once however often it tries again, and waits longer before
// each try (250 ms doubling, with jitter), not every 250 ms.
func TestRevokedConnectionBacksOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, parties := gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	old := copyFile(t, auth.CredsPath(dir, "client-n2"))
	log := &lines{}
	removed := make(chan error, 4)
	nc, _, err := busDial(bus.Dial{URL: srv.URL(), Name: "client-n2", Creds: old, Log: slog.New(log),
		OnRemoved: func(err error) { removed <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	res, err := auth.Gen(dir, without(parties, "client-n2"), auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	push(t, srv.URL(), res.Authority, res.Accounts)
	bustest.WaitFor(t, 20*time.Second, "five reconnect tries of the revoked client-n2", func() bool {
		_, waits := log.count("")
		return len(waits) >= 5
	})
	refusals, waits := log.count("bus: refused")
	if refusals < 1 || refusals > 2 {
		t.Errorf("%d refusal lines after %d tries; want 1 or 2 (each text once: revoked, authorization violation):\n%s",
			refusals, len(waits), strings.Join(log.said, "\n"))
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] <= waits[i-1] {
			t.Errorf("reconnect waits %v do not grow (try %d waits %v after %v)", waits, i+1, waits[i], waits[i-1])
		}
	}
	if n, _ := log.count("access to the mesh was removed component=client-n2 user=client-n2"); n != 1 {
		t.Errorf("%d lines say client-n2's access was removed; want 1:\n%s", n, strings.Join(log.said, "\n"))
	}
	select {
	case err := <-removed:
		if !errors.Is(err, bus.ErrAccessRemoved) || !strings.Contains(err.Error(), "client-n2") {
			t.Errorf("OnRemoved got %v; want bus.ErrAccessRemoved naming client-n2", err)
		}
	default:
		t.Error("OnRemoved was not called")
	}
	if len(removed) != 0 {
		t.Errorf("OnRemoved called %d more times; want once", len(removed))
	}
}

// TestMissingCredsFileBacksOff removes the credentials file of an open
// connection and makes the server drop it: the connection says once that
// its access was removed and the missing file once, not each try.
func TestMissingCredsFileBacksOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	creds := copyFile(t, auth.CredsPath(dir, "client-n1"))
	log := &lines{}
	removed := make(chan error, 4)
	nc, _, err := busDial(bus.Dial{URL: srv.URL(), Name: "client-n1", Creds: creds, Log: slog.New(log),
		OnRemoved: func(err error) { removed <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := os.Remove(creds); err != nil {
		t.Fatal(err)
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 20*time.Second, "four reconnect tries of client-n1 without its file", func() bool {
		_, waits := log.count("")
		return len(waits) >= 4
	})
	if n, waits := log.count("no such file"); n != 2 { // the refusal and the removal
		t.Errorf("%d lines name the missing file after %d tries; want 2:\n%s", n, len(waits), strings.Join(log.said, "\n"))
	}
	select {
	case err := <-removed:
		if !errors.Is(err, bus.ErrAccessRemoved) || !strings.Contains(err.Error(), "client-n1") {
			t.Errorf("OnRemoved got %v; want bus.ErrAccessRemoved naming client-n1", err)
		}
	default:
		t.Error("OnRemoved was not called")
	}
}

// TestRotatedConnectionKeepsRunning rotates client-n1's key while its
// bus.Connect connection is open on the credentials file Rotate writes
// anew: once pushed, the server drops the old key's connection, which
// reconnects with the file's new key (the connection's user is the new
// key), says no removal of its access (no OnRemoved, no ERROR line) and
// publishes again.
func TestRotatedConnectionKeepsRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, parties := gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	creds := auth.CredsPath(dir, "client-n1")
	oldPub, _ := auth.PublicKey(creds)
	log := &lines{}
	removed := make(chan error, 4)
	nc, _, err := busDial(bus.Dial{URL: srv.URL(), Name: "client-n1", Creds: creds, Log: slog.New(log),
		OnRemoved: func(err error) { removed <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var n1 access.Party
	for _, p := range parties {
		if p.User == "client-n1" {
			n1 = p
		}
	}
	issued, err := res.Authority.Rotate(n1)
	if err != nil {
		t.Fatal(err)
	}
	newPub, _ := auth.PublicKey(issued[0].Path)
	if oldPub == newPub {
		t.Fatalf("Rotate kept the key %s", newPub)
	}
	jwts, err := res.Authority.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	push(t, srv.URL(), res.Authority, jwts)
	bustest.WaitFor(t, 20*time.Second, "client-n1 connected on its new key", func() bool {
		cz, err := srv.Connz(&server.ConnzOptions{Username: true})
		if err != nil {
			return false
		}
		for _, c := range cz.Conns {
			if c.Name == "client-n1" && c.AuthorizedUser == newPub {
				return true
			}
		}
		return false
	})
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Errorf("flush after the rotation: %v", err)
	}
	// A refusal said after the reconnect would come before this flush's
	// answer: the server says it first.
	if n, _ := log.count("ERROR"); n != 0 {
		t.Errorf("%d ERROR lines after a rotation; want none:\n%s", n, strings.Join(log.said, "\n"))
	}
	if len(removed) != 0 {
		t.Errorf("OnRemoved called after a rotation: %v", <-removed)
	}
}
