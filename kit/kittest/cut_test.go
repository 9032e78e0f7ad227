package kittest_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// cutter is a loopback TCP relay to a server that can stop passing what the
// server sends (so a request's answer is lost) and then cut every
// connection through it, as a loaded or broken network does: a real fault
// between a real client and a real server.
type cutter struct {
	ln     net.Listener
	server string
	mu     sync.Mutex
	mute   bool
	conns  []net.Conn
}

// newCutter relays to the server at url (nats://host:port) until t ends,
// and returns it.
func newCutter(t *testing.T, url string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, server: strings.TrimPrefix(url, "nats://")}
	t.Cleanup(func() {
		_ = ln.Close()
		c.cut()
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", c.server)
			if err != nil {
				_ = client.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, client, server)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(server, client) }()
			go c.back(client, server)
		}
	}()
	return c
}

// back passes what server sends to client, dropping it while muted.
func (c *cutter) back(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if err != nil {
			return
		}
		c.mu.Lock()
		mute := c.mute
		c.mu.Unlock()
		if mute {
			continue
		}
		if _, err := client.Write(buf[:n]); err != nil {
			return
		}
	}
}

// URL returns the URL clients dial to go through c.
func (c *cutter) URL() string { return "nats://" + c.ln.Addr().String() }

// silence makes c drop what the server sends from now on.
func (c *cutter) silence() {
	c.mu.Lock()
	c.mute = true
	c.mu.Unlock()
}

// cut closes every connection through c and passes what the server sends
// again, for the connections made next.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns, c.mute = nil, false
}

// failures is t for a test seat, keeping the failures it says so that the
// test can check them.
type failures struct {
	testing.TB
	mu   sync.Mutex
	said []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.said = append(f.said, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *failures) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.said...)
}

// TestSeatWritesAgainAPutLostWithItsConnection cuts the test seat's
// connection while a provision it wrote is stored but its answer has not
// reached the seat (the fault a loaded machine shows as an EOF): the put
// is tried again once the connection is back, and the seat holds the
// provision with no failure said.
func TestSeatWritesAgainAPutLostWithItsConnection(t *testing.T) {
	url := kittest.Server(t)
	c := newCutter(t, url)
	f := &failures{TB: t}
	seat := kittest.NewSeat(f, c.URL())
	_, js := kittest.Connect(t, url, "reader")
	ctx := bustest.Context(t)
	kv, err := js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}

	key, p := kittest.Requirement(gitea, "shelf", "", shelf)
	c.silence()
	done := make(chan struct{})
	go func() {
		defer close(done)
		seat.Need(key, p)
	}()
	bustest.WaitFor(t, 0, fmt.Sprintf("%s stored", key), func() bool {
		_, err := kv.Get(ctx, key.String())
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	})
	c.cut() // the put's answer is lost with the connection
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Fatalf("the seat's put of %s has not returned 45 s after its connection was cut", key)
	}
	if said := f.all(); len(said) > 0 {
		t.Errorf("the seat failed its test: %q; want its put of %s tried again once the connection is back", said, key)
	}
	bustest.WaitFor(t, 0, fmt.Sprintf("the seat to hold %s asked", key), func() bool {
		got, ok := seat.Get(key)
		return ok && got.State == mesh.Asked && got.Why == kittest.WhyNoEntry(shelf)
	})
}
