package bustest

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// ClusterSize is how many servers [Cluster] starts: enough for R3 buckets
// to keep a quorum with one server stopped.
const ClusterSize = 3

// TestCluster is a three-server JetStream cluster on loopback, started by
// [Cluster] for one test: each server has its own store under t.TempDir,
// a random client port and a fixed cluster port; all are shut down in
// t.Cleanup. Its methods are safe for concurrent use.
type TestCluster struct {
	t    testing.TB
	mu   sync.Mutex
	opts []*server.Options // per server, the options it was last started with
	srvs []*bus.Server     // nil while stopped
}

// Cluster starts three embedded nats-servers with JetStream in one
// cluster ("mesh-test") on 127.0.0.1 and waits (up to 20 s) until a meta
// leader sees all three as peers, so that R3 buckets can be made at once.
func Cluster(t testing.TB) *TestCluster {
	t.Helper()
	ports := freePorts(t, ClusterSize)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	c := &TestCluster{t: t, srvs: make([]*bus.Server, ClusterSize)}
	dir := t.TempDir()
	for i := range ClusterSize {
		o := &server.Options{
			ServerName: fmt.Sprintf("s%d", i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   filepath.Join(dir, fmt.Sprintf("s%d", i+1)),
			NoSigs:     true,
			NoLog:      true,
			MaxPayload: 1 << 20,
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		}
		o.Cluster.Name = "mesh-test"
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = ports[i]
		o.JetStreamLimits.DefaultMaxConsumers = -1
		c.opts = append(c.opts, o)
	}
	t.Cleanup(func() {
		for i := range ClusterSize {
			c.Stop(i)
		}
	})
	for i := range ClusterSize {
		c.start(i)
	}
	c.WaitPeers(20 * time.Second)
	return c
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("bustest: a free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// start starts server i with its options (a clone, as a server must not
// share them) and waits until it takes connections.
func (c *TestCluster) start(i int) {
	c.t.Helper()
	c.mu.Lock()
	o := c.opts[i].Clone()
	c.mu.Unlock()
	s, err := server.NewServer(o)
	if err != nil {
		c.t.Fatalf("bustest: cluster server %d: %v", i+1, err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		c.t.Fatalf("bustest: cluster server %d is not ready after 10s", i+1)
	}
	c.mu.Lock()
	// Started again on the same client port, so that the URLs clients
	// were given find it.
	c.opts[i].Port = s.Addr().(*net.TCPAddr).Port
	c.srvs[i] = &bus.Server{Server: s}
	c.mu.Unlock()
}

// Server returns server i (0, 1 or 2), or nil while it is stopped.
func (c *TestCluster) Server(i int) *bus.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srvs[i]
}

// URL returns the client URLs of the three servers, comma-separated, for
// a connection that fails over between them.
func (c *TestCluster) URL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var urls []string
	for i, o := range c.opts {
		port := o.Port
		if s := c.srvs[i]; s != nil {
			port = s.Addr().(*net.TCPAddr).Port
		}
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", port))
	}
	return strings.Join(urls, ",")
}

// Stop shuts server i down and waits until it has stopped; a stopped
// server is left alone.
func (c *TestCluster) Stop(i int) {
	c.mu.Lock()
	s := c.srvs[i]
	c.srvs[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
	}
}

// Restart starts the stopped server i again on its store directory and
// client port. It fails t when the server is running.
func (c *TestCluster) Restart(i int) {
	c.t.Helper()
	if c.Server(i) != nil {
		c.t.Fatalf("bustest: cluster server %d is running", i+1)
	}
	c.start(i)
}

// StreamLeader returns the index of the server that leads stream (of the
// global account, which a server without accounts uses), or -1 when no
// running server does.
func (c *TestCluster) StreamLeader(stream string) int {
	for i := range ClusterSize {
		if s := c.Server(i); s != nil && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// WaitPeers waits until a running server is the JetStream meta leader and
// sees every running server as a current peer, failing t after d.
func (c *TestCluster) WaitPeers(d time.Duration) {
	c.t.Helper()
	WaitFor(c.t, d, "a JetStream meta leader with every running server as a peer", func() bool {
		running := 0
		for i := range ClusterSize {
			if c.Server(i) != nil {
				running++
			}
		}
		for i := range ClusterSize {
			s := c.Server(i)
			if s != nil && s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) >= running {
				return true
			}
		}
		return false
	})
}

// WaitCurrent waits until server i's replica of stream (of the global
// account) is current with its leader, failing t after d.
func (c *TestCluster) WaitCurrent(i int, stream string, d time.Duration) {
	c.t.Helper()
	WaitFor(c.t, d, fmt.Sprintf("server %d's replica of %s to be current", i+1, stream), func() bool {
		s := c.Server(i)
		return s != nil && s.JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, stream)
	})
}

// Index returns the index of the server named name ("s1", "s2", "s3", as
// nats.Conn.ConnectedServerName says), or -1.
func (c *TestCluster) Index(name string) int {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	return -1
}

// MoveLeader makes server i the leader of stream (of the global account)
// by asking its leader to step down in favour of it, and waits (up to d)
// until it leads; it fails t when it cannot.
func (c *TestCluster) MoveLeader(stream string, i int, d time.Duration) {
	c.t.Helper()
	if c.StreamLeader(stream) == i {
		return
	}
	s := c.Server(i)
	if s == nil {
		c.t.Fatalf("bustest: cluster server %d is stopped", i+1)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		c.t.Fatalf("bustest: %v", err)
	}
	defer nc.Close()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": c.opts[i].ServerName}})
	WaitFor(c.t, d, fmt.Sprintf("server %d to lead %s", i+1, stream), func() bool {
		if c.StreamLeader(stream) == i {
			return true
		}
		// A refused or unanswered request is asked again at the next
		// poll (an election may be under way).
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, req, time.Second)
		return c.StreamLeader(stream) == i
	})
}
