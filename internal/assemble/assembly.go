package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/internal/metrics"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Assembly starts a mesh's components, each on a bus connection of its
// own dialled through Dial. The Start methods dial the component's
// connection, wait for the buckets it awaits ([Component.Awaits]), start
// it and return once it runs; it runs until the ctx given to Start is
// done, then its connection is closed. Set the fields before the first
// Start; the methods are then safe for concurrent use.
type Assembly struct {
	// Dial says how each component connects. Required; [Shared] gives
	// every component the same URL and credentials.
	Dial Dialer
	// Log receives what the assembly and its components say. Nil means
	// slog.Default(). A Dial without its own Log gets this one.
	Log *slog.Logger
	// Replicas is the replica count of the buckets and streams the
	// components make when they are missing (the seat's, the router's
	// records, a provider's entries, the leases): 3 on a three-server NATS
	// cluster. It applies to every Dial that sets none ([bus.Dial.Replicas]).
	// Zero means the server's default, one replica (up's embedded server).
	// A bucket that exists is used as it is.
	Replicas int
	// AwaitMax is the longest wait between two looks for a bucket a
	// component awaits (the first is 100 ms, growing exponentially). Zero
	// means 2 s.
	AwaitMax time.Duration
	// Issues says the process running the assembly issues the mesh's
	// users as the live mesh changes (up): a client's write refused by
	// permissions its new plan needs is then said as waiting for its new
	// user; without it (a standalone deployment) as waiting for the
	// operator to run auth gen and hand the node its new file.
	Issues bool

	running sync.WaitGroup
}

// ErrConfig is wrapped by the error a Start method returns before it dials
// when the component's configuration is not usable: a node that is not a
// valid name, a vault with no store directory, a client with no root, a
// postgres DSN that does not parse.
var ErrConfig = errors.New("assemble: bad configuration")

// ErrNoJetStream is wrapped by the error of [Assembly.Connect] (and of
// every Start method) when the server connected to has no JetStream, which
// holds the mesh's state.
var ErrNoJetStream = errors.New("assemble: the NATS server has no JetStream")

// errUnlinked is wrapped, with [ErrNoJetStream], by the error of a
// connection with a JetStream domain (an edge node's, to its leafnode
// server) that reaches no JetStream in its domain: the leaf's link to the
// mesh's servers is not up yet (they are not running, or cut off). A
// component's start tries again with backoff, as on the bus's transient
// errors ([Assembly.retry]).
var errUnlinked = errors.New("its leafnode server reaches no JetStream in the domain")

// noJetStream is the error of c's connection d that reaches no JetStream
// (see [ErrNoJetStream], errUnlinked).
func noJetStream(c Component, d bus.Dial) error {
	if d.Domain != "" {
		return fmt.Errorf("%s at %s: %w: %w %s yet (is its link to the mesh's servers up?)", c, d.URL, ErrNoJetStream, errUnlinked, d.Domain)
	}
	return fmt.Errorf("%s at %s: %w", c, d.URL, ErrNoJetStream)
}

// Running is a started component. Its methods are safe for concurrent use.
type Running struct {
	Component Component
	conns
	done chan struct{}
	err  error
}

// conns are a component's connections: its user's in the storage account
// (nc, js: its buckets); for a component that answers verbs
// ([Component.Answers]) its user's in the services account (answer); for
// one that asks verbs ([Component.Asks]) its user's in the requests
// account (ask). A verb's answer goes back to the account it was asked
// from: the buckets' account never receives one.
type conns struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	answer *bus.Answerer
	ask    *nats.Conn
}

func (c conns) close() {
	c.nc.Close()
	if c.answer != nil {
		c.answer.Close()
	}
	if c.ask != nil {
		c.ask.Close()
	}
}

// Conn returns the component's own connection and its JetStream context,
// for reading on the component's behalf (as its bus user). They are closed
// once [Running.Done] is.
func (r *Running) Conn() (*nats.Conn, jetstream.JetStream) { return r.nc, r.js }

