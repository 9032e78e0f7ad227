package vault

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Config configures the vault.
type Config struct {
	// Dir is the vault's data directory (its store file, and its key file
	// unless KeyFile is set). Required.
	Dir string
	// KeyFile is the path of the 32-byte key that seals the store, kept
	// apart from it (another disk, a secrets mount): a copy of Dir alone
	// then opens no value. Empty means Dir/vault.key. See [OpenStoreKey].
	KeyFile string
	// Node is the node the vault runs on: it provides the credential
	// provisions whose provider is mesh-vault on Node. Required.
	Node string
	// RetryMin and RetryMax bound the kit's backoff (see kit.Config); 0
	// means the kit's defaults.
	RetryMin, RetryMax time.Duration
	// Grace is how long a rotated credential's old generation stays in
	// force (named by its entry, so that its provider keeps it) while the
	// consumer's node has not applied the new one: the rotation is in
	// force once that node's client says it rendered the new generation
	// (its applied record's credentials), or when Grace ends, whichever
	// comes first. 0 means [DefaultGrace]; negative means none (in force
	// at once, as a rotation with now is).
	Grace time.Duration
	// Answer is the connection the vault answers its verbs on (its user
	// in the services account), which tells who asked each request. Nil
	// means the connection given to [Start], with no one named (a server
	// without accounts).
	Answer *bus.Answerer
}

// DefaultGrace is the rotation grace when [Config].Grace is 0.
const DefaultGrace = time.Minute

// rotation is a credential rotated and not yet in force: from is the value
// in force (its provider holds it), to the generation issued, which the
// consumer's node renders first. applied is the generation that node's
// applied record last said its files hold (0 for none), and until when
// the grace ends; both are said in the entry's why.
type rotation struct {
	from     Value
	to       int64
	consumer mesh.NodeModule
	applied  int64
	until    time.Time
	timer    *time.Timer
}

// workers is how many credential keys the vault's kit handles at once:
// values issued at the same time share one write and one sync of the
// store, and a worker mostly waits for that sync (milliseconds on a disk
// that syncs, more on a loaded one), so a burst of new keys costs a sync
// per few hundred values rather than one per value.
const workers = 512

// Vault is a running mesh-vault. It is safe for concurrent use.
type Vault struct {
	cfg Config
	ans *bus.Answerer
	// fair queues the verbs' requests per asker (fair.go).
	fair  *fair
	self  mesh.Ref
	store *Store
	kit   *kit.Kit
	// started is closed once kit is set: the kit's workers may call the
	// handler before kit.Start has returned.
	started chan struct{}
	plans   *bus.Copy
	log     *slog.Logger
	// stopped is closed once the vault has stopped and handed on (see
	// [Vault.Done]).
	stopped chan struct{}
	// empty says the store held nothing when the vault started; movedHere
	// says sayMovedHere once then.
	empty     bool
	movedHere sync.Once

	// secretsOf holds, of every plan that names secrets, the names
	// (key <node>.<module> of mesh-provisioner_plans): the only part of a
	// plan the vault reads. The plans copy keeps revisions only.
	mu        sync.Mutex
	secretsOf map[mesh.NodeModule][]string
	// rotating holds the credentials rotated and not yet in force, by
	// key (see Config.Grace); applied follows the clients' applied
	// records, where the consumers' nodes say what they rendered.
	rotating map[string]*rotation
	applied  *bus.Copy
	// rotateMu makes rotations one at a time (they are rare).
	rotateMu sync.Mutex
	// planSecrets reads a plan's secrets and nothing else of it.
	planSecrets planReader
}

