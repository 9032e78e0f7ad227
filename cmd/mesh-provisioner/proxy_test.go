package main

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy forwards every TCP connection it accepts on loopback to one
// address: a route between two nats-servers passes through it, so that
// the test can cut the route (a partition) and heal it.
type proxy struct {
	ln net.Listener
	to string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

// newProxy listens on a free loopback port and forwards to to until t
// ends.
func newProxy(t *testing.T, to string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, to: to, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
	})
	return p
}

// addr is the proxy's host:port.
func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

// forward pipes c to a new connection to p.to, both ways, unless p is cut.
func (p *proxy) forward(c net.Conn) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.to)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	done := func() {
		c.Close()
		up.Close()
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, up)
		p.mu.Unlock()
	}
	go func() { _, _ = io.Copy(up, c); done() }()
	go func() { _, _ = io.Copy(c, up); done() }()
}

// setCut cuts the proxy (every connection through it closed, each new one
// closed at once) or heals it.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}
