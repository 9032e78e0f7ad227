package bus

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerConfig configures an embedded nats-server with JetStream.
type ServerConfig struct {
	// Dir is the JetStream store directory. It must not be empty: the server
	// would otherwise silently use the system's temp folder.
	Dir string
	// Listen is host:port for clients. Port 0 picks a free port (the server
	// itself would read 0 as 4222). Empty means "127.0.0.1:4222".
	Listen string
	// Config is optional nats-server configuration text (accounts, users,
	// permissions, max_payload), applied before the fields above. The max
	// payload is 1 MiB unless it sets another.
	Config string
	// ConfigFile is an optional nats-server configuration file, such as
	// the one "auth gen" writes (operator, accounts, users' permissions);
	// it is read before the fields above, which override its listen address
	// and store directory. It and Config are exclusive.
	ConfigFile string
	// SyncAlways makes the store fsync every write: slower, but nothing is
	// lost when the machine stops.
	SyncAlways bool
	// NoJetStream starts a server without JetStream, as a bare nats-server
	// runs: only for tests of how the tools tell such a server.
	NoJetStream bool
	// MinStore is the JetStream max store, in bytes, the server must at
	// least have: what the buckets made on it reserve
	// ([access.StoreReserved]). When the configuration sets no
	// max_file_store and the server's own choice (75% of the disk's free
	// space) is smaller, the max store is MinStore, though the disk be
	// smaller: a stream is then made, and a full disk refuses writes
	// later, rather than a bucket be refused now. Zero leaves the
	// server's choice.
	MinStore int64
}

// Server is a running embedded nats-server. Stop it with [Server.Shutdown].
type Server struct {
	*server.Server
}

// ErrNoDir is returned by [StartServer] when ServerConfig.Dir is empty.
var ErrNoDir = errors.New("bus: the JetStream store directory is not set")

// ErrAddressInUse is returned (wrapped, naming the address) by
// [StartServer] when the listen address is taken by another process.
var ErrAddressInUse = errors.New("address in use")

// StartServer starts an embedded nats-server with JetStream and waits up to
// 10 s until it accepts connections. It returns [ErrNoDir] without a store
// directory; an error wrapping [ErrAddressInUse] and naming the address,
// at once, when something else already listens on a fixed port; or an
// error naming the address when the server cannot listen or does not
// become ready.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.Dir == "" {
		return nil, ErrNoDir
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("bus: store directory: %w", err)
	}
	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("bus: listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("bus: listen address %q: bad port", listen)
	}
	if port == 0 {
		port = -1 // nats-server reads 0 as its default port 4222
	} else if err := checkListen(listen); err != nil {
		return nil, err
	}
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		if cfg.Config != "" {
			return nil, fmt.Errorf("bus: both a configuration file and configuration text are given")
		}
		fo, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("bus: server configuration: %w", err)
		}
		opts = fo
	}
	if cfg.Config != "" {
		if err := opts.ProcessConfigString(cfg.Config); err != nil {
			return nil, fmt.Errorf("bus: server configuration: %w", err)
		}
	}
	if cfg.MinStore > 0 && opts.JetStreamMaxStore <= 0 {
		// What nats-server picks when nothing is set (it adds back 75% of
		// what its streams hold once they are recovered).
		if free := diskFree(cfg.Dir); free >= 0 && free/4*3 < cfg.MinStore {
			opts.JetStreamMaxStore = cfg.MinStore
		}
	}
	opts.ServerName = "mesh-provisioner"
	opts.Host = host
	opts.Port = port
	opts.JetStream = !cfg.NoJetStream
	opts.StoreDir = cfg.Dir
	opts.SyncAlways = cfg.SyncAlways
	opts.NoSigs = true
	opts.NoLog = true
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 1 << 20 // unless the configuration text says otherwise
	}
	// Every node's client watches the plans, applied, collect and registry
	// buckets: a mesh of a thousand nodes on one machine passes the
	// server's default of 1,000 consumers per stream.
	opts.JetStreamLimits.DefaultMaxConsumers = -1
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("bus: embedded server on %s is not ready after 10s (is the port in use?)", listen)
	}
	return &Server{Server: s}, nil
}

// checkListen listens on listen (host:port, a fixed port) and closes the
// listener: the embedded server would otherwise retry a taken address and
// fail only after its 10 s wait.
func checkListen(listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("bus: cannot listen on %s: %w (another process, perhaps another up or nats-server, holds it): %w", listen, ErrAddressInUse, err)
		}
		return fmt.Errorf("bus: cannot listen on %s: %w", listen, err)
	}
	if err := ln.Close(); err != nil {
		return fmt.Errorf("bus: listen address %s: %w", listen, err)
	}
	return nil
}

// Store says the server's JetStream store: its max store (what streams'
// bounds may reserve, in bytes; 0 without JetStream), what its streams
// reserve now, and the free space of the store directory's disk (-1 when
// it cannot be read).
type Store struct {
	MaxStore, Reserved, Used, Free int64
}

// Store returns what [Store] says of s's JetStream store.
func (s *Server) Store() Store {
	st := Store{Free: -1}
	if c := s.JetStreamConfig(); c != nil {
		st.MaxStore = c.MaxStore
		st.Free = diskFree(c.StoreDir)
	}
	if z, err := s.Jsz(&server.JSzOptions{}); err == nil {
		st.Reserved, st.Used = int64(z.ReservedStore), int64(z.Store)
	}
	return st
}

// URL returns the nats:// URL clients connect to.
func (s *Server) URL() string { return s.ClientURL() }

// Shutdown stops the server and waits until it has stopped.
func (s *Server) Shutdown() {
	s.Server.Shutdown()
	s.Server.WaitForShutdown()
}
