package cli

import (
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestACommandWaitsForASlowHandshake runs "get plans" through a proxy
// whose first connection is accepted and then says nothing (a server too
// loaded to finish the handshake within the library's 2 s); the next ones
// reach the server. The command tries again, saying so once on stderr,
// and prints the plan. Before, it failed at once ("bus: connect ...: i/o
// timeout": apply -f of TestUpPostgresMovedMidWork on a loaded machine).
// No server at the address still fails at once (TestUsageErrors' dead
// url).
func TestACommandWaitsForASlowHandshake(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "seat")
	ctx := bustest.Context(t)
	plans, err := bus.Bucket(ctx, js, mesh.PlansBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Put(ctx, "ace.gitea", []byte(`{"node":"ace","module":"gitea"}`)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted.Add(1) == 1 {
				go func() { io.Copy(io.Discard, c); c.Close() }() // silent until the client gives up
				continue
			}
			go func() {
				up, err := net.Dial("tcp", s.Addr().String())
				if err != nil {
					c.Close()
					return
				}
				go func() { io.Copy(up, c); up.Close() }()
				io.Copy(c, up)
				c.Close()
			}()
		}
	}()
	out, stderr, err := run(t, "get", "plans", "--nats", "nats://"+ln.Addr().String())
	if err != nil || !strings.Contains(out, "ace   gitea") {
		t.Fatalf("get plans through a slow first handshake = %q, %v (stderr %q); want the plan ace.gitea", out, err, stderr)
	}
	if n := accepted.Load(); n < 2 {
		t.Errorf("the proxy accepted %d connections; want the stalled one and another", n)
	}
	if !strings.Contains(stderr, "trying again") || !strings.Contains(stderr, "i/o timeout") {
		t.Errorf("stderr = %q; want the timed-out handshake said, and that it tries again", stderr)
	}
}
