package bustest

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Relay is a loopback TCP relay to a server, for a test's faults between
// a real client and a real server: it may hand the client what the server
// sends late (SetDelay: a slow bus), drop it (Silence: a request's answer
// lost), drop both directions (Freeze: a dead link that stays open), and
// close every connection through it (Cut: a lost link; the client connects
// again through it). Bytes it passes keep their order.
type Relay struct {
	ln     net.Listener
	delay  atomic.Int64 // nanoseconds, of what the server sends
	mute   atomic.Bool  // what the server sends is dropped
	frozen atomic.Bool  // what either side sends is dropped
	mu     sync.Mutex
	conns  []net.Conn
}

// NewRelay relays to the server at url (nats://host:port, or host:port)
// until t ends.
func NewRelay(t testing.TB, url string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	r := &Relay{ln: ln}
	to := strings.TrimPrefix(url, "nats://")
	t.Cleanup(func() {
		_ = ln.Close()
		r.Cut()
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", to)
			if err != nil {
				_ = client.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, client, server)
			r.mu.Unlock()
			go r.pass(client, server, func() time.Duration { return time.Duration(r.delay.Load()) }, &r.mute)
			go r.pass(server, client, func() time.Duration { return 0 }, nil)
		}
	}()
	return r
}

// URL returns the URL clients dial to go through r.
func (r *Relay) URL() string { return "nats://" + r.ln.Addr().String() }

// SetDelay makes r hand the client each byte the server sends from now on
// d after it was read (those read before keep theirs).
func (r *Relay) SetDelay(d time.Duration) { r.delay.Store(int64(d)) }

// Silence makes r drop what the server sends from now on (until Cut).
func (r *Relay) Silence() { r.mute.Store(true) }

// Freeze makes r drop what either side sends while on.
func (r *Relay) Freeze(on bool) { r.frozen.Store(on) }

// Cut closes every connection through r, with the bytes not handed on
// yet, and passes what the server sends again for the connections made
// next.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
	r.mute.Store(false)
}

// pass copies from src to dst until either closes, each chunk delay()
// after it was read, dropping what it reads while r is frozen or mute
// (when given) is set.
func (r *Relay) pass(dst, src net.Conn, delay func() time.Duration, mute *atomic.Bool) {
	type chunk struct {
		at time.Time // when it is due
		b  []byte
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer dst.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close()
				return
			}
		}
	}()
	defer close(chunks)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !r.frozen.Load() && (mute == nil || !mute.Load()) {
			chunks <- chunk{time.Now().Add(delay()), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			return
		}
	}
}
