package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
	// MoveVault, if set, is called before mesh-vault starts on a node while
	// no other vault runs (it moved, or is placed again): it brings the
	// store of the vault that ran last to that node's VaultDir and returns
	// the node it came from ("" when none moved), so that a move is not a
	// loss ([Data.MoveVault]: one machine, up). Nil keeps each node's
	// store where it is.
	MoveVault func(to string) (from string, err error)
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
	// left the mesh").
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
	case e.Err != nil && e.Why != "":
		return fmt.Sprintf("%s stopped (%s): %v", e.Component, e.Why, e.Err)
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
// reconnects on new credentials when its user is signed anew (it is not
// stopped), and stops when it leaves (a node's client once it has removed its records,
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
	// reissue lists the users of components whose access to the mesh was
	// removed while the mesh runs them: revoked for good and issued anew
	// at the next step.
	reissue []string
	// vaultSince holds, per node, since when a vault placed there waits
	// for another to stop (see waitsForTheVault).
	vaultSince map[string]time.Time
	// halting, if set, is called by halt before it stops a component
	// (tests only: see export_test.go's OnHalting).
	halting func(Component)
}

// follows is one component the follower runs.
type follows struct {
	r      *Running
	stop   context.CancelFunc
	ending bool // a client handing over: stopped once its records are gone
	halted bool // stopped by the follower (not on its own)
}

