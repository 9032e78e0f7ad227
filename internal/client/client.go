// Package client is a node's client (spec 8): it follows its node's plans
// in mesh-provisioner_plans (keys <node>.>) and applies each one on the
// machine, under the node's root folder:
//
//   - each directory of the module is made at <root>/<module>/<dir>;
//   - each port gets a free number in [Config.Ports], kept in the applied
//     record and read back at start, so that it stays the same across
//     restarts and plan changes;
//   - in a directory whose unknown is "sweep", every file the client did
//     not write (see [Client.Write]) is moved to the quarantine folder
//     beside the root, <root>.quarantine/<module>/<dir>/<path>, and listed
//     in the record's swept; nothing is ever deleted. A "program" directory
//     is never touched. A sweep runs whenever the plan is applied: at start
//     and at each change of the plan;
//   - the record {"fp","dirs","ports","swept","at"} is written at
//     <node>.<module> in mesh-provisioner_applied, only when something but
//     at changes;
//   - each contribution is written at <node>.<collection>.<contributor> in
//     mesh-provisioner_collect (escaped tokens; the contributor is the
//     module), value [mesh.CollectItem]; several items of one module to one
//     collection are joined, one a line, in one key.
//
// When a module's plan is gone, its applied record and its contributions
// are deleted; its directories and their data stay. When another writer
// changes or deletes the client's keys (or their bucket is deleted, or the
// server comes back on an empty store), the module is applied again and its
// keys written anew; a bucket the client writes is made again when gone.
//
// [Client.Render] resolves a module's configuration template through the
// registry (mesh-provisioner_registry) and says every placeholder it cannot
// resolve; [Render] is its pure step.
//
// Ports are distinct per node: two clients of different nodes on one
// machine (the single-machine default) should be given ranges of their own
// ([Config.Ports]) if their modules are to listen for real.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// PortRange is the range of port numbers a client assigns, both ends
// included.
type PortRange struct {
	Low, High int
}

// DefaultPorts is the range used when [Config.Ports] is zero.
var DefaultPorts = PortRange{Low: 20000, High: 29999}

// VerbFunc asks a verb (a subject on request and reply) for the value of
// one placeholder name for module on node, for example a secret of the
// vault.
type VerbFunc func(ctx context.Context, subject, node, module, name string) (string, error)

// Config configures a node's [Client].
type Config struct {
	// Node is the node's name.
	Node string
	// Root is the node's root folder; the quarantine folder is beside it
	// (Root + ".quarantine"). A relative path is taken from the working
	// directory.
	Root string
	// JS is the client's own bus connection (bus.Connect named
	// "client-<node>"), connected as the node's user.
	JS jetstream.JetStream
	// NC is the same connection.
	NC *nats.Conn
	// Ask is the connection verbs are asked on while rendering: the
	// client's user in the requests account. Nil means NC (a server
	// without accounts); both nil leave verbs unasked unless Verbs answers
	// them.
	Ask *nats.Conn
	// Verbs answers verbs by subject while rendering (for example
	// "mesh-vault.secret"); a subject not in it is asked through NC with
	// [AskVault].
	Verbs map[string]VerbFunc
	// Ports is the range of port numbers to assign; zero means
	// [DefaultPorts].
	Ports PortRange
	// Log says each plan that cannot be applied and each change made.
	// Nil means slog.Default().
	Log *slog.Logger
	// Now returns the time written as an applied record's at. Nil means
	// time.Now.
	Now func() time.Time
	// ReadOnly makes the client follow the buckets and render, but apply
	// nothing: no folders, no sweep, no writes. It lets a second process
	// (the "render" command) render while the node's client runs.
	ReadOnly bool
	// Reload lets the client run the plans' reload commands (a manifest's
	// reload, see [mesh.Template]) with its own rights on the machine:
	// whoever may write a module's manifest (the operator's mesh file)
	// then decides a command the node runs. False renders the templates
	// and says in the applied record's problems that the reload was not
	// run.
	Reload bool
}

// Client is one node's client. Create it with [New] and run it with
// [Client.Run]. Its methods are safe for concurrent use.
type Client struct {
	cfg        Config
	root       string
	quarantine string
	log        *slog.Logger

	plans, applied, collect, registry *bus.Copy
	ready                             chan struct{}

	// The node's provisions and the vault's entries of its credentials
	// (keys <node>.>), followed from the first plan with templates on: a
	// change re-renders the templated module it is of (see templated).
	follow      sync.Once
	runCtx      context.Context
	provisions  *bus.Copy
	vaultBound  *bus.Copy
	templatedMu sync.Mutex
	templated   map[string]bool

	retry retry // modules whose apply failed, marked again after a backoff

	mu      sync.Mutex
	dirty   map[string]bool // modules to apply
	wake    chan struct{}
	written *written
	// id names this client in its node's lease; held says whether it
	// holds the lease (it applies nothing otherwise).
	id   string
	held atomic.Bool
	// fs is the folder holding the root and the quarantine folder, opened
	// as an [os.Root]: every folder and file the client makes, reads or
	// moves is reached through it, so that no symlink leads it outside.
	fs *os.Root
}

