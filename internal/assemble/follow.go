package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// FollowConfig configures [Assembly.Follow]: which components run for the
// live mesh, where they keep their files, and who issues their users.
type FollowConfig struct {
	// Runs says whether node clients and the postgres provider run.
	Runs Runs
	// ClientRoot returns the root folder of node's client. Required with
	// Runs.Clients.
	ClientRoot func(node string) string
	// VaultDir returns the store directory of mesh-vault on node.
	// Required.
	VaultDir func(node string) string
	// Postgres is the postgres provider's configuration, its Node left
	// empty (each provider gets the node it is placed on). Used with
	// Runs.Postgres.
	Postgres pgprovider.Config
	// Users, if set, issues the users of the live mesh before a component
	// starts, and revokes those of parties that left once their
	// components have stopped. Nil means the components dial as the
	// assembly's Dial says with no users to issue (a server without
	// users).
	Users Users
	// Said, if set, is called with every component started or stopped
	// and every start that failed, on the follower's goroutine: it must
	// not block long.
	Said func(Event)
	// HandOver is the longest the client of a node that left the mesh
	// runs on, to remove its records once the seat has removed the node's
	// plans, before it is stopped. Zero means 30 s.
	HandOver time.Duration
}

// Event is one change of what a [Follower] runs.
type Event struct {
	Component Component
	// Started says the component started (else it stopped, or failed to
	// start when Err is set).
	Started bool
	// Why says why it started or stopped ("placed on control", "its node
	// left the mesh", "its credentials changed").
	Why string
	// Err is why a start failed, or why a component stopped on its own.
	Err error
}

// String returns the event as up prints it: "started vault on control
// (mesh-vault placed on control)".
func (e Event) String() string {
	switch {
	case e.Err != nil && e.Started:
		return fmt.Sprintf("could not start %s (%s): %v", e.Component, e.Why, e.Err)
	case e.Err != nil:
		return fmt.Sprintf("%s stopped: %v", e.Component, e.Err)
	case e.Started:
		return fmt.Sprintf("started %s (%s)", e.Component, e.Why)
	}
	return fmt.Sprintf("stopped %s (%s)", e.Component, e.Why)
}

// Follower runs the components of the live mesh ([Wanted] of the
// placement, modules and manifests on the bus) and follows its changes:
// a component starts when its module or node appears in the placement,
// starts again on new credentials when its user's permissions change, and
// stops when it leaves (a node's client once it has removed its records,
// see [FollowConfig.HandOver]); users are issued before their components
// start and revoked once they have stopped. Its methods are safe for
// concurrent use.
type Follower struct {
	a   *Assembly
	js  jetstream.JetStream
	cfg FollowConfig
	log *slog.Logger

	wake chan struct{}

	mu      sync.Mutex
	live    *live
	running map[Component]*follows
	issued  *access.Mesh // the mesh whose users were last issued
}

// follows is one component the follower runs.
type follows struct {
	r      *Running
	stop   context.CancelFunc
	ending bool // a client handing over: stopped once its records are gone
	halted bool // stopped by the follower (not on its own)
}