// Reconnect makes each of the component's connections (its storage
// user's, and its users' in the services and requests accounts) reconnect
// at once, reading its credentials file anew: for a user signed anew
// whose older JWT was not revoked (its limits only grew), which the
// server would otherwise go on holding the connection to. It does not
// block; a closed connection is left as it is.
func (r *Running) Reconnect() {
	all := []*nats.Conn{r.nc, r.ask}
	if r.answer != nil {
		all = append(all, r.answer.Conn)
	}
	for _, nc := range all {
		if nc != nil && !nc.IsClosed() {
			_ = nc.ForceReconnect() // fails only on a closed connection
		}
	}
}

// Done is closed once the component has stopped and its connection is
// closed: after the ctx given to Start is done, or when the component
// ended on its own (a client whose root cannot be made, a seat whose
// buckets cannot be made).
func (r *Running) Done() <-chan struct{} { return r.done }

// Err returns why the component stopped: nil while it runs and when it
// stopped because its ctx was done.
func (r *Running) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Wait blocks until every component this assembly started has stopped
// and closed its connection. Call it after cancelling their ctx, before
// stopping the server they talk to.
func (a *Assembly) Wait() { a.running.Wait() }

func (a *Assembly) log() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}

// Connect dials c's own connection as a.Dial says, filling in c's name and
// the assembly's logger where the Dial leaves them empty. The caller closes
// the connection. It returns the error of [bus.Connect] (wrapping
// nats.ErrNoServers when no server answers), or one wrapping
// [ErrNoJetStream].
func (a *Assembly) Connect(c Component) (*nats.Conn, jetstream.JetStream, error) {
	d, err := a.dial(c)
	if err != nil {
		return nil, nil, err
	}
	nc, js, err := bus.Connect(d)
	if err != nil {
		return nil, nil, err
	}
	if !bus.HasJetStream(nc, d) {
		nc.Close()
		return nil, nil, noJetStream(c, d)
	}
	return nc, js, nil
}

// dial returns how c dials, with c's name, the assembly's logger and
// replicas where a.Dial leaves them empty, and for a client an OnRefused
// that says a refused write of its own node's records at info level
// ([ownWrites]). It returns an error wrapping
// [ErrConfig] when the Dial's credentials are another party's than c's
// ([Component.User]): a component never runs as another.
func (a *Assembly) dial(c Component) (bus.Dial, error) {
	if a.Dial == nil {
		return bus.Dial{}, fmt.Errorf("assemble: %s: no Dialer", c)
	}
	d := a.Dial(c)
	if d.Name == "" {
		d.Name = c.Name()
	}
	if d.Log == nil {
		d.Log = a.log()
	}
	if d.Replicas == 0 {
		d.Replicas = a.Replicas
	}
	if c.Role == Client && d.OnRefused == nil {
		d.OnRefused = ownWrites(d.Log, d.Name, c.Node, a.Issues)
	}
	if d.Creds != "" {
		if err := c.CheckUser(bus.CredsUser(d.Creds)); err != nil {
			return bus.Dial{}, fmt.Errorf("%w: %s: the credentials %s: %w", ErrConfig, c, d.Creds, err)
		}
	}
	return d, nil
}

// ConnectIn dials c's user in account acc ([bus.ConnectIn]): the
// operator's in the requests account, for the verbs it asks. The caller
// closes the connection.
func (a *Assembly) ConnectIn(c Component, acc access.Account) (*nats.Conn, error) {
	d, err := a.dial(c)
	if err != nil {
		return nil, err
	}
	return bus.ConnectIn(d, acc)
}

// connect dials c's connections ([conns]), each calling removed (with
// the Dial's own OnRemoved) when its access to the mesh is removed.
func (a *Assembly) connect(c Component, removed func(error)) (conns, error) {
	d, err := a.dial(c)
	if err != nil {
		return conns{}, err
	}
	if own := d.OnRemoved; removed != nil {
		d.OnRemoved = func(err error) {
			if own != nil {
				own(err)
			}
			removed(err)
		}
	}
	nc, js, err := bus.Connect(d)
	if err != nil {
		return conns{}, err
	}
	if !bus.HasJetStream(nc, d) {
		nc.Close()
		return conns{}, noJetStream(c, d)
	}
	cs := conns{nc: nc, js: js}
	if c.Answers() {
		if cs.answer, err = bus.ConnectAnswerer(d); err != nil {
			cs.close()
			return conns{}, err
		}
	}
	if c.Asks() {
		if cs.ask, err = bus.ConnectIn(d, access.Requests); err != nil {
			cs.close()
			return conns{}, err
		}
	}
	return cs, nil
}