// Start opens the vault's store, starts its kit (entries in
// "mesh-vault_bound") and its verbs on nc, and returns at once; the vault
// runs until ctx is done. nc and js are the vault's own bus connection. It
// returns an error when the store cannot be opened (see [OpenStore]) or a
// subscription fails.
func Start(ctx context.Context, cfg Config, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (*Vault, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Node == "" {
		return nil, fmt.Errorf("vault: the node is not set")
	}
	store, err := OpenStoreKey(cfg.Dir, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	ans := cfg.Answer
	if ans == nil {
		ans = &bus.Answerer{Conn: nc}
	}
	v := &Vault{cfg: cfg, ans: ans, self: mesh.Ref{Module: mesh.VaultModule, Node: cfg.Node}, store: store, log: log.With("component", mesh.VaultModule),
		secretsOf: map[mesh.NodeModule][]string{}, started: make(chan struct{}), stopped: make(chan struct{}), rotating: map[string]*rotation{}}
	if v.cfg.Grace == 0 {
		v.cfg.Grace = DefaultGrace
	}
	store.said = v.log
	v.empty = store.Empty()
	if t, ok := store.Torn(); ok {
		v.log.Warn(sayTorn, "line", t.Line, "bytes", t.Bytes, "name", t.Name, "generation", t.Generation)
	}
	v.plans = bus.Follow(ctx, js, mesh.PlansBucket, bus.Options{Log: v.log, OnChange: v.tookPlan, RevisionsOnly: true})
	v.applied = bus.Follow(ctx, js, mesh.AppliedBucket, bus.Options{Log: v.log, OnChange: v.tookApplied})
	v.kit, err = kit.Start(ctx, kit.Config{
		Module: mesh.VaultModule, Node: cfg.Node, JetStream: js, Handler: handler{v}, Log: log,
		RetryMin: cfg.RetryMin, RetryMax: cfg.RetryMax, Workers: workers,
	})
	if err != nil {
		return nil, err
	}
	close(v.started)
	v.fair = newFair(ctx)
	v.fair.serve()
	var subs []*nats.Subscription
	for subject, answer := range map[string]nats.MsgHandler{
		kit.SecretVerb + ".*.*":    v.answerSecret,
		kit.ConsumersVerb + ".*.*": v.answerConsumers,
		kit.RotateVerb:             v.answerRotate,
	} {
		sub, err := ans.Subscribe(subject, v.queued(answer))
		if err == nil {
			err = sub.SetPendingLimits(pendingMsgs, pendingBytes)
		}
		if err != nil {
			for _, s := range subs {
				s.Unsubscribe()
			}
			return nil, fmt.Errorf("vault: subscribe %s: %w", subject, err)
		}
		subs = append(subs, sub)
	}
	if err := ans.Flush(); err != nil {
		return nil, fmt.Errorf("vault: subscribe: %w", err)
	}
	go func() {
		<-ctx.Done()
		for _, s := range subs {
			s.Unsubscribe()
		}
		<-v.kit.Done()
		v.fair.wait()
		if err := v.store.Close(); err != nil {
			v.log.Error("vault: closing the store", "dir", cfg.Dir, "err", err)
		}
		close(v.stopped)
	}()
	return v, nil
}

// Done is closed once the vault has stopped (its ctx is done) and handed
// on its work: its kit's entries are written ([kit.Kit.Done]), the verbs
// in hand are answered, and its store is synced and closed, so that a
// vault started next on the same store (moved to another node of one
// machine) opens it whole, with nothing written to it after.
func (v *Vault) Done() <-chan struct{} { return v.stopped }

// Ready is closed once the vault follows the provisions and its entries.
func (v *Vault) Ready() <-chan struct{} { return v.kit.Ready() }

// Rotate gives the value at name (a credential key, or a secret's vault
// name) a new value at the next generation. A credential whose consumer's
// node renders it into files (its applied record's credentials name it)
// is answered to the consumer at once, and comes in force for its
// provider (its entry names it) once that node has applied it or the
// grace ends (see [Config].Grace); any other, and a secret, at once. It returns the new
// value's name and generation, or an error wrapping [ErrUnknown] when the
// vault keeps nothing at name.
func (v *Vault) Rotate(name string) (Value, error) { return v.rotate(name, false) }

// RotateNow is [Vault.Rotate] with the new value in force at once.
func (v *Vault) RotateNow(name string) (Value, error) { return v.rotate(name, true) }

func (v *Vault) rotate(name string, now bool) (Value, error) {
	val, _, err := v.rotateAnswer(name, now)
	return val, err
}

// rotateAnswer is rotate, returning also the generation in force once it
// returns: the new one, or the one before while the consumer's node
// renders the new one.
func (v *Vault) rotateAnswer(name string, now bool) (Value, int64, error) {
	v.rotateMu.Lock()
	defer v.rotateMu.Unlock()
	before, _ := v.store.Get(name)
	_, isCredential := v.credential(name, false)
	// Only a consumer whose node renders the credential into its files
	// (its applied record says which generation they hold) is waited for.
	var record []byte
	consumer, of := "", mesh.NodeModule{}
	if pk, err := mesh.ParseProvisionKey(name); err == nil {
		of = mesh.NodeModule{Node: pk.Node, Module: pk.Consumer}
		consumer = of.String()
		if it, ok := v.applied.Get(consumer); ok {
			record = it.Value
		}
	}
	applied, isRendered := rendered(record, name)
	wait := isCredential && isRendered && !now && v.cfg.Grace >= 0
	// The rotation is kept before the store moves, so that a provide of
	// the key meanwhile (a retry, a restart's first pass) names the value
	// in force, never the new one.
	v.mu.Lock()
	r, made := v.rotating[name], false
	switch {
	case wait && r == nil:
		r, made = &rotation{from: before, to: before.Generation + 1, consumer: of, applied: applied, until: time.Now().Add(v.cfg.Grace)}, true
		v.rotating[name] = r
	case wait:
		// Rotated again before the last came in force: that one is
		// never in force.
		r.to, r.applied, r.until = before.Generation+1, applied, time.Now().Add(v.cfg.Grace)
	case r != nil:
		if r.timer != nil {
			r.timer.Stop()
		}
		delete(v.rotating, name)
		r = nil
	}
	v.mu.Unlock()
	val, err := v.store.Rotate(name)
	if err != nil {
		if made {
			v.mu.Lock()
			delete(v.rotating, name)
			v.mu.Unlock()
		}
		return Value{}, 0, err
	}
	inForce := val.Generation
	if r != nil {
		v.mu.Lock()
		r.to = val.Generation
		if made {
			r.timer = time.AfterFunc(v.cfg.Grace, func() {
				v.mu.Lock()
				var to int64
				if r := v.rotating[name]; r != nil {
					to = r.to
				}
				v.mu.Unlock()
				v.inForce(name, to, "grace")
			})
		} else {
			r.timer.Reset(v.cfg.Grace)
		}
		inForce = r.from.Generation
		v.mu.Unlock()
		v.log.Info("vault: rotated; the new generation is in force once the consumer's node applies it, or after the grace", "name", name, "generation", val.Generation, "in_force", inForce, "grace", v.cfg.Grace)
		// The consumer's node may hold the new one already (it rendered
		// it between the store's rotation and now).
		if it, ok := v.applied.Get(consumer); ok {
			v.tookApplied(bus.Change{Key: consumer, Value: it.Value, Revision: it.Revision})
		}
	} else if isCredential && !now {
		v.log.Info("vault: rotated; in force now: the consumer's node renders the credential into no file", "name", name, "generation", val.Generation)
	} else {
		v.log.Info("vault: rotated", "name", name, "generation", val.Generation)
	}
	v.kit.Again(name)
	return Value{Name: val.Name, Generation: val.Generation}, inForce, nil
}

// rendered reports whether the applied record (value at <node>.<module>
// in mesh-provisioner_applied) says its module's files hold the
// credential key, and returns the generation they hold.
func rendered(record []byte, key string) (int64, bool) {
	if record == nil {
		return 0, false
	}
	var a struct {
		Credentials map[string]int64 `json:"credentials"`
	}
	if jsonhead.Unmarshal(record, &a) != nil {
		return 0, false
	}
	gen, ok := a.Credentials[key]
	return gen, ok
}

// inForce ends the rotation of name to generation to (by "applied": the
// consumer's node applied it, or "grace": the grace ended first): its
// entry names it from then on.
func (v *Vault) inForce(name string, to int64, by string) {
	v.mu.Lock()
	r := v.rotating[name]
	if r == nil || to == 0 || r.to > to {
		v.mu.Unlock()
		return
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	delete(v.rotating, name)
	v.mu.Unlock()
	// Said before the entry is written, so that the log never lags it.
	if by == "grace" {
		v.log.Warn("vault: the consumer's node did not apply the rotated credential within the grace; it is in force now, and the consumer is behind until its client renders it", "name", name, "generation", to, "grace", v.cfg.Grace)
	} else {
		v.log.Info("vault: the consumer's node applied the rotated credential; it is in force", "name", name, "generation", to)
	}
	v.kit.Again(name)
}

// tookApplied takes a client's applied record: a credential of the record's
// module on its node, rotated and not yet in force, whose generation its
// rendered templates hold comes in force. A record that does not decode
// is said.
func (v *Vault) tookApplied(ch bus.Change) {
	if ch.Deleted {
		return
	}
	v.log.Debug("vault: took an applied record", "bucket", mesh.AppliedBucket, "key", ch.Key, "revision", ch.Revision)
	v.mu.Lock()
	none := len(v.rotating) == 0
	v.mu.Unlock()
	if none {
		return
	}
	var a struct {
		Credentials map[string]int64 `json:"credentials"`
	}
	if err := jsonhead.Unmarshal(ch.Value, &a); err != nil {
		v.log.Error("vault: an applied record does not decode; the rotations it may apply are in force after their grace", "bucket", mesh.AppliedBucket, "key", ch.Key, "err", err)
		return
	}
	for key, gen := range a.Credentials {
		// Only the consumer's own node says it: the key begins with the
		// record's <node>.<module>.
		if !strings.HasPrefix(key, ch.Key+".") {
			continue
		}
		v.mu.Lock()
		r := v.rotating[key]
		var to int64 // read under v.mu: rotateAnswer sets it
		if r != nil {
			to = r.to
		}
		moved := r != nil && gen < to && gen != r.applied
		if moved {
			r.applied = gen
		}
		v.mu.Unlock()
		switch {
		case r != nil && gen >= to:
			v.inForce(key, gen, "applied")
		case moved:
			// The entry's why says what the node holds.
			v.kit.Again(key)
		}
	}
}

// handler provides and retires credential provisions.
type handler struct{ v *Vault }

func (h handler) Provide(ctx context.Context, key mesh.ProvisionKey, p mesh.Provision) (kit.Result, error) {
	select {
	case <-h.v.started:
	case <-ctx.Done():
		return kit.Result{}, ctx.Err()
	}
	if key.Provision != mesh.CredentialProvision {
		return kit.Failing(whyNotCredential(mesh.VaultModule, key.Provision)), nil
	}
	// The generation last handed out is on the bus, in the key's entry:
	// a store that lost it (or was restored from an older copy) issues the
	// generation after it, never a second value under one used.
	name := key.String()
	var published int64
	if e, ok := h.v.kit.Entry(name); ok && e.VaultName == name {
		// A rotation not yet in force was handed to the consumer too.
		published = max(e.Generation, e.Next)
	}
	// The kit's workers ensure credentials concurrently: grouped, a
	// trickle of new ones shares the store's syncs.
	val, held, lost, err := h.v.store.ensureFrom(name, published, true)
	if err != nil {
		return kit.Result{}, err
	}
	if lost && h.v.empty {
		h.v.movedHere.Do(func() {
			h.v.log.Warn(sayMovedHere, "node", h.v.cfg.Node, "dir", h.v.cfg.Dir, "key_file", h.v.store.keyPath)
		})
	}
	if lost {
		h.v.log.Error(sayLost, "key", name, "published", published, "held", held, "issued", val.Generation)
	}
	h.v.mu.Lock()
	defer h.v.mu.Unlock()
	if r := h.v.rotating[name]; r != nil {
		res := kit.Provided(val.Name, r.from.Generation)
		res.Next = r.to
		res.Why = whyRotating(r.to, r.consumer, r.applied, r.until)
		return res, nil
	}
	return kit.Provided(val.Name, val.Generation), nil
}

func (h handler) Retire(_ context.Context, key mesh.ProvisionKey, _ mesh.Provision) error {
	return h.v.store.Remove(key.String())
}

// credential reports whether key is a credential this vault provides and
// holds a value for, and returns it: the value issued last, or with
// inForce the one in force (the one before a rotation not yet in force:
// what its provider is answered, see [Config].Grace).
func (v *Vault) credential(key string, inForce bool) (kit.Credential, bool) {
	p, ok := v.kit.Provision(key)
	if !ok || p.Provider != v.self || p.Provision != mesh.CredentialProvision {
		return kit.Credential{}, false
	}
	val, ok := v.store.Get(key)
	if !ok {
		return kit.Credential{}, false
	}
	if inForce {
		v.mu.Lock()
		if r := v.rotating[key]; r != nil && r.from.Value != "" {
			val = r.from
		}
		v.mu.Unlock()
	}
	return kit.Credential{Key: key, VaultName: val.Name, Generation: val.Generation, Value: val.Value}, true
}

// provisions calls f for some of the provisions the kit holds (every
// one, or those a request narrows to), until f returns false.
type provisions func(f func(key string, p mesh.Provision) bool)

// only returns the provision at key alone, as provisions: a request
// narrowed to one key costs one lookup, not a pass over every provision.
func (v *Vault) only(key string) provisions {
	return func(f func(key string, p mesh.Provision) bool) {
		if p, ok := v.kit.Provision(key); ok {
			f(key, p)
		}
	}
}

// credentials returns the credentials reached from the provisions of from
// that match: the keys they depend on, and, with self, each such key itself
// when it is a credential.
func (v *Vault) credentials(self bool, from provisions, match func(key string, p mesh.Provision) bool) []kit.Credential {
	var keys []string
	from(func(key string, p mesh.Provision) bool {
		if match(key, p) {
			if self {
				keys = append(keys, key)
			}
			keys = append(keys, p.DependsOn...)
		}
		return true
	})
	sort.Strings(keys)
	keys = slices.Compact(keys)
	var out []kit.Credential
	for _, k := range keys {
		// A module's own credentials are the newest (its node renders
		// them first); a provider's consumers' are those in force.
		if c, ok := v.credential(k, !self); ok {
			out = append(out, c)
		}
	}
	return out
}

// tookPlan keeps the secrets a changed plan names. A plan that does not
// decode is said and its secrets are not answered.
func (v *Vault) tookPlan(ch bus.Change) {
	nm, err := mesh.ParseNodeModule(ch.Key)
	if err != nil {
		v.log.Error("vault: a plan's key is out of shape; its secrets are not answered", "bucket", mesh.PlansBucket, "key", ch.Key, "err", err)
		return
	}
	var secrets []string
	if !ch.Deleted {
		var err error
		if secrets, err = v.planSecrets.secrets(ch.Value); err != nil {
			v.log.Error("vault: a plan does not decode; its secrets are not answered", "bucket", mesh.PlansBucket, "key", ch.Key, "err", err)
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(secrets) == 0 {
		delete(v.secretsOf, nm)
		return
	}
	v.secretsOf[nm] = secrets
}

// Secrets returns the own secrets of module (on node, when node is set),
// generating those not kept yet.
func (v *Vault) secrets(module, node string) ([]kit.Secret, error) {
	type named struct {
		nm    mesh.NodeModule
		names []string
	}
	var plans []named
	v.mu.Lock()
	if node != "" {
		// One plan, not a pass over every plan.
		nm := mesh.NodeModule{Node: node, Module: module}
		if names, ok := v.secretsOf[nm]; ok {
			plans = append(plans, named{nm, names})
		}
	} else {
		for nm, names := range v.secretsOf {
			if nm.Module == module {
				plans = append(plans, named{nm, names})
			}
		}
	}
	v.mu.Unlock()
	sort.Slice(plans, func(i, j int) bool { return plans[i].nm.Node < plans[j].nm.Node })
	var out []kit.Secret
	for _, p := range plans {
		for _, name := range p.names {
			val, err := v.store.Ensure(SecretName(p.nm.Node, p.nm.Module, name))
			if err != nil {
				return nil, err
			}
			out = append(out, kit.Secret{Node: p.nm.Node, Module: p.nm.Module, Name: name, VaultName: val.Name, Generation: val.Generation, Value: val.Value})
		}
	}
	return out, nil
}

// SecretName returns the vault name of module's secret name on node:
// "<node>.<module>.secret.<name>".
func SecretName(node, module, name string) string {
	return node + "." + module + ".secret." + name
}

// requester returns the module a request of the secret or consumers verb
// is for, the request, and a why when it is refused. The subject is
// "<verb>.<module>.<asker>": the server lets each user publish only the
// subjects ending in its own name, and [bus.Answerer.SentBy] checks that
// the server's header names the same user. The module itself is answered
// its values on every node; a node's client ("client-<node>", which the
// server lets ask only for the modules placed on its node) only that
// node's values (the request's node is set to it); anyone else nothing.
func (v *Vault) requester(m *nats.Msg) (string, kit.VaultRequest, string) {
	_, rest, _ := strings.Cut(strings.TrimPrefix(m.Subject, mesh.VaultModule+"."), ".") // "<module>.<asker>"
	user, who, ok := strings.Cut(rest, ".")
	if !ok || !mesh.ValidName(user) {
		return user, kit.VaultRequest{}, whyBadUser(user)
	}
	// Names are exact (spec 2): {"KEY":..} is refused, not read as a key
	// nor left unread (which would widen the request to every key).
	var req kit.VaultRequest
	if len(m.Data) > 0 {
		if err := jsonhead.Decode(m.Data, &req); err != nil {
			return user, kit.VaultRequest{}, whyBadRequest(err)
		}
	}
	if err := v.ans.SentBy(m, who); err != nil {
		return user, kit.VaultRequest{}, err.Error()
	}
	if who == user {
		return user, req, ""
	}
	node, ok := strings.CutPrefix(who, "client-")
	switch {
	case !ok || !mesh.ValidName(node):
		return user, kit.VaultRequest{}, whyNotYours(who, user)
	case req.Node != "" && req.Node != node:
		return user, kit.VaultRequest{}, whyOtherNode(who, req.Node)
	}
	req.Node = node
	return user, req, ""
}

func (v *Vault) answerSecret(m *nats.Msg) {
	user, req, why := v.requester(m)
	if why != "" {
		v.reply(m, kit.VaultAnswer{Error: why}, "verb", kit.SecretVerb, "user", user)
		return
	}
	from := provisions(v.kit.Provisions)
	switch {
	case req.Key != "":
		from = v.only(req.Key)
	case req.Node != "":
		from = func(f func(key string, p mesh.Provision) bool) { v.kit.ConsumerProvisions(req.Node, user, f) }
	}
	a := kit.VaultAnswer{Credentials: v.credentials(true, from, func(key string, p mesh.Provision) bool {
		return p.Consumer.Module == user && (req.Node == "" || p.Consumer.Node == req.Node) && (req.Key == "" || key == req.Key)
	})}
	if req.Key == "" {
		s, err := v.secrets(user, req.Node)
		if err != nil {
			a = kit.VaultAnswer{Error: err.Error()}
		}
		a.Secrets = s
	}
	v.reply(m, a, "verb", kit.SecretVerb, "user", user)
}

func (v *Vault) answerConsumers(m *nats.Msg) {
	user, req, why := v.requester(m)
	if why != "" {
		v.reply(m, kit.VaultAnswer{Error: why}, "verb", kit.ConsumersVerb, "user", user)
		return
	}
	from := provisions(v.kit.Provisions)
	if req.Key != "" {
		from = v.only(req.Key)
	}
	creds := v.credentials(false, from, func(key string, p mesh.Provision) bool {
		return p.Provider.Module == user && (req.Node == "" || p.Provider.Node == req.Node) && (req.Key == "" || key == req.Key)
	})
	v.reply(m, kit.VaultAnswer{Credentials: creds}, "verb", kit.ConsumersVerb, "user", user)
}

func (v *Vault) answerRotate(m *nats.Msg) {
	// The server lets operators alone ask it; a request it names no
	// sender of (a JetStream delivery, a reply routed back) is refused.
	if _, err := v.ans.Asker(m); err != nil {
		v.reply(m, kit.RotateAnswer{Error: err.Error()}, "verb", kit.RotateVerb)
		return
	}
	var req kit.RotateRequest
	if err := jsonhead.Decode(m.Data, &req); err != nil || req.Key == "" {
		v.reply(m, kit.RotateAnswer{Error: whyBadRotate(err)}, "verb", kit.RotateVerb)
		return
	}
	val, inForce, err := v.rotateAnswer(req.Key, req.Now)
	if err != nil {
		v.reply(m, kit.RotateAnswer{Key: req.Key, Error: err.Error()}, "verb", kit.RotateVerb, "key", req.Key)
		return
	}
	v.reply(m, kit.RotateAnswer{Key: req.Key, VaultName: val.Name, Generation: val.Generation, InForce: inForce}, "verb", kit.RotateVerb, "key", req.Key)
}

// reply answers m with a; it logs who asked and how many values went out,
// never the values.
func (v *Vault) reply(m *nats.Msg, a any, attrs ...any) {
	b, err := json.Marshal(a)
	if err == nil {
		err = m.Respond(b)
	}
	switch x := a.(type) {
	case kit.VaultAnswer:
		attrs = append(attrs, "credentials", len(x.Credentials), "secrets", len(x.Secrets), "refused", x.Error)
	case kit.RotateAnswer:
		attrs = append(attrs, "generation", x.Generation, "refused", x.Error)
	}
	if err != nil {
		v.log.Error("vault: answer not sent", append(attrs, "err", err)...)
		return
	}
	v.log.Debug("vault: answered", attrs...)
}
