package bus_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestAServerRestartIsNoWarning restarts the server under a connection
// and its copy: the disconnect, the reconnect and the watch started again
// after it are said at info, and nothing at warn or error, since the
// connection came back within bus.DisconnectGrace. A server that stays
// down is said at warn once the grace has passed.
func TestAServerRestartIsNoWarning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	said := &logBuffer{}
	log := slog.New(slog.NewTextHandler(said, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nc, js, err := bus.Connect(bus.Dial{URL: s.URL(), Name: "reader", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kv, err := bus.Bucket(ctx, js, "test_quiet", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "before", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	c := bus.Follow(ctx, js, "test_quiet", bus.Options{Log: log})
	<-c.Ready()
	s.Shutdown()
	s2, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	_, js2, err := bus.Connect(bus.Dial{URL: s2.URL(), Name: "writer"})
	if err != nil {
		t.Fatal(err)
	}
	kv2, err := js2.KeyValue(ctx, "test_quiet")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv2.Put(ctx, "after", []byte(`2`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 20*time.Second, "the copy to follow after the restart", func() bool {
		_, ok := c.Get("after")
		return ok && said.has("bus: reconnected")
	})
	if !said.has(`level=INFO msg="bus: disconnected; reconnecting"`) {
		t.Errorf("the disconnect was not said at info:\n%s", said)
	}
	for _, level := range []string{"level=WARN", "level=ERROR"} {
		if said.has(level) {
			t.Errorf("a server restart under a connection said %s:\n%s", level, said)
		}
	}
	s2.Shutdown()
	bustest.WaitFor(t, 4*bus.DisconnectGrace, "a lasting disconnect said at warn", func() bool {
		return said.has(`level=WARN msg="bus: disconnected and not back yet; reconnecting with backoff" component=reader for=5s`)
	})
	if n := strings.Count(said.String(), "not back yet"); n != 1 {
		t.Errorf("a lasting disconnect said %d times; want once:\n%s", n, said)
	}
}

// TestASlowReconnectHandshakeIsNoError puts a proxy between a connection
// and its server, cuts the connection, and makes the proxy stall the
// reconnect's handshake (the server's INFO passes, the client's CONNECT
// and PING go nowhere, as on a server too loaded to answer within the
// library's 2 s), then lets the next try through. The handshake's timeout
// is said at info and the connection comes back; nothing is said at
// error. Before, the library's report of it was "bus: asynchronous error
// ... i/o timeout" at error (TestUpFollowsTheLiveMesh on a loaded
// machine).
func TestASlowReconnectHandshakeIsNoError(t *testing.T) {
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	p := newStallProxy(t, s.Addr().String())
	said := &logBuffer{}
	log := slog.New(slog.NewTextHandler(said, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nc, _, err := bus.Connect(bus.Dial{URL: "nats://" + p.addr(), Name: "slow", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p.stall(true)
	p.cut()
	bustest.WaitFor(t, 30*time.Second, "a reconnect's handshake stalled and timed out, said", func() bool {
		return said.has("handshake timed out") || said.has("i/o timeout")
	})
	if !said.has(`level=INFO msg="bus: a reconnect's handshake timed out; trying again" component=slow`) {
		t.Errorf("the handshake's timeout was not said at info:\n%s", said)
	}
	p.stall(false)
	bustest.WaitFor(t, 30*time.Second, "the connection back", func() bool { return nc.IsConnected() && said.has("bus: reconnected") })
	if err := nc.Flush(); err != nil {
		t.Errorf("flush once back: %v", err)
	}
	if said.has("level=ERROR") {
		t.Errorf("a reconnect's handshake that timed out said at error:\n%s", said)
	}
}

// stallProxy forwards TCP connections to a server; stalled, it passes a
// new connection's first line from the server (its INFO) and then nothing
// either way.
type stallProxy struct {
	ln       net.Listener
	upstream string
	stalled  atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
}

func newStallProxy(t *testing.T, upstream string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *stallProxy) addr() string  { return p.ln.Addr().String() }
func (p *stallProxy) stall(on bool) { p.stalled.Store(on) }

// cut closes every connection the proxy holds.
func (p *stallProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *stallProxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	if p.stalled.Load() {
		line, err := bufio.NewReader(up).ReadString('\n')
		if err == nil {
			c.Write([]byte(line))
		}
		io.Copy(io.Discard, c) // until the client gives up
		c.Close()
		up.Close()
		return
	}
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}