// start dials c, waits for the buckets it awaits, and calls begin on the
// start dials c, waits for the buckets it awaits, and calls begin on the
// connection with the component's ctx: done when ctx is, or when the
// component's access to the mesh was removed (its user revoked and a
// reconnect refused, or its credentials file gone: bus.Dial.OnRemoved),
// which then stops it with an error wrapping [bus.ErrAccessRemoved]
// ([Running.Err]). begin starts the component and returns a function
// that runs until the component stops (nil: it runs until its ctx is
// done). The connection is closed once the component has stopped. A try
// that meets an error the bus gives while it recovers ([bus.Transient]: no
// server yet, no JetStream leader, a request that timed out; for a
// connection with a JetStream domain, a leafnode server not yet linked to
// the mesh's servers) is undone
// (its ctx ended, its connections closed) and tried again with backoff
// ([StartRetryFirst] doubling to [StartRetryMost]) until ctx is done, each
// change of why said once in the log; any other error (bad credentials, a
// refusal, a bad configuration) is returned at once.
func (a *Assembly) start(ctx context.Context, c Component, begin func(ctx context.Context, cs conns) (func() error, error)) (*Running, error) {
	switch c.Role {
	case Vault, Postgres, Client:
		if !mesh.ValidName(c.Node) {
			return nil, fmt.Errorf("%w: %s: node %q is not a valid name", ErrConfig, c.Role, c.Node)
		}
	}
	var r *Running
	err := a.retry(ctx, c, func() error {
		var err error
		r, err = a.try(ctx, c, begin)
		return err
	})
	return r, err
}

// Backoff of a start the bus did not answer ([bus.Transient]): the first
// try again after about StartRetryFirst, each further one after twice the
// wait before, at most StartRetryMost, with a random jitter.
const (
	StartRetryFirst = 250 * time.Millisecond
	StartRetryMost  = 5 * time.Second
)

