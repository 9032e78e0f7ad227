package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestClientStopsWhenItsAccessIsRemoved runs a standalone "client --node
// ace" with a copy of client-ace's credentials (no seat: it waits for the
// plans bucket), removes the copy and has
// the server drop the connection: the client exits with an error saying
// its access to the mesh was removed and naming the user, rather than
// reconnect for ever.
func TestClientStopsWhenItsAccessIsRemoved(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	if _, _, err := run(t, "auth", "gen", "-f", homelabFile, "-o", dir); err != nil {
		t.Fatalf("auth gen: %v", err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	// The client's credentials and its requests account's, where "auth
	// gen" puts them, in a folder of their own.
	own := t.TempDir()
	creds := filepath.Join(own, "client-ace.creds")
	requests := filepath.Join(own, "mesh-requests", "client-ace.creds")
	for from, to := range map[string]string{auth.CredsPath(dir, "client-ace"): creds,
		filepath.Join(dir, "mesh-requests", "client-ace.creds"): requests} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		root := Root()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs([]string{"client", "--node", "ace", "--root", filepath.Join(filepath.Dir(creds), "root"),
			"--nats", s.URL(), "--creds", creds, "--log-level", "error"})
		done <- root.ExecuteContext(ctx)
	}()
	var cids []uint64
	var early error
	bustest.WaitFor(t, 20*time.Second, "client-ace connected, waiting for its plans", func() bool {
		select {
		case early = <-done:
			return true
		default:
		}
		cz, err := s.Connz(&server.ConnzOptions{})
		if err != nil {
			return false
		}
		cids = cids[:0]
		for _, c := range cz.Conns {
			if c.Name == "client-ace" && c.NumSubs > 0 {
				cids = append(cids, c.Cid)
			}
		}
		return len(cids) > 0
	})
	if early != nil || len(cids) == 0 {
		t.Fatalf("client exited before its credentials were removed: %v", early)
	}
	for _, path := range []string{creds, requests} {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	for _, cid := range cids {
		if err := s.DisconnectClientByID(cid); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if !errors.Is(err, bus.ErrAccessRemoved) || !strings.Contains(err.Error(), "client-ace") {
			t.Errorf("client exited with %v; want its access to the mesh removed, naming client-ace", err)
		}
	case <-ctx.Done():
		t.Fatal("client still runs a minute after its credentials file was removed")
	}
}
