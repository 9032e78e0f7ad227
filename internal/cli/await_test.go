package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestApplyWithNoSeatSaysWhatItWaitsFor runs apply against a server with
// the mesh's users where no seat ever ran (no bucket made): apply says at
// once, in one line on stderr, that it waits for a seat to make the
// buckets and that none holds the lease, and it applies the file once a
// seat (serve) starts and makes them. It was silent for the minute it
// waited.
func TestApplyWithNoSeatSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	if _, _, err := run(t, "auth", "gen", "-f", homelabFile, "-o", dir); err != nil {
		t.Fatalf("auth gen: %v", err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	ctx, cancel := context.WithCancel(bustest.Context(t))
	defer cancel()
	var out, errOut syncBuffer
	applied := make(chan error, 1)
	go func() {
		root := Root()
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs([]string{"apply", "-f", homelabFile, "--yes", "--nats", s.URL(), "--creds", auth.CredsPath(dir, "operator")})
		applied <- root.ExecuteContext(ctx)
	}()
	want := "apply: no bucket mesh-indexer_manifests yet, and no seat holds the lease: waiting up to 1m for a seat to make the mesh's buckets " +
		"(start one: mesh-provisioner serve, or up)\n"
	deadline := time.Now().Add(30 * time.Second)
	for errOut.String() == "" && time.Now().Before(deadline) {
		select {
		case err := <-applied:
			t.Fatalf("apply returned %v before a seat ran (stdout %q, stderr %q)", err, out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got := errOut.String(); got != want {
		t.Fatalf("apply with no seat said %q; want %q", got, want)
	}
	served := make(chan error, 1)
	go func() {
		root := Root()
		root.SetOut(&strings.Builder{})
		root.SetErr(&syncBuffer{})
		root.SetArgs([]string{"serve", "--nats", s.URL(), "--creds", auth.CredsPath(dir, "mesh-provisioner")})
		served <- root.ExecuteContext(ctx)
	}()
	select {
	case err := <-applied:
		if err != nil || !strings.HasPrefix(out.String(), "applied "+homelabFile+": 76 written, 0 unchanged, 0 removed\n") {
			t.Errorf("apply once a seat ran = %v, printed %q; want the homelab's 76 keys written", err, out.String())
		}
	case err := <-served:
		t.Fatalf("serve stopped: %v", err)
	}
	if got := errOut.String(); !strings.HasPrefix(got, want) || strings.Count(got, "waiting") != 1 {
		t.Errorf("apply said %q in all; want %q once", got, want)
	}
}

// TestGetNeedsWithNoSeatSaysSoAtOnce checks that get needs, asked of a
// mesh no seat runs (the homelab applied, no seat started), fails at once
// saying that no seat holds the lease and how to start one, rather than
// asking again for its whole --timeout and failing with "the bus did not
// answer".
func TestGetNeedsWithNoSeatSaysSoAtOnce(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	if _, errOut, err := run(t, "apply", "-f", homelabFile, "--yes", "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	_, _, err := run(t, "get", "needs", "--nats", s.URL())
	want := "get needs: no seat holds the lease, so none answers mesh-provisioner.provisioning: start one (mesh-provisioner serve, or up)"
	if err == nil || err.Error() != want || isUsage(err) {
		t.Fatalf("get needs with no seat = %v; want %q", err, want)
	}
}

// TestExpiredCredsAreSaidExpired runs status with an operator's
// credentials whose JWT expired (auth gen --expiry 1s): the server refuses
// them, and status says they expired, when, and how to renew them, rather
// than asking whether they are this mesh's.
func TestExpiredCredsAreSaidExpired(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	if _, _, err := run(t, "auth", "gen", "-f", homelabFile, "-o", dir, "--expiry", "1s"); err != nil {
		t.Fatalf("auth gen: %v", err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	creds := auth.CredsPath(dir, "operator")
	exp := credsExpiry(creds)
	if exp.IsZero() {
		t.Fatalf("%s holds no expiry", creds)
	}
	want := "status: the credentials in " + creds + " expired at " + exp.UTC().Format(time.RFC3339) +
		": renew them with \"mesh-provisioner auth renew -o DIR\" (DIR: where auth gen wrote them; up renews its own as it starts) " +
		"and hand the renewed file over: bus: connect " + s.URL() + " as cli-status with " + creds + ": nats: Authorization Violation"
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, err := run(t, "status", "--nats", s.URL(), "--creds", creds, "--timeout", "1s")
		if err != nil && err.Error() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status with credentials expired at %v = %v; want %q", exp, err, want)
		}
		<-time.After(200 * time.Millisecond)
	}
}
