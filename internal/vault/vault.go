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
}

// workers is how many credential keys the vault's kit handles at once:
// values issued at the same time share one write and one sync of the
// store, and a worker mostly waits for that sync (milliseconds on a disk
// that syncs, more on a loaded one), so a burst of new keys costs a sync
// per few hundred values rather than one per value.
const workers = 512

// Vault is a running mesh-vault. It is safe for concurrent use.
type Vault struct {
	cfg   Config
	self  mesh.Ref
	store *Store
	kit   *kit.Kit
	// started is closed once kit is set: the kit's workers may call the
	// handler before kit.Start has returned.
	started chan struct{}
	plans   *bus.Copy
	log     *slog.Logger

	// secretsOf holds, of every plan that names secrets, the names
	// (key <node>.<module> of mesh-provisioner_plans): the only part of a
	// plan the vault reads. The plans copy keeps revisions only.
	mu        sync.Mutex
	secretsOf map[mesh.NodeModule][]string
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
	v := &Vault{cfg: cfg, self: mesh.Ref{Module: mesh.VaultModule, Node: cfg.Node}, store: store, log: log.With("component", mesh.VaultModule),
		secretsOf: map[mesh.NodeModule][]string{}, started: make(chan struct{})}
	store.said = v.log
	if t, ok := store.Torn(); ok {
		v.log.Warn(sayTorn, "line", t.Line, "bytes", t.Bytes, "name", t.Name, "generation", t.Generation)
	}
	v.plans = bus.Follow(ctx, js, mesh.PlansBucket, bus.Options{Log: v.log, OnChange: v.tookPlan, RevisionsOnly: true})
	v.kit, err = kit.Start(ctx, kit.Config{
		Module: mesh.VaultModule, Node: cfg.Node, JetStream: js, Handler: handler{v}, Log: log,
		RetryMin: cfg.RetryMin, RetryMax: cfg.RetryMax, Workers: workers,
	})
	if err != nil {
		return nil, err
	}
	close(v.started)
	var subs []*nats.Subscription
	for subject, answer := range map[string]nats.MsgHandler{
		kit.SecretVerb + ".*":    v.answerSecret,
		kit.ConsumersVerb + ".*": v.answerConsumers,
		kit.RotateVerb:           v.answerRotate,
	} {
		sub, err := nc.Subscribe(subject, answer)
		if err != nil {
			for _, s := range subs {
				s.Unsubscribe()
			}
			return nil, fmt.Errorf("vault: subscribe %s: %w", subject, err)
		}
		subs = append(subs, sub)
	}
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("vault: subscribe: %w", err)
	}
	go func() {
		<-ctx.Done()
		for _, s := range subs {
			s.Unsubscribe()
		}
	}()
	return v, nil
}

// Ready is closed once the vault follows the provisions and its entries.
func (v *Vault) Ready() <-chan struct{} { return v.kit.Ready() }

// Rotate gives the value at name (a credential key, or a secret's vault
// name) a new value at the next generation; a credential's entry is then
// written again with it. It returns the new value's name and generation,
// or an error wrapping [ErrUnknown] when the vault keeps nothing at name.
func (v *Vault) Rotate(name string) (Value, error) {
	val, err := v.store.Rotate(name)
	if err != nil {
		return Value{}, err
	}
	v.kit.Again(name)
	v.log.Info("vault: rotated", "name", name, "generation", val.Generation)
	return Value{Name: val.Name, Generation: val.Generation}, nil
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
		published = e.Generation
	}
	// The kit's workers ensure credentials concurrently: grouped, a
	// trickle of new ones shares the store's syncs.
	val, held, lost, err := h.v.store.ensureFrom(name, published, true)
	if err != nil {
		return kit.Result{}, err
	}
	if lost {
		h.v.log.Error(sayLost, "key", name, "published", published, "held", held, "issued", val.Generation)
	}
	return kit.Provided(val.Name, val.Generation), nil
}

func (h handler) Retire(_ context.Context, key mesh.ProvisionKey, _ mesh.Provision) error {
	return h.v.store.Remove(key.String())
}

// credential reports whether key is a credential this vault provides and
// holds a value for, and returns it.
func (v *Vault) credential(key string) (kit.Credential, bool) {
	p, ok := v.kit.Provision(key)
	if !ok || p.Provider != v.self || p.Provision != mesh.CredentialProvision {
		return kit.Credential{}, false
	}
	val, ok := v.store.Get(key)
	if !ok {
		return kit.Credential{}, false
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
		if c, ok := v.credential(k); ok {
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

// requester returns the user token of a verb's subject, and the request.
func requester(m *nats.Msg) (string, kit.VaultRequest, string) {
	user := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if !mesh.ValidName(user) {
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
	return user, req, ""
}

func (v *Vault) answerSecret(m *nats.Msg) {
	user, req, why := requester(m)
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
	user, req, why := requester(m)
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
	var req kit.RotateRequest
	if err := jsonhead.Decode(m.Data, &req); err != nil || req.Key == "" {
		v.reply(m, kit.RotateAnswer{Error: whyBadRotate(err)}, "verb", kit.RotateVerb)
		return
	}
	val, err := v.Rotate(req.Key)
	if err != nil {
		v.reply(m, kit.RotateAnswer{Key: req.Key, Error: err.Error()}, "verb", kit.RotateVerb, "key", req.Key)
		return
	}
	v.reply(m, kit.RotateAnswer{Key: req.Key, VaultName: val.Name, Generation: val.Generation}, "verb", kit.RotateVerb, "key", req.Key)
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