// retry calls try until it returns nil or an error that is not
// [bus.Transient] (nor a leafnode server's link not up yet: errUnlinked), waiting with backoff between tries, and saying in the
// log (as c's) each change of why it tries again: at warn level once, at
// debug level while the why stays the same. It returns try's last error;
// when ctx ends first, an error wrapping ctx's error and naming the last
// why.
func (a *Assembly) retry(ctx context.Context, c Component, try func() error) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = StartRetryFirst
	bo.MaxInterval = StartRetryMost
	log := a.log()
	said := ""
	for {
		err := try()
		if err == nil {
			if said != "" {
				log.Info("assemble: started once the bus answered", "component", c.String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("assemble: %s: %w (the last try: %w)", c, ctx.Err(), err)
		}
		if !bus.Transient(err) && !errors.Is(err, errUnlinked) {
			return err
		}
		wait := bo.NextBackOff()
		level := slog.LevelWarn
		if err.Error() == said {
			level = slog.LevelDebug
		}
		said = err.Error()
		log.Log(ctx, level, "assemble: the bus does not answer yet; trying the start again", "component", c.String(), "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return fmt.Errorf("assemble: %s: %w (the last try: %w)", c, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// try is one try of start: what it began is undone when it fails.
func (a *Assembly) try(ctx context.Context, c Component, begin func(ctx context.Context, cs conns) (func() error, error)) (*Running, error) {
	// A component whose access to the mesh is removed (its user revoked,
	// its credentials file gone) stops, its error saying so, rather than
	// reconnect for ever with credentials the server refuses.
	ctx, removed := context.WithCancelCause(ctx)
	cs, err := a.connect(c, func(err error) { removed(err) })
	if err != nil {
		removed(nil)
		return nil, err
	}
	awaits := c.Awaits()
	if d, _ := a.dial(c); d.Creds != "" && c.Role == Client {
		// Under the mesh's users a client may not make its lease
		// bucket: the seat makes it.
		awaits = append(awaits, mesh.ClientsBucket)
	}
	if err := a.await(ctx, c, awaits, cs.js); err != nil {
		cs.close()
		removed(nil)
		return nil, err
	}
	run, err := begin(ctx, cs)
	if err != nil {
		cs.close()
		removed(nil)
		return nil, err
	}
	r := &Running{Component: c, conns: cs, done: make(chan struct{})}
	a.running.Add(1)
	go func() {
		defer a.running.Done()
		defer close(r.done)
		if run != nil {
			r.err = run()
		} else {
			<-ctx.Done()
		}
		cs.close()
		if cause := context.Cause(ctx); errors.Is(cause, bus.ErrAccessRemoved) {
			r.err = fmt.Errorf("assemble: %s stopped: %w", c, cause)
		} else if ctx.Err() != nil && (r.err == nil || errors.Is(r.err, context.Canceled)) {
			r.err = nil
			return
		}
		if r.err == nil {
			r.err = fmt.Errorf("assemble: %s stopped", c)
		}
		a.log().Error("assemble: a component stopped", "component", c.String(), "err", r.err)
	}()
	return r, nil
}

// await waits until every bucket of buckets (what c awaits) exists, looking again with
// exponential backoff (100 ms up to AwaitMax) and saying each wait in the
// log. It returns ctx's error when ctx ends first.
func (a *Assembly) await(ctx context.Context, c Component, buckets []string, js jetstream.JetStream) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = a.AwaitMax
	if bo.MaxInterval <= 0 {
		bo.MaxInterval = 2 * time.Second
	}
	log := a.log()
	for _, b := range buckets {
		waited := false
		said := "" // the last reason said above debug level: once per change, not per look
		for {
			_, err := js.KeyValue(ctx, b)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("assemble: %s: waiting for bucket %s: %w", c, b, ctx.Err())
			}
			wait := bo.NextBackOff()
			level, msg, args := slog.LevelInfo, "assemble: waiting for a bucket the seat makes", []any{"component", c.String(), "bucket", b, "retry_in", wait}
			reason := "missing"
			if !errors.Is(err, jetstream.ErrBucketNotFound) {
				level, msg, reason = slog.LevelWarn, "assemble: cannot look up a bucket; looking again", err.Error()
				args = append(args, "err", err)
			}
			if reason == said {
				level = slog.LevelDebug
			}
			said = reason
			log.Log(ctx, level, msg, args...)
			waited = true
			select {
			case <-ctx.Done():
				return fmt.Errorf("assemble: %s: waiting for bucket %s: %w", c, b, ctx.Err())
			case <-time.After(wait):
			}
		}
		if waited {
			log.Info("assemble: bucket found", "component", c.String(), "bucket", b)
		}
	}
	return nil
}

// StartRouter starts the ask router ([asks.Start]) on its own connection,
// once mesh-asks_records exists.
func (a *Assembly) StartRouter(ctx context.Context) (*Running, error) {
	return a.start(ctx, Component{Role: Router}, func(ctx context.Context, cs conns) (func() error, error) {
		_, err := asks.StartAnswering(ctx, cs.answer, cs.js, a.log())
		return nil, err
	})
}

// StartVault starts mesh-vault on cfg.Node ([vault.Start]) with its store
// in cfg.Dir, on its own connection, once the plans and provisions buckets
// and mesh-vault_bound exist.
func (a *Assembly) StartVault(ctx context.Context, cfg vault.Config) (*Running, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: vault on %s: no store directory", ErrConfig, cfg.Node)
	}
	return a.start(ctx, Component{Role: Vault, Node: cfg.Node}, func(ctx context.Context, cs conns) (func() error, error) {
		cfg.Answer = cs.answer
		v, err := vault.Start(ctx, cfg, cs.nc, cs.js, a.log())
		if err != nil {
			return nil, err
		}
		// Its connection closes once it has handed on: its entries
		// written, its store closed.
		return func() error { <-v.Done(); return nil }, nil
	})
}

// StartPostgres starts the postgres provider on cfg.Node
// ([pgprovider.Start]) on its own connection, once the provisions bucket
// and postgres_bound exist. It returns an error for a DSN that does not parse; an
// unreachable PostgreSQL server is not an error (its keys wait).
func (a *Assembly) StartPostgres(ctx context.Context, cfg pgprovider.Config) (*Running, error) {
	if _, err := pgx.ParseConfig(cfg.DSN); err != nil {
		return nil, fmt.Errorf("%w: postgres on %s: DSN: %v", ErrConfig, cfg.Node, err)
	}
	return a.start(ctx, Component{Role: Postgres, Node: cfg.Node}, func(ctx context.Context, cs conns) (func() error, error) {
		cfg.Ask = cs.ask
		p, err := pgprovider.Start(ctx, cfg, cs.nc, cs.js, a.log())
		if err != nil {
			return nil, err
		}
		// Its connection closes once it has handed on its work (the
		// provides in hand ended, their entries written).
		return func() error { <-p.Done(); return nil }, nil
	})
}

// StartClient starts cfg.Node's client ([client.New], [client.Client.Run])
// on its own connection, once the plans, registry, applied and collect
// buckets exist. The
// assembly sets cfg's connection (JS, NC) and, when unset, its Log. It
// returns the client, to read its root and readiness, or an error wrapping
// [client.ErrConfig] for a bad cfg.
func (a *Assembly) StartClient(ctx context.Context, cfg client.Config) (*Running, *client.Client, error) {
	if cfg.Root == "" {
		return nil, nil, fmt.Errorf("%w: client of %s: no root folder", ErrConfig, cfg.Node)
	}
	if cfg.Log == nil {
		cfg.Log = a.log()
	}
	var c *client.Client
	r, err := a.start(ctx, Component{Role: Client, Node: cfg.Node}, func(ctx context.Context, cs conns) (func() error, error) {
		cfg.NC, cfg.JS = cs.nc, cs.js
		if cs.ask != nil {
			// It asks the vault's verbs (to render) as its user in
			// the requests account.
			cfg.NC = cs.ask
		}
		var err error
		c, err = client.New(cfg)
		if err != nil {
			return nil, err
		}
		return func() error { return c.Run(ctx) }, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return r, c, nil
}

// healthWait is how long [Running.Health] waits for JetStream's answer.
const healthWait = 2 * time.Second

// Health returns the component's health check (for /healthz): healthy
// while it runs, its connection is up, and JetStream answers, within 2 s
// each, the account's info (which the cluster's meta leader gives) and a
// look at the first bucket the component follows ([Component.Awaits]). A
// server cut off from the cluster (a partition) keeps the connection up
// but answers neither: the check then says so instead of "running".
func (r *Running) Health() metrics.Check {
	return func() (bool, string) {
		select {
		case <-r.done:
			return false, fmt.Sprintf("%s stopped: %v", r.Component, r.err)
		default:
		}
		if !r.nc.IsConnected() {
			return false, "not connected to the bus (" + r.nc.Status().String() + ")"
		}
		awaits := r.Component.Awaits()
		if len(awaits) == 0 {
			return true, "connected to " + r.nc.ConnectedUrlRedacted()
		}
		ctx, cancel := context.WithTimeout(context.Background(), healthWait)
		defer cancel()
		if _, err := r.js.AccountInfo(ctx); err != nil {
			return false, fmt.Sprintf("connected to %s, but JetStream does not answer: %v", r.nc.ConnectedUrlRedacted(), err)
		}
		if _, err := r.js.KeyValue(ctx, awaits[0]); err != nil {
			return false, fmt.Sprintf("connected to %s, but JetStream does not answer for %s: %v", r.nc.ConnectedUrlRedacted(), awaits[0], err)
		}
		return true, "connected to " + r.nc.ConnectedUrlRedacted() + ", " + awaits[0] + " answers"
	}
}