// ErrConfig is wrapped by the error [New] returns for a bad [Config].
var ErrConfig = errors.New("client: bad configuration")

// New checks cfg and returns a client that is not running yet. It returns
// an error wrapping [ErrConfig] when the node is not a valid name, there
// is no root or no bus connection, or the port range is empty.
func New(cfg Config) (*Client, error) {
	if !mesh.ValidName(cfg.Node) {
		return nil, fmt.Errorf("%w: node %q is not a valid name", ErrConfig, cfg.Node)
	}
	if cfg.Root == "" {
		return nil, fmt.Errorf("%w: node %s has no root folder", ErrConfig, cfg.Node)
	}
	if cfg.JS == nil {
		return nil, fmt.Errorf("%w: node %s has no bus connection", ErrConfig, cfg.Node)
	}
	if cfg.Ports == (PortRange{}) {
		cfg.Ports = DefaultPorts
	}
	if cfg.Ports.Low < 1 || cfg.Ports.High > 65535 || cfg.Ports.Low > cfg.Ports.High {
		return nil, fmt.Errorf("%w: port range %d-%d", ErrConfig, cfg.Ports.Low, cfg.Ports.High)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("%w: root %s: %v", ErrConfig, cfg.Root, err)
	}
	return &Client{
		cfg:        cfg,
		root:       root,
		quarantine: root + ".quarantine",
		log:        cfg.Log.With("node", cfg.Node),
		ready:      make(chan struct{}),
		dirty:      map[string]bool{},
		wake:       make(chan struct{}, 1),
		id:         leaseID(cfg.Node, root),
		templated:  map[string]bool{},
	}, nil
}

// Root returns the node's root folder, absolute.
func (c *Client) Root() string { return c.root }

// Quarantine returns the folder beside the root into which swept files
// are moved.
func (c *Client) Quarantine() string { return c.quarantine }

// Ready is closed once the client has applied every plan of its node that
// was there when it started, and removed what is left of modules whose
// plan is gone.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Run takes the node's lease (key <node> in mesh-provisioner_clients, see
// [LeaseTTL]), waiting while another client of the node holds it (said in
// the log), so that two clients never both write the node's keys. It then
// follows the node's plans, applied records and contributions (keys
// <node>.>) and the registry, applies every plan, then applies each change
// until ctx is done, and gives the lease back. A lease it cannot renew
// stops its applying (said) until it holds the lease again. It returns
// ctx's error, or an error when the root folder or the record of written
// files cannot be made or read. Failures of one plan are logged and do not
// stop it. A ReadOnly client takes no lease.
func (c *Client) Run(ctx context.Context) error {
	if !c.cfg.ReadOnly {
		w, err := loadWritten(c.root)
		if err != nil {
			return err
		}
		defer w.root.Close()
		c.mu.Lock()
		c.written = w
		c.mu.Unlock()
		l, err := c.acquire(ctx)
		if err != nil {
			return err
		}
		c.held.Store(true)
		kctx, stop := context.WithCancel(ctx)
		kept := make(chan struct{})
		go func() {
			defer close(kept)
			c.keep(kctx, l)
		}()
		defer func() { // gives the lease back before Run returns
			stop()
			<-kept
		}()
	}
	filter := c.cfg.Node + ".>"
	c.runCtx = ctx
	// A change of the client's own keys by anyone else (a delete, its
	// bucket deleted or made anew, a server back on an empty store) applies
	// the module again, so that its keys say what the client applied.
	c.applied = bus.Follow(ctx, c.cfg.JS, mesh.AppliedBucket, bus.Options{Create: !c.cfg.ReadOnly, Writes: !c.cfg.ReadOnly, Filter: filter, Log: c.log,
		OnChange: func(ch bus.Change) {
			if k, err := mesh.ParseNodeModule(ch.Key); err == nil && !c.cfg.ReadOnly {
				c.mark(k.Module)
			}
		}})
	c.collect = bus.Follow(ctx, c.cfg.JS, mesh.CollectBucket, bus.Options{Create: !c.cfg.ReadOnly, Writes: !c.cfg.ReadOnly, Filter: filter, Log: c.log,
		OnChange: func(ch bus.Change) {
			if k, err := mesh.ParseCollectKey(ch.Key); err == nil && mesh.ValidName(k.Contributor) && !c.cfg.ReadOnly {
				c.mark(k.Contributor)
			}
		}})
	c.registry = bus.Follow(ctx, c.cfg.JS, mesh.RegistryBucket, bus.Options{Log: c.log})
	c.plans = bus.Follow(ctx, c.cfg.JS, mesh.PlansBucket, bus.Options{Filter: filter, Log: c.log,
		OnChange: func(ch bus.Change) {
			if c.cfg.ReadOnly {
				return
			}
			k, err := mesh.ParseNodeModule(ch.Key)
			if err != nil {
				c.log.Warn("client: plan key out of shape; left alone", "bucket", mesh.PlansBucket, "key", ch.Key, "err", err)
				return
			}
			c.mark(k.Module)
		}})
	for _, cp := range []*bus.Copy{c.applied, c.collect, c.plans, c.registry} {
		select {
		case <-cp.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if c.cfg.ReadOnly {
		close(c.ready)
		<-ctx.Done()
		return ctx.Err()
	}
	for _, cp := range []*bus.Copy{c.applied, c.collect} {
		if _, err := cp.KV(ctx); err != nil {
			return err
		}
	}
	for _, m := range c.modules() {
		c.mark(m)
	}
	c.work(ctx)
	close(c.ready)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wake:
			c.work(ctx)
		}
	}
}