// Follow starts following the live mesh through js (the operator's
// connection: it reads the placement, modules, manifests, applied and
// collect buckets, makes a provider's bound bucket before the provider
// starts, and reads a leaving node's records): it waits until the copies
// of those five buckets hold their keys, starts the components the mesh
// wants, and returns; it follows until ctx is done, then stops every
// component it runs ([Assembly.Wait] waits for the follower too). A start
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
	for _, b := range []string{mesh.PlacementBucket, mesh.ModulesBucket, mesh.ManifestsBucket, mesh.AppliedBucket, mesh.CollectBucket} {
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
// starts what is wanted and does not run, and stops what is no longer
// wanted; a component whose user's credentials changed keeps running and
// reconnects with them. It
// reports whether something failed and is to be tried again.
func (f *Follower) step(ctx context.Context) (again bool) {
	// The users whose access was removed while the mesh runs them are
	// revoked for good (their old credentials stay refused), and the
	// Issue below signs them a new key.
	f.mu.Lock()
	reissue := f.reissue
	f.reissue = nil
	f.mu.Unlock()
	for i, user := range reissue {
		if f.cfg.Users == nil {
			break
		}
		if err := f.cfg.Users.Revoke(user); err != nil {
			f.log.Error("assemble: revoking a user whose access was removed, to issue it anew; trying again", "user", user, "err", err)
			f.mu.Lock()
			f.reissue = append(f.reissue, reissue[i:]...)
			f.mu.Unlock()
			return true
		}
	}
	f.mu.Lock()
	m := f.live.mesh()
	// A client that runs keeps its user until it has stopped (handing
	// over, its node gone from the mesh), and every key of applied and
	// collect it was last issued: its storage user is the same until it
	// stops (a user signed anew is revoked at once), and it deletes its
	// records with it.
	issued := f.issued
	parties := m
	parties.Nodes = slices.Clone(m.Nodes)
	for c := range f.running {
		if c.Role == Client && !slices.Contains(parties.Nodes, c.Node) {
			parties.Nodes = append(parties.Nodes, c.Node)
			if issued != nil {
				parties.Held = keepHeld(parties.Held, c.Node, issuedKeys(issued, c.Node))
			}
		}
	}
	slices.Sort(parties.Nodes)
	f.mu.Unlock()

	var changed []string
	if f.cfg.Users != nil && (issued == nil || len(reissue) > 0 || !reflect.DeepEqual(*issued, parties)) {
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
	// What left stops first: a provider moved to another node hands on
	// its work (its provides in hand end, their entries written, the
	// vault's store closed) before the one placed next starts, so the
	// two never work at once.
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
		f.halt(c, fmt.Sprintf("%s is no longer placed on %s; its work handed on", c.Module(), c.Node))
		if f.cfg.Users != nil && !f.placedAnywhere(c.Module()) {
			if err := f.cfg.Users.Revoke(c.User()); err != nil {
				f.log.Error("assemble: revoking the user of a module no longer placed", "user", c.User(), "err", err)
			}
		}
	}
	for _, c := range want {
		f.mu.Lock()
		fl := f.running[c]
		if fl != nil && fl.ending {
			fl.ending = false // placed again before it stopped: it stays
		}
		f.mu.Unlock()
		switch {
		case fl == nil && f.waitsForTheVault(c):
			again = true
		case fl == nil:
			if err := f.start(ctx, c, placedWhy(c)); err != nil {
				again = true
			}
		case slices.Contains(changed, c.User()):
			// Its new credentials file is written and, unless its
			// limits only grew, its old JWT revoked on the servers
			// (Users.Issue pushed it): each of its connections
			// reconnects with the file's new JWT (a revocation is a
			// removal only once a reconnect is refused too). It keeps
			// running, its writes refused meanwhile tried again (a
			// node leaving stops once, after deleting its records).
			f.log.Info("assemble: a component's credentials changed; it takes them as it reconnects", "component", c.String())
			fl.r.Reconnect()
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

// vaultWait is how long, with MoveVault, a vault placed on a node waits
// for the vault that runs on another to stop (a move whose two placements
// reach the follower in two steps): past it, both run, each on its own
// store (mesh-vault placed on two nodes).
const vaultWait = 5 * time.Second

// waitsForTheVault reports whether c, a vault to start, waits for another
// vault to stop first so that the store moves to it (see vaultWait).
func (f *Follower) waitsForTheVault(c Component) bool {
	if c.Role != Vault || f.cfg.MoveVault == nil || !f.runsVault() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.vaultSince == nil {
		f.vaultSince = map[string]time.Time{}
	}
	since, ok := f.vaultSince[c.Node]
	if !ok {
		f.vaultSince[c.Node] = time.Now()
		return true
	}
	if time.Since(since) < vaultWait {
		return true
	}
	delete(f.vaultSince, c.Node)
	f.log.Warn("assemble: mesh-vault is placed on two nodes: each vault runs on its own store", "node", c.Node)
	return false
}

// runsVault reports whether a vault runs.
func (f *Follower) runsVault() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.running {
		if c.Role == Vault {
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
	if c.Role == Vault && f.cfg.MoveVault != nil && !f.runsVault() {
		f.mu.Lock()
		delete(f.vaultSince, c.Node)
		f.mu.Unlock()
		from, err := f.cfg.MoveVault(c.Node)
		if err != nil {
			f.log.Error("assemble: the vault's store did not move with it; trying again", "component", c.String(), "err", err)
			f.say(Event{Component: c, Started: true, Why: why, Err: err})
			return err
		}
		if from != "" {
			why += fmt.Sprintf("; its store moved from %s: the same values, nothing issued anew", from)
			f.log.Info("assemble: mesh-vault moved; its store moved with it", "from", from, "to", c.Node, "dir", f.cfg.VaultDir(c.Node))
		}
	}
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
			e := Event{Component: c, Err: r.Err()}
			if errors.Is(e.Err, bus.ErrAccessRemoved) {
				// Revoked by someone else, or its credentials file
				// removed, while the live mesh still places it: its
				// user is issued anew (new credentials; the old ones
				// stay refused), and it starts again.
				e.Why = "its access to the mesh was removed; its user is issued anew, as the live mesh still runs it"
				f.mu.Lock()
				f.reissue = append(f.reissue, c.User())
				f.mu.Unlock()
			}
			f.say(e)
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
		r, _, err := f.a.StartClient(ctx, client.Config{Node: c.Node, Root: f.cfg.ClientRoot(c.Node), Log: f.log,
			// One machine, one operator: the mesh file's reloads run.
			Reload: true})
		return r, err
	}
	return nil, fmt.Errorf("%w: follow: %s is not a component the follower runs", ErrConfig, c)
}

// halt stops c and waits until it has closed its connection. c stays
// among the components running until then: a step meanwhile (halt runs on
// a client's hand-over goroutine, beside the follower's steps) keeps its
// user, so that a leaving node's client is never revoked, nor its
// credentials file removed, while it still gives its lease back and closes
// its connections.
func (f *Follower) halt(c Component, why string) {
	f.mu.Lock()
	fl := f.running[c]
	if fl != nil {
		fl.halted = true
	}
	halting := f.halting
	f.mu.Unlock()
	if fl == nil {
		return
	}
	if halting != nil {
		halting(c)
	}
	fl.stop()
	<-fl.r.Done()
	f.mu.Lock()
	if f.running[c] == fl {
		delete(f.running, c)
	}
	f.mu.Unlock()
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
// node. A bucket gone is unknown, not empty: the client hands over until
// it exists again (or HandOver ends).
func (f *Follower) handedOver(ctx context.Context, node string) bool {
	for _, b := range []string{mesh.PlansBucket, mesh.AppliedBucket} {
		kv, err := f.js.KeyValue(ctx, b)
		if err != nil {
			return false
		}
		keys, err := bus.ListKeys(ctx, f.js, kv, node+".>")
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			return false
		}
		if len(keys) > 0 {
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

// issuedKeys returns the keys of applied and collect that node's client
// was last issued: those of the modules placed on it and those its node
// held.
func issuedKeys(m *access.Mesh, node string) access.HeldKeys {
	h := m.Held[node]
	h.Applied, h.Collect = slices.Clone(h.Applied), slices.Clone(h.Collect)
	for _, mod := range m.Placement[node] {
		h.Applied = append(h.Applied, mesh.NodeModule{Node: node, Module: mod}.String())
		for _, c := range m.Contributes[mod] {
			h.Collect = append(h.Collect, mesh.CollectKey{Node: node, Collection: c, Contributor: mod}.String())
		}
	}
	return h
}

// keepHeld returns held (copied) with the keys of was added to node's.
func keepHeld(held map[string]access.HeldKeys, node string, was access.HeldKeys) map[string]access.HeldKeys {
	if len(was.Applied)+len(was.Collect) == 0 {
		return held
	}
	out := maps.Clone(held)
	if out == nil {
		out = map[string]access.HeldKeys{}
	}
	h := out[node]
	h.Applied = union(h.Applied, was.Applied)
	h.Collect = union(h.Collect, was.Collect)
	out[node] = h
	return out
}

// union returns the keys of a and b, each once, sorted.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
