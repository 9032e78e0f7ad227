package bus_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// freezer is a TCP proxy to a server that can stop passing bytes while
// keeping its connections open: a partition, as a connection sees one.
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, to string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			go f.pass(c, s)
			go f.pass(s, c)
		}
	}()
	return f
}

// pass copies from src to dst until either closes, dropping what it reads
// while frozen.
func (f *freezer) pass(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !f.frozen.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

// TestConnectFindsADeadServerInSeconds checks that a connection whose
// server stops answering (its TCP connection open, nothing passing: a
// partition) is taken as disconnected within PingInterval x (MaxPingsOut
// + 1) and a margin, not after nats.go's default of minutes.
func TestConnectFindsADeadServerInSeconds(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	f := newFreezer(t, strings.TrimPrefix(s.URL(), "nats://"))
	var down atomic.Bool
	nc, _, err := bus.Connect(bus.Dial{URL: "nats://" + f.ln.Addr().String(), Name: "pinger"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDisconnectErrHandler(func(*nats.Conn, error) { down.Store(true) })
	f.frozen.Store(true)
	froze := time.Now()
	bound := bus.PingInterval*(bus.MaxPingsOut+1) + 4*time.Second
	bustest.WaitFor(t, bound, "the connection to take its silent server as dead", down.Load)
	t.Logf("found dead after %v (bound %v)", time.Since(froze).Round(100*time.Millisecond), bound)
}