// followTemplated starts following the node's provisions and the vault's
// entries of its credentials (once), for the modules with templates: a
// change of a key of such a module (its second token) marks it, to be
// rendered again (a credential rotated) and reloaded once its providers
// hold what it rendered.
func (c *Client) followTemplated() {
	c.follow.Do(func() {
		filter := c.cfg.Node + ".>"
		onChange := func(ch bus.Change) {
			_, rest, _ := strings.Cut(ch.Key, ".")
			module, _, _ := strings.Cut(rest, ".")
			c.templatedMu.Lock()
			t := c.templated[module]
			c.templatedMu.Unlock()
			if t {
				c.mark(module)
			}
		}
		c.provisions = bus.Follow(c.runCtx, c.cfg.JS, mesh.ProvisionsBucket, bus.Options{Filter: filter, Log: c.log, OnChange: onChange})
		c.vaultBound = bus.Follow(c.runCtx, c.cfg.JS, mesh.BoundBucket(mesh.VaultModule), bus.Options{Filter: filter, Log: c.log, OnChange: onChange, RevisionsOnly: true})
	})
}

// modules returns every module that has a plan, an applied record or a
// contribution on the node.
func (c *Client) modules() []string {
	set := map[string]bool{}
	for _, cp := range []*bus.Copy{c.plans, c.applied} {
		cp.Range(func(key string, _ bus.Item) bool {
			if k, err := mesh.ParseNodeModule(key); err == nil {
				set[k.Module] = true
			}
			return true
		})
	}
	c.collect.Range(func(key string, _ bus.Item) bool {
		if k, err := mesh.ParseCollectKey(key); err == nil && mesh.ValidName(k.Contributor) {
			set[k.Contributor] = true
		}
		return true
	})
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	return out
}

// mark asks for module to be applied; changes that arrive meanwhile are
// coalesced.
func (c *Client) mark(module string) {
	c.mu.Lock()
	c.dirty[module] = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// work applies every marked module until none is left, or until the
// client no longer holds its node's lease. A module whose apply failed is
// marked again after a backoff (see retry).
func (c *Client) work(ctx context.Context) {
	failed := false
	defer func() {
		if !failed {
			c.retry.applied()
		}
	}()
	for ctx.Err() == nil && c.held.Load() {
		c.mu.Lock()
		var next string
		for m := range c.dirty {
			next = m
			break
		}
		delete(c.dirty, next)
		c.mu.Unlock()
		if next == "" {
			return
		}
		if err := c.apply(ctx, next); err != nil && ctx.Err() == nil {
			failed = true
			// A write the bus did not take in time (a server away, or a
			// write refused while the client's user is issued anew for
			// its new plan: the connection says that) is a fault it
			// recovers from; anything else is an error.
			level := slog.LevelError
			if bus.Transient(err) {
				level = slog.LevelWarn
			}
			if wait := c.retry.fail(next, c.mark); wait > 0 {
				c.log.Log(ctx, level, "client: apply; applied again later", "module", next, "err", err, "retry_in", wait)
			} else {
				c.log.Log(ctx, level, "client: apply; applied again later", "module", next, "err", err)
			}
		}
	}
}