// Follow starts following the live mesh through js (the operator's
// connection: it reads the placement, modules and manifests buckets, makes
// a provider's bound bucket before the provider starts, and reads a
// leaving node's records): it waits until the three buckets' copies hold
// their keys, starts the components the mesh wants, and returns; it
// follows until ctx is done, then stops every component it runs
// ([Assembly.Wait] waits for the follower too). A start
// that fails is said (Said, the log) and tried again with backoff.
func (a *Assembly) Follow(ctx context.Context, js jetstream.JetStream, cfg FollowConfig) (*Follower, error) {
	if cfg.VaultDir == nil || cfg.Runs.Clients && cfg.ClientRoot == nil {
		return nil, fmt.Errorf("%w: follow: no VaultDir, or clients and no ClientRoot", ErrConfig)
	}
	if cfg.HandOver <= 0 {
		cfg.HandOver = 30 * time.Second
	}
	f := &Follower{a: a, js: js, cfg: cfg, log: a.log(), wake: make(chan struct{}, 1),
		live: newLive(), running: map[Component]*follows{}}
	var copies []*bus.Copy
	for _, b := range []string{mesh.PlacementBucket, mesh.ModulesBucket, mesh.ManifestsBucket} {
		copies = append(copies, bus.Follow(ctx, js, b, bus.Options{RevisionsOnly: true, Log: f.log, OnChange: f.take}))
	}
	for _, c := range copies {
		select {
		case <-c.Ready():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	again := f.step(ctx)
	a.running.Add(1) // Wait waits for the follower too: nothing is said after it
	go func() {
		defer a.running.Done()
		f.run(ctx, again)
	}()
	return f, nil
}

// take folds one change into the live mesh and wakes the follower.
func (f *Follower) take(ch bus.Change) {
	f.mu.Lock()
	err := f.live.take(ch.Bucket, ch.Key, ch.Value, ch.Deleted)
	f.mu.Unlock()
	if err != nil {
		f.log.Error("assemble: a value of the live mesh does not decode; taken as placing nothing", "err", err)
	}
	f.poke()
}

func (f *Follower) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Running returns the components the follower runs now, in [Wanted]'s
// order of roles, then by node.
func (f *Follower) Running() []Component {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Component, 0, len(f.running))
	for c := range f.running {
		out = append(out, c)
	}
	slices.SortFunc(out, compareComponents)
	return out
}

// Providers returns the modules of the providers the follower runs now
// ("mesh-vault", "postgres"), each once, sorted.
func (f *Follower) Providers() []string {
	var out []string
	for _, c := range f.Running() {
		if m := c.Module(); m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

func compareComponents(x, y Component) int {
	rank := func(r Role) int { return slices.Index([]Role{Vault, Postgres, Client}, r) }
	if d := rank(x.Role) - rank(y.Role); d != 0 {
		return d
	}
	switch {
	case x.Node < y.Node:
		return -1
	case x.Node > y.Node:
		return 1
	}
	return 0
}

// run follows until ctx is done: each wake (coalesced over 100 ms, an
// apply writes many keys) and each retry after a failed step steps again.
func (f *Follower) run(ctx context.Context, again bool) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = time.Second
	bo.MaxInterval = 30 * time.Second
	var retry <-chan time.Time
	if again {
		retry = time.After(bo.NextBackOff())
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		case <-retry:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		select { // the wakes of the last 100 ms are this step's
		case <-f.wake:
		default:
		}
		if f.step(ctx) {
			retry = time.After(bo.NextBackOff())
		} else {
			bo.Reset()
			retry = nil
		}
	}
}

// step brings what runs to what the live mesh wants: it issues the users,
// starts what is wanted and does not run, starts again what runs as a
// user whose credentials changed, and stops what is no longer wanted. It
// reports whether something failed and is to be tried again.
func (f *Follower) step(ctx context.Context) (again bool) {
	f.mu.Lock()
	m := f.live.mesh()
	// A client that runs keeps its user until it has stopped (handing
	// over, its node gone from the mesh).
	parties := m
	parties.Nodes = slices.Clone(m.Nodes)
	for c := range f.running {
		if c.Role == Client && !slices.Contains(parties.Nodes, c.Node) {
			parties.Nodes = append(parties.Nodes, c.Node)
		}
	}
	slices.Sort(parties.Nodes)
	issued := f.issued
	f.mu.Unlock()

	var changed []string
	if f.cfg.Users != nil && (issued == nil || !reflect.DeepEqual(*issued, parties)) {
		var revoked []string
		var err error
		changed, revoked, err = f.cfg.Users.Issue(parties)
		if err != nil {
			f.log.Error("assemble: issuing the users of the live mesh; trying again", "err", err)
			return true
		}
		f.mu.Lock()
		f.issued = &parties
		f.mu.Unlock()
		if len(changed) > 0 || len(revoked) > 0 {
			f.log.Info("assemble: users of the live mesh issued", "changed", changed, "revoked", revoked)
		}
	}

	want := Wanted(m, f.cfg.Runs)
	for _, c := range want {
		f.mu.Lock()
		fl := f.running[c]
		if fl != nil && fl.ending {
			fl.ending = false // placed again before it stopped: it stays
		}
		f.mu.Unlock()
		switch {
		case fl == nil:
			if err := f.start(ctx, c, placedWhy(c)); err != nil {
				again = true
			}
		case slices.Contains(changed, c.User()):
			f.halt(c, "its credentials changed")
			if err := f.start(ctx, c, "on its new credentials"); err != nil {
				again = true
			}
		}
	}
	f.mu.Lock()
	var gone []Component
	for c, fl := range f.running {
		if !slices.Contains(want, c) && !fl.ending {
			gone = append(gone, c)
		}
	}
	f.mu.Unlock()
	slices.SortFunc(gone, compareComponents)
	for _, c := range gone {
		if c.Role == Client {
			f.handOver(ctx, c)
			continue
		}
		f.halt(c, fmt.Sprintf("%s is no longer placed on %s", c.Module(), c.Node))
		if f.cfg.Users != nil && !f.placedAnywhere(c.Module()) {
			if err := f.cfg.Users.Revoke(c.User()); err != nil {
				f.log.Error("assemble: revoking the user of a module no longer placed", "user", c.User(), "err", err)
			}
		}
	}
	return again
}

// placedAnywhere reports whether the live mesh places module on some node
// (its user is then still needed).
func (f *Follower) placedAnywhere(module string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, mods := range f.live.placement {
		if slices.Contains(mods, module) {
			return true
		}
	}
	return false
}

// placedWhy says why c starts: its module or node is placed.
func placedWhy(c Component) string {
	if c.Role == Client {
		return c.Node + " is in the mesh"
	}
	return fmt.Sprintf("%s placed on %s", c.Module(), c.Node)
}

// start starts c on a ctx of its own and watches it: a component that
// stops on its own is said and started again at the next step.
func (f *Follower) start(ctx context.Context, c Component, why string) error {
	cctx, stop := context.WithCancel(ctx)
	r, err := f.startOne(cctx, c)
	if err != nil {
		stop()
		if ctx.Err() == nil {
			f.log.Error("assemble: a component of the live mesh did not start; trying again", "component", c.String(), "err", err)
			f.say(Event{Component: c, Started: true, Why: why, Err: err})
		}
		return err
	}
	fl := &follows{r: r, stop: stop}
	f.mu.Lock()
	f.running[c] = fl
	f.mu.Unlock()
	f.say(Event{Component: c, Started: true, Why: why})
	f.a.running.Add(1)
	go func() {
		defer f.a.running.Done()
		<-r.Done()
		f.mu.Lock()
		halted := fl.halted
		if f.running[c] == fl {
			delete(f.running, c)
		}
		f.mu.Unlock()
		if !halted && ctx.Err() == nil {
			f.say(Event{Component: c, Err: r.Err()})
			f.poke()
		}
	}()
	return nil
}

// startOne starts c as the assembly does, its provider's bound bucket made
// first through the follower's connection (so that it never waits for the
// seat to make it).
func (f *Follower) startOne(ctx context.Context, c Component) (*Running, error) {
	switch c.Role {
	case Vault:
		if _, err := bus.Bucket(ctx, f.js, mesh.BoundBucket(c.Module()), 0); err != nil {
			return nil, err
		}
		return f.a.StartVault(ctx, vault.Config{Dir: f.cfg.VaultDir(c.Node), Node: c.Node})
	case Postgres:
		if _, err := bus.Bucket(ctx, f.js, mesh.BoundBucket(c.Module()), 0); err != nil {
			return nil, err
		}
		cfg := f.cfg.Postgres
		cfg.Node = c.Node
		return f.a.StartPostgres(ctx, cfg)
	case Client:
		r, _, err := f.a.StartClient(ctx, client.Config{Node: c.Node, Root: f.cfg.ClientRoot(c.Node), Log: f.log.With("node", c.Node),
			// One machine, one operator: the mesh file's reloads run.
			Reload: true})
		return r, err
	}
	return nil, fmt.Errorf("%w: follow: %s is not a component the follower runs", ErrConfig, c)
}

// halt stops c and waits until it has closed its connection.
func (f *Follower) halt(c Component, why string) {
	f.mu.Lock()
	fl := f.running[c]
	if fl != nil {
		fl.halted = true
		delete(f.running, c)
	}
	f.mu.Unlock()
	if fl == nil {
		return
	}
	fl.stop()
	<-fl.r.Done()
	f.say(Event{Component: c, Why: why})
}

// handOver lets the client c of a node that left the mesh run until the
// node's plans and its records in the applied bucket are gone (the seat
// removes the plans, the client then its records), at most HandOver; then
// it stops it, and wakes the follower so that its user is revoked.
func (f *Follower) handOver(ctx context.Context, c Component) {
	f.mu.Lock()
	fl := f.running[c]
	fl.ending = true
	f.mu.Unlock()
	f.a.running.Add(1)
	go func() {
		defer f.a.running.Done()
		deadline := time.Now().Add(f.cfg.HandOver)
		for time.Now().Before(deadline) && !f.handedOver(ctx, c.Node) {
			select {
			case <-ctx.Done():
				return
			case <-fl.r.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
		f.mu.Lock()
		still := f.running[c] == fl && fl.ending
		f.mu.Unlock()
		if !still {
			return // placed again meanwhile
		}
		why := c.Node + " left the mesh"
		if !f.handedOver(ctx, c.Node) {
			why += fmt.Sprintf("; its plans or records still there after %v", f.cfg.HandOver)
		}
		f.halt(c, why)
		f.poke()
	}()
}

// handedOver reports whether the plans and applied buckets hold no key of
// node.
func (f *Follower) handedOver(ctx context.Context, node string) bool {
	for _, b := range []string{mesh.PlansBucket, mesh.AppliedBucket} {
		kv, err := f.js.KeyValue(ctx, b)
		if err != nil {
			return errors.Is(err, jetstream.ErrBucketNotFound)
		}
		keys, err := kv.ListKeysFiltered(ctx, node+".>")
		if err != nil {
			return false
		}
		for range keys.Keys() {
			keys.Stop()
			return false
		}
	}
	return true
}

func (f *Follower) say(e Event) {
	if f.cfg.Said != nil {
		f.cfg.Said(e)
	}
}
