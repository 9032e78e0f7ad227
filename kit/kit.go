package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/intern"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Config says who a provider is and how it answers.
type Config struct {
	// Module is the provider's module name: entries go to "<Module>_bound".
	Module string
	// Node is the node the provider runs on: the kit answers only the
	// provisions whose provider is Module on Node.
	Node string
	// JetStream is the provider's own bus connection's JetStream context.
	JetStream jetstream.JetStream
	// Handler provides and retires keys. Required.
	Handler Handler
	// Log receives what the kit says (retries, keys gone without a
	// warrant, values that do not decode). A key tried again is said once
	// per change of what failed and its why (a failed provide at warn, a
	// waits at info, a failed retire or entry write at error), each retry
	// in between at debug level only, and once when it is done. Nil means
	// slog.Default().
	Log *slog.Logger
	// Workers is how many keys are handled at once. 0 means 4.
	Workers int
	// Window is how many entry writes may be outstanding at once
	// (published to the bus and not yet acknowledged): a worker queues its
	// key's entry and goes on to the next key, and the queued entries are
	// published together, up to Window of them, their acks gathered as one.
	// 0 means 256.
	Window int
	// RetryMin and RetryMax bound the backoff between tries of a key that
	// failed with an error or waits. 0 means 200ms and 1 minute. The
	// backoff (exponential, jittered, from cenkalti/backoff) grows with
	// each try of the key whatever its why says, and starts again once the
	// key is provided or failed for good. Changes that reach a key during
	// its backoff (the seat rewriting the provision's why, the echo of the
	// kit's own entry) do not try it sooner; a change of what it is
	// provided from (the provision's names, a depends-on's reference) does,
	// as does [Kit.Again].
	RetryMin, RetryMax time.Duration
	// Grace bounds the kit's hand-on when its ctx is done (the provider
	// stopped, or its module was unplaced from its node): it takes no new
	// key, lets each handler call in hand run on for up to Grace (their
	// ctx is cancelled only when Grace ends) and writes its outcome as the
	// key's entry; a call that has not returned by then is cut, and its
	// key's entry says so (waits, naming the provider and Grace: what the
	// handler made may be half done, and the provider placed next provides
	// the key again). Then every entry queued is written before
	// [Kit.Done] is closed. 0 means 10 s.
	Grace time.Duration
}

// DefaultGrace is [Config].Grace when it is 0.
const DefaultGrace = 10 * time.Second

// ErrConfig is wrapped by the error [Start] returns for a config that lacks
// a module, a node, a JetStream context or a handler.
var ErrConfig = errors.New("kit: incomplete config")

// Kit answers one provider's provisions. It is safe for concurrent use.
type Kit struct {
	cfg        Config
	log        *slog.Logger
	self       mesh.Ref
	provisions *bus.Copy
	bound      *bus.Copy
	q          *queue
	w          *writer
	ready      chan struct{}
	// stopped is closed once the kit has stopped and handed on (see
	// [Kit.Done]); work is the ctx of the handler's calls, cancelled
	// Grace after the kit's ctx is done (cut).
	stopped chan struct{}
	work    context.Context
	cut     context.CancelFunc

	mu sync.Mutex
	// owns holds the provider's own decodable provisions whose names
	// (provision, local, consumer) are their key's, without those names
	// and the provider (see own); provs holds whole every other decodable
	// value the kit decodes whole (a key out of shape, or a value of the
	// provider whose names are not its key's); others holds of every
	// other decodable provision what a provider reads of it (see
	// [Kit.Provision]). A key is in one of them at most. The provider's
	// own keys ("ours") are those of owns and those of provs whose
	// provider is the kit's. Names that repeat are kept once, in names.
	owns   map[string]own
	provs  map[string]mesh.Provision
	others map[string]other
	names  intern.Table
	// byConsumer indexes the keys held (provs and others) by their first
	// two tokens, "<node>.<consumer>": a consumer's provisions without a
	// scan. A consumer has a few keys on a node, so they are a list, in no
	// order (a small map per consumer cost five times the memory).
	byConsumer map[string][]string
	// heads reads the provider of a value before deciding whether to
	// decode it whole.
	heads headReader
	// dependents indexes ours the other way: a key -> our keys that depend
	// on it, so that a change finds its dependents without a scan.
	dependents map[string]map[string]bool
	done       map[string]string // key -> inputs last provided (final result)
	tries      map[string]*backoff.ExponentialBackOff
	later      map[string]later // keys waiting for their next try
	said       map[string]bool  // keys whose standing entry was said
	retired    map[string]bool  // keys retired on a warrant
	// whys holds, per key tried again, the last failure said in the log
	// (what failed and its why): a retry that fails the same way is said
	// at debug level only, so a key failing for an hour says it once.
	whys map[string]string
	// again holds the keys asked again ([Kit.Again]) since their handling
	// last began: a provide in hand when its key is asked again does not
	// leave the key done, so the handling queued after it provides once
	// more.
	again map[string]bool
}

// Start checks cfg, starts following the provisions and the provider's
// bound bucket (creating it when missing), and returns at once; the kit
// runs until ctx is done. It returns an error wrapping [ErrConfig] for an
// incomplete config.
func Start(ctx context.Context, cfg Config) (*Kit, error) {
	switch {
	case cfg.Module == "", cfg.Node == "":
		return nil, fmt.Errorf("%w: module and node are required", ErrConfig)
	case cfg.JetStream == nil:
		return nil, fmt.Errorf("%w: a JetStream context is required", ErrConfig)
	case cfg.Handler == nil:
		return nil, fmt.Errorf("%w: a handler is required", ErrConfig)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Window <= 0 {
		cfg.Window = 256
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 200 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = time.Minute
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	k := &Kit{
		cfg:        cfg,
		log:        cfg.Log,
		self:       mesh.Ref{Module: cfg.Module, Node: cfg.Node},
		q:          newQueue(),
		ready:      make(chan struct{}),
		stopped:    make(chan struct{}),
		owns:       map[string]own{},
		provs:      map[string]mesh.Provision{},
		others:     map[string]other{},
		dependents: map[string]map[string]bool{},
		byConsumer: map[string][]string{},
		done:       map[string]string{},
		again:      map[string]bool{},
		tries:      map[string]*backoff.ExponentialBackOff{},
		later:      map[string]later{},
		said:       map[string]bool{},
		whys:       map[string]string{},
		retired:    map[string]bool{},
	}
	if k.log == nil {
		k.log = slog.Default()
	}
	k.log = k.log.With("provider", cfg.Module, "node", cfg.Node)
	k.heads.self = k.self
	k.work, k.cut = context.WithCancel(context.WithoutCancel(ctx))
	// The echo of the kit's own writes never reaches OnChange (the writer
	// holds the copy until it has taken them in): a change is another
	// writer's, or the bucket lost, and the key is provided again.
	k.bound = bus.Follow(ctx, cfg.JetStream, mesh.BoundBucket(cfg.Module), bus.Options{
		Create: true, Writes: true, Log: k.log,
		OnChange: func(ch bus.Change) {
			k.mu.Lock()
			delete(k.done, ch.Key)
			k.mu.Unlock()
			k.q.add(ch.Key)
		},
	})
	k.w = newWriter(cfg.JetStream, k.bound, cfg.Window, k.wrote)
	// The provisions are decoded into provs as they come: the copy keeps
	// their revisions only.
	k.provisions = bus.Follow(ctx, cfg.JetStream, mesh.ProvisionsBucket, bus.Options{
		Log: k.log, OnChange: k.took, RevisionsOnly: true,
	})
	go k.run(ctx)
	return k, nil
}

// Run starts the kit (see [Start]) and blocks until ctx is done and the
// kit has handed on its work ([Kit.Done]). It returns nil then, or the
// error of Start.
func Run(ctx context.Context, cfg Config) error {
	k, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-k.Done()
	return nil
}

// Done is closed once the kit has stopped (its ctx is done) and handed on
// its work: no handler call runs any more (each in hand when it stopped
// returned within [Config].Grace, or was cut when it ended), and every
// entry it made is written to the bus (or its write failed, said in the
// log). The provider placed next (on this node or another) takes over
// from the bus: the entries say each key's last outcome. Close the bus
// connection only after Done.
func (k *Kit) Done() <-chan struct{} { return k.stopped }

// Ready is closed once the kit holds the provisions and its entries as they
// were when it started, and handles keys.
func (k *Kit) Ready() <-chan struct{} { return k.ready }

// other is what the kit keeps of a provision whose provider is another
// module: what a provider reads of a key it does not answer (see
// [Kit.Provision] for which keys are kept). Its provision, local and
// consumer are the key's own; its provider is one shared copy (ref), shared by
// every key of that provider (a pointer, not two strings: 56 bytes, not
// 80).
type other struct {
	provider  *mesh.Ref
	state     mesh.State
	reference *mesh.Reference
	dependsOn []string
}

// Provision returns the seat's provision at key as the kit's copy holds it,
// and whether it holds one. Any key may be asked, not only the provider's:
// the provider's own provisions are held whole. Of another provider's key
// the kit keeps what a provider reads of a key it does not answer
// (provision, local and consumer, as its key names them; provider, state,
// depends-on and reference; not its why, ask, warrant or time), and only
// when that may matter to this provider: the key depends on other keys (a
// consumer's or a provider's credentials are found through them), it is
// provided (a key of this provider may depend on it), or it is or was this
// provider's. Another provider's key that is not provided and depends on
// nothing is not held.
func (k *Kit) Provision(key string) (mesh.Provision, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.provision(key)
}

// provision is [Kit.Provision] with k.mu held.
func (k *Kit) provision(key string) (mesh.Provision, bool) {
	if m, ok := k.owns[key]; ok {
		return m.provision(key, k.self), true
	}
	if p, ok := k.provs[key]; ok {
		return p, true
	}
	o, ok := k.others[key]
	if !ok {
		return mesh.Provision{}, false
	}
	return o.provision(key), true
}

// provision returns o as a provision at key (whose shape was checked when
// o was kept).
func (o other) provision(key string) mesh.Provision {
	pk, _ := mesh.ParseProvisionKey(key)
	return mesh.Provision{Provision: pk.Provision, Local: pk.Local, Consumer: mesh.Ref{Module: pk.Consumer, Node: pk.Node},
		Provider: *o.provider, State: o.state, DependsOn: o.dependsOn, Reference: o.reference}
}

// own is what the kit keeps of a provision of its own provider whose
// provision, local and consumer are its key's own (as the seat writes
// every provision): every other field of the value, which [own.provision]
// gives back whole. Kept this way, a key of the provider costs about half
// the room of a whole [mesh.Provision] and fewer pointers.
type own struct {
	state     mesh.State
	why       string
	dependsOn []string
	reference *mesh.Reference
	ask       string
	warrant   *mesh.Warrant
	at        time.Time
}

// ownOf returns what the kit keeps of p, a provision of self at key pk,
// and whether p's names are pk's own (if not, p is kept whole).
func ownOf(pk mesh.ProvisionKey, p *mesh.Provision) (own, bool) {
	if p.Provision != pk.Provision || p.Local != pk.Local || p.Consumer != (mesh.Ref{Module: pk.Consumer, Node: pk.Node}) {
		return own{}, false
	}
	return own{state: p.State, why: p.Why, dependsOn: p.DependsOn, reference: p.Reference, ask: p.Ask, warrant: p.Warrant, at: p.At}, true
}

// provision returns m as the provision of self at key (whose shape was
// checked when m was kept).
func (m own) provision(key string, self mesh.Ref) mesh.Provision {
	pk, _ := mesh.ParseProvisionKey(key)
	return mesh.Provision{Provision: pk.Provision, Local: pk.Local, Consumer: mesh.Ref{Module: pk.Consumer, Node: pk.Node},
		Provider: self, State: m.state, Why: m.why, DependsOn: m.dependsOn, Reference: m.reference, Ask: m.ask, Warrant: m.warrant, At: m.at}
}

// Provisions calls f for every provision the kit's copy holds (not only the
// provider's; of the others those and what [Kit.Provision] says), in no
// order, until f returns false. f must not call the kit.
func (k *Kit) Provisions(f func(key string, p mesh.Provision) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, m := range k.owns {
		if !f(key, m.provision(key, k.self)) {
			return
		}
	}
	for key, p := range k.provs {
		if !f(key, p) {
			return
		}
	}
	for key, o := range k.others {
		if !f(key, o.provision(key)) {
			return
		}
	}
}

// Ours calls f for every provision of the kit's copy whose provider is
// this module on this node (the keys it answers), in no order, until f
// returns false; it costs the provider's keys, not the copy. f must not
// call the kit.
func (k *Kit) Ours(f func(key string, p mesh.Provision) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, m := range k.owns {
		if !f(key, m.provision(key, k.self)) {
			return
		}
	}
	for key, p := range k.provs {
		if p.Provider == k.self && !f(key, p) {
			return
		}
	}
}

// held returns how many provisions the kit holds whole (the provider's own)
// and how many only in part (every other one, see [Kit.Provision]).
func (k *Kit) held() (whole, part int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.owns) + len(k.provs), len(k.others)
}

// Entry returns the provider's entry at key (in "<module>_bound"), as it
// will be once the kit's writes queued for it are done, and whether there
// is one: what the provider last said of the key, on the bus. A value that
// does not decode is none. A handler may read it in Provide (the vault
// reads the generation it last handed out). It does not block on the bus.
func (k *Kit) Entry(key string) (mesh.Entry, bool) {
	b, ok := k.w.entry(key)
	if !ok {
		return mesh.Entry{}, false
	}
	var e mesh.Entry
	if err := jsonhead.Unmarshal(b, &e); err != nil {
		return mesh.Entry{}, false
	}
	return e, true
}

// Again handles key once more, as if its provision had changed: a provider
// calls it when something outside the bus changed (a rotated credential).
// A key whose provide is in hand is provided once more after it: that
// provide may have read what changed before it changed.
func (k *Kit) Again(key string) {
	k.mu.Lock()
	delete(k.done, key)
	delete(k.later, key)
	k.again[key] = true
	k.mu.Unlock()
	k.q.add(key)
}

// took takes one change of the provisions copy: it keeps the value (whole
// when it is the provider's, in part when not) and queues the key if it is
// ours, and every key of ours that depends on it.
//
// Most of the bucket is other providers' (two thirds of it for the vault
// at a cold start), so a value is first read only as far as its head (see
// [headReader]): its provider, state, reference and depends-on, every
// other field skipped. A value whose head names the provider, whose key is
// out of shape, or that the head does not read as plain (see errNotPlain)
// is decoded whole, its names matched exactly ([jsonhead.Unmarshal]: a
// name in another case is no field, so such a value is not the
// provider's); one that does not decode is said and left out. Another provider's value whose head reads is kept in part even if a
// field the kit does not read would not decode (the seat, which decodes
// every provision, says that value).
func (k *Kit) took(ch bus.Change) {
	var (
		keep  = keepNone
		o     head // another provider's value: what is kept of it
		m     own
		whole *mesh.Provision // decoded only when the head does not do
	)
	if !ch.Deleted {
		pk, keyErr := mesh.ParseProvisionKey(ch.Key)
		h, err := k.heads.read(ch.Value)
		if keyErr == nil && err == nil && h.provider != k.self {
			o, keep = h, keepOther
		} else if keep, o, m, whole, err = k.decode(ch.Value, pk, keyErr); err != nil {
			k.log.Error("kit: a provision does not decode; it is left out", "bucket", ch.Bucket, "key", ch.Key, "err", err)
		}
	}
	_, hasEntry := k.w.entry(ch.Key)
	k.mu.Lock()
	oldDeps, wasOurs := k.ourDependsOn(ch.Key)
	// Another provider's key is kept only when it may matter to this
	// provider: it depends on other keys (a verb answers a consumer or a
	// provider the credentials its keys depend on), it is provided (a key
	// of this provider may depend on it: its reference is provided from),
	// or it is or was this provider's. Any other (asked, failed, waits or
	// retiring, depending on nothing) would be read by nothing.
	if keep == keepOther && len(o.dependsOn) == 0 && o.state != mesh.Provided && !wasOurs && !hasEntry {
		keep = keepNone
	}
	delete(k.owns, ch.Key)
	delete(k.provs, ch.Key)
	delete(k.others, ch.Key)
	k.indexConsumer(ch.Key, keep != keepNone)
	var deps []string // our key's depends-on, when the value is ours
	ours := false
	switch keep {
	case keepOwn:
		m.state = mesh.State(k.names.String(string(m.state)))
		m.why = k.names.String(m.why)
		k.owns[ch.Key] = m
		deps, ours = m.dependsOn, true
	case keepWhole:
		k.names.Provision(whole)
		k.provs[ch.Key] = *whole
		if whole.Provider == k.self {
			deps, ours = whole.DependsOn, true
		}
	case keepOther:
		k.others[ch.Key] = other{provider: k.ref(o.provider), state: mesh.State(k.names.String(string(o.state))), reference: o.reference, dependsOn: o.dependsOn}
	}
	dependents := make([]string, 0, len(k.dependents[ch.Key]))
	for key := range k.dependents[ch.Key] {
		dependents = append(dependents, key)
	}
	k.unindex(ch.Key, oldDeps)
	if ours {
		for _, d := range deps {
			if k.dependents[d] == nil {
				k.dependents[d] = map[string]bool{}
			}
			k.dependents[d][ch.Key] = true
		}
	}
	k.mu.Unlock()
	// A key that is not ours and was not, with no entry of ours, has
	// nothing to handle: most of the bucket for most providers.
	if ours || wasOurs || hasEntry {
		k.q.add(ch.Key)
	}
	for _, key := range dependents {
		k.q.add(key)
	}
}

// keep says what the kit keeps of a provision value.
type keep int

const (
	// keepNone: nothing (deleted, does not decode, or another provider's
	// that matters to nothing, see [Kit.took]).
	keepNone keep = iota
	// keepOther: another provider's value in part, as an other.
	keepOther
	// keepOwn: the provider's own value whose names are its key's, as an
	// own.
	keepOwn
	// keepWhole: any other value (a key out of shape, or a value of the
	// provider whose names are not its key's), whole.
	keepWhole
)

// decode decodes value whole, at key pk (keyErr when the key is out of
// shape), and returns what the kit keeps of it: o for keepOther (another
// provider's value whose head was not plain), m for keepOwn, whole for
// keepWhole. It decodes with [jsonhead.Unmarshal] (the spec's names,
// exactly), and returns its error for a value that does not decode.
func (k *Kit) decode(value []byte, pk mesh.ProvisionKey, keyErr error) (kind keep, o head, m own, whole *mesh.Provision, err error) {
	// Allocated here, not in took: most values never get this far.
	p := new(mesh.Provision)
	if err := jsonhead.Unmarshal(value, p); err != nil {
		return keepNone, o, m, nil, err
	}
	switch {
	case keyErr != nil:
		return keepWhole, o, m, p, nil
	case p.Provider != k.self:
		o = head{provider: p.Provider, state: p.State, reference: p.Reference, dependsOn: p.DependsOn}
		return keepOther, o, m, nil, nil
	}
	var ok bool
	if m, ok = ownOf(pk, p); ok {
		return keepOwn, o, m, nil, nil
	}
	return keepWhole, o, m, p, nil
}

// ref returns the kit's one shared copy of r ([intern.Table.SharedRef]).
// k.mu is held.
func (k *Kit) ref(r mesh.Ref) *mesh.Ref { return k.names.SharedRef(r) }

// ourDependsOn returns the depends-on of key when the kit holds it as one
// of the provider's own keys, and whether it does. k.mu is held.
func (k *Kit) ourDependsOn(key string) ([]string, bool) {
	if m, ok := k.owns[key]; ok {
		return m.dependsOn, true
	}
	if p, ok := k.provs[key]; ok && p.Provider == k.self {
		return p.DependsOn, true
	}
	return nil, false
}

// indexConsumer puts key into byConsumer (held) or takes it out. k.mu is
// held.
func (k *Kit) indexConsumer(key string, held bool) {
	c := consumerOf(key)
	keys := k.byConsumer[c]
	i := slices.Index(keys, key)
	switch {
	case held && i < 0:
		k.byConsumer[c] = append(keys, key)
	case !held && i >= 0:
		// The last key takes the place of the one that goes: a
		// consumer's keys are in no order.
		keys[i] = keys[len(keys)-1]
		keys[len(keys)-1] = ""
		if keys = keys[:len(keys)-1]; len(keys) == 0 {
			delete(k.byConsumer, c)
		} else {
			k.byConsumer[c] = keys
		}
	}
}

// consumerOf returns the first two tokens of a provision key,
// "<node>.<consumer>" (the whole key when it has fewer).
func consumerOf(key string) string {
	i := strings.IndexByte(key, '.')
	if i < 0 {
		return key
	}
	if j := strings.IndexByte(key[i+1:], '.'); j >= 0 {
		return key[:i+1+j]
	}
	return key
}

// ConsumerProvisions calls f for every provision the kit's copy holds whose
// key starts "<node>.<consumer>." (the provisions of consumer on node, as the
// seat writes them), in no order, until f returns false; it costs what it
// finds, not a pass over every provision. f must not call the kit.
func (k *Kit) ConsumerProvisions(node, consumer string, f func(key string, p mesh.Provision) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range k.byConsumer[node+"."+consumer] {
		p, ok := k.provision(key)
		if ok && !f(key, p) {
			return
		}
	}
}

// unindex drops key, whose depends-on were deps, from the dependents
// index. k.mu is held.
func (k *Kit) unindex(key string, deps []string) {
	for _, d := range deps {
		if set := k.dependents[d]; set != nil {
			delete(set, key)
			if len(set) == 0 {
				delete(k.dependents, d)
			}
		}
	}
}

func (k *Kit) run(ctx context.Context) {
	defer close(k.stopped)
	defer k.cut()
	for _, c := range []*bus.Copy{k.provisions, k.bound} {
		select {
		case <-c.Ready():
		case <-ctx.Done():
			k.q.close()
			return
		}
	}
	if _, err := k.bound.KV(ctx); err != nil {
		k.q.close()
		return
	}
	k.bound.Range(func(key string, _ bus.Item) bool { k.q.add(key); return true })
	// The writer outlives ctx: what the workers make during the grace is
	// written before the kit is done.
	wctx, stopWrites := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWrites()
	flushed := make(chan struct{})
	stopWriter := make(chan struct{})
	go func() {
		defer close(flushed)
		k.w.run(wctx, stopWriter)
	}()
	close(k.ready)
	var wg sync.WaitGroup
	for range k.cfg.Workers {
		wg.Go(func() {
			for {
				key, ok := k.q.get()
				if !ok {
					return
				}
				k.handle(key)
				k.q.finish(key)
			}
		})
	}
	<-ctx.Done()
	k.q.close() // no new key: the workers end once their key is handled
	k.handOn(&wg, stopWriter, flushed)
}

// handOn waits, once the kit's ctx is done, for the workers to end (each
// handler call in hand returns, or is cut when the grace ends) and for the
// writer to write every entry queued, and says what was handed on.
func (k *Kit) handOn(wg *sync.WaitGroup, stopWriter chan struct{}, flushed chan struct{}) {
	inHand := k.q.inHand()
	workers := make(chan struct{})
	go func() {
		wg.Wait()
		close(workers)
	}()
	grace := time.NewTimer(k.cfg.Grace)
	defer grace.Stop()
	select {
	case <-workers:
	case <-grace.C:
		k.log.Warn("kit: stopping: the grace ended with handler calls in hand; they are cut", "grace", k.cfg.Grace)
		k.cut()
		select {
		case <-workers:
		case <-time.After(k.w.timeout):
			// A handler that ignores its ctx: its outcome is lost,
			// and its key's entry says what it said last.
			k.log.Error("kit: stopping: a handler call did not return once cut; the kit stops without its outcome", "waited", k.w.timeout)
		}
	}
	close(stopWriter)
	select {
	case <-flushed:
	case <-time.After(2 * k.w.timeout):
		k.log.Error("kit: stopping: the entries queued could not all be written", "waited", 2*k.w.timeout)
	}
	k.cut()
	k.log.Info("kit: stopped; its work is handed on: every outcome made is in its entries", "in_hand", inHand)
}

// handle brings one key's entry to what its provision asks.
func (k *Kit) handle(key string) {
	k.mu.Lock()
	p, ok := k.provision(key)
	retired := k.retired[key]
	k.mu.Unlock()
	_, hasEntry := k.w.entry(key)

	if !ok || p.Provider != k.self {
		k.mu.Lock()
		_, provided := k.done[key]
		_, tried := k.later[key]
		k.mu.Unlock()
		k.forget(key)
		if ok && hasEntry && !provided && !tried {
			// An entry this kit never wrote, of a key another instance
			// answers: the one before it (the key not moved here yet)
			// or the one after.
			k.log.Debug(sayMoved, "key", key, "bucket", mesh.BoundBucket(k.cfg.Module), "now", p.Provider.Module+" on "+p.Provider.Node)
		} else if hasEntry && !retired {
			k.sayOnce(key, func() {
				if ok {
					k.log.Warn(sayMoved, "key", key, "bucket", mesh.BoundBucket(k.cfg.Module), "now", p.Provider.Module+" on "+p.Provider.Node)
				} else {
					k.log.Warn(sayGone, "key", key, "bucket", mesh.BoundBucket(k.cfg.Module))
				}
			})
		}
		return
	}
	k.mu.Lock()
	delete(k.said, key)
	k.mu.Unlock()

	if p.State == mesh.Retiring {
		if p.Warrant == nil || p.Warrant.Option != "yes" || !hasEntry {
			return // kept: no warrant yet, the operator said no, or already retired
		}
		if k.backingOff(key, "retire") {
			return
		}
		// A key out of shape was failed without the handler: nothing was
		// made for it, so only its entry goes.
		if pk, err := mesh.ParseProvisionKey(key); err == nil {
			if err := k.cfg.Handler.Retire(k.work, pk, p); err != nil {
				if k.work.Err() == nil {
					k.retireFailed(key, err)
				} else {
					// Cut by the end of the grace: the entry stays, and
					// the provider placed next retires it on the warrant.
					k.log.Warn("kit: stopping: a retire was cut when the grace ended; its entry stays for the provider placed next", "key", key, "err", err)
				}
				return
			}
		}
		if d := k.w.del(key); d != nil {
			select {
			case <-d.wait:
			case <-k.work.Done():
				return
			}
			if d.err != nil {
				if k.work.Err() == nil {
					wait := k.retry(key, "retire")
					k.logChange(key, "delete", d.err.Error(), slog.LevelError, "kit: the entry of a retired key could not be deleted", "key", key, "err", d.err, "retry_in", wait)
				}
				return
			}
		}
		k.mu.Lock()
		k.retired[key] = true
		delete(k.done, key)
		delete(k.tries, key)
		delete(k.later, key)
		delete(k.whys, key)
		k.mu.Unlock()
		k.log.Info("kit: retired on the operator's warrant", "key", key, "ask", p.Warrant.Ask, "by", p.Warrant.By.Who)
		return
	}

	k.mu.Lock()
	delete(k.retired, key)
	delete(k.again, key) // asked again from now on: provided once more after this
	inputs, waiting := k.inputs(key, p)
	last := k.done[key]
	k.mu.Unlock()
	if waiting != "" {
		k.log.Debug("kit: waits for a key it depends on", "key", key, "depends-on", waiting)
		return
	}
	if last == inputs && hasEntry {
		return
	}
	// A key that failed or waits is tried again when its backoff ends, not
	// at every change that reaches it meanwhile (the seat's rewrite of its
	// why, the echo of its own entry), unless what it is provided from
	// changed.
	if k.backingOff(key, inputs) {
		return
	}

	var res Result
	retry := false
	pk, err := mesh.ParseProvisionKey(key)
	if err != nil {
		res = Failing(whyOutOfShape(key, err))
	} else if res, err = k.cfg.Handler.Provide(k.work, pk, p); err != nil {
		if k.work.Err() != nil {
			// Cut by the end of the grace: what the handler made may
			// be half done; the entry says so, and the provider
			// placed next provides the key again.
			res = Waiting(whyCut(k.self, k.cfg.Grace, err))
		} else {
			res = Failing(err.Error())
		}
		retry = true
	}
	switch res.State {
	case mesh.Provided, mesh.Failed:
	case mesh.Waits:
		retry = true
	default:
		res = Failing(whyBadState(k.cfg.Module, string(res.State)))
	}
	// The entry is queued, not awaited: the key counts as done (or as
	// backing off) from now on, and a write that fails makes it be tried
	// again (see wrote).
	b, err := json.Marshal(mesh.Entry{State: res.State, Why: res.Why, VaultName: res.VaultName, Generation: res.Generation, Connection: res.Connection, Next: res.Next})
	if err != nil {
		res, retry = Failing(fmt.Sprintf("kit: entry %s: %v", key, err)), true
		b, _ = json.Marshal(mesh.Entry{State: res.State, Why: res.Why})
	}
	k.w.put(key, b, inputs)
	if k.work.Err() != nil {
		// Cut: its entry says so; the provider placed next tries it.
		k.log.Info("kit: stopping: a provide was cut when the grace ended; its entry says so", "key", key, "why", res.Why)
		return
	}
	if retry {
		// Not done: a retry, or a return to the inputs of the key's last
		// success, provides it again (it was taken as done, and the key
		// stayed waits or failed).
		k.mu.Lock()
		delete(k.done, key)
		k.mu.Unlock()
		d := k.retry(key, inputs)
		level := slog.LevelInfo
		if res.State == mesh.Failed {
			level = slog.LevelWarn
		}
		k.logChange(key, "provide", res.Why, level, "kit: tried again later", "key", key, "state", res.State, "why", res.Why, "retry_in", d)
		return
	}
	k.mu.Lock()
	if !k.again[key] {
		k.done[key] = inputs
	}
	delete(k.later, key)
	_, tried := k.whys[key]
	delete(k.whys, key)
	k.mu.Unlock()
	if tried {
		k.log.Info("kit: done after it was tried again", "key", key, "state", res.State)
	}
}

// logChange says msg with args at level when what failed (kind) and why
// differ from the last failure said for key, and at debug level otherwise:
// a key tried again and again for the same reason is said once per change
// of its why, not once per try.
func (k *Kit) logChange(key, kind, why string, level slog.Level, msg string, args ...any) {
	what := kind + "\x00" + why
	k.mu.Lock()
	same := k.whys[key] == what
	k.whys[key] = what
	k.mu.Unlock()
	if same {
		level = slog.LevelDebug
	}
	k.log.Log(context.Background(), level, msg, args...)
}

// retireFailed takes a retire that failed with err: the key's entry stays,
// failed with the error's text (whyRetireFailed), so that the seat says in
// the retiring key why it is not removed yet; the key is no longer done
// (needed again, it is provided anew), and retire is tried again with
// backoff.
func (k *Kit) retireFailed(key string, err error) {
	b, _ := json.Marshal(mesh.Entry{State: mesh.Failed, Why: whyRetireFailed(err)})
	k.mu.Lock()
	delete(k.done, key)
	k.mu.Unlock()
	k.w.put(key, b, "retire")
	d := k.retry(key, "retire")
	k.logChange(key, "retire", err.Error(), slog.LevelError, "kit: retire failed; the entry stays and retire is tried again", "key", key, "err", err, "retry_in", d)
}

// wrote takes the outcome of an entry write (one not replaced by a newer
// write of its key). A key whose entry is on the bus and that is not
// waiting for another try has its backoff start again. A key whose write
// failed is no longer done, and is tried again with backoff (unless a
// try is already due: a result that failed or waits).
func (k *Kit) wrote(w *write, err error) {
	k.mu.Lock()
	if err == nil {
		if _, waiting := k.later[w.key]; !waiting {
			delete(k.tries, w.key)
		}
		k.mu.Unlock()
		return
	}
	delete(k.done, w.key)
	_, due := k.later[w.key]
	k.mu.Unlock()
	if due {
		k.logChange(w.key, "write", err.Error(), slog.LevelError, "kit: the entry could not be written; it is written at the key's next try", "key", w.key, "err", err)
		return
	}
	d := k.retry(w.key, w.inputs)
	k.logChange(w.key, "write", err.Error(), slog.LevelError, "kit: the entry could not be written; tried again later", "key", w.key, "err", err, "retry_in", d)
}

// inputs returns what a provide of p at key depends on, as text, or the
// first key it depends on that is not provided yet. k.mu is held.
//
// The text starts with the provision's names: when they are the key's own
// (as the seat writes every provision), the key says them and they are one
// NUL byte (keyNames); otherwise a 0x01 byte and the four names, each ended
// by a NUL byte, which no name holds. Then come the keys it depends on,
// each with the reference it is provided with. A key that depends on
// nothing, with its key's names, has the constant text "\x00": the inputs
// kept for each key done cost no allocation.
func (k *Kit) inputs(key string, p mesh.Provision) (inputs, waiting string) {
	named := keyNames(key, &p)
	if named && len(p.DependsOn) == 0 {
		return "\x00", ""
	}
	var b strings.Builder
	// One allocation for the names (a depends-on key and its reference
	// may grow it once more).
	if named {
		b.Grow(1 + 96*len(p.DependsOn))
		b.WriteByte(0)
	} else {
		b.Grow(1 + len(p.Provision) + len(p.Local) + len(p.Consumer.Module) + len(p.Consumer.Node) + 4 + 96*len(p.DependsOn))
		b.WriteByte(1)
		for _, s := range []string{p.Provision, p.Local, p.Consumer.Module, p.Consumer.Node} {
			b.WriteString(s)
			b.WriteByte(0)
		}
	}
	for _, d := range p.DependsOn {
		dp, ok := k.provision(d)
		if !ok || dp.State != mesh.Provided {
			return "", d
		}
		b.WriteString(d)
		b.WriteByte(0)
		if r := dp.Reference; r != nil {
			b.WriteString(r.ID)
			b.WriteByte(0)
			b.WriteString(strconv.FormatInt(r.Generation, 10))
		} else {
			b.WriteString("\x00-")
		}
		b.WriteByte(0)
	}
	return b.String(), ""
}

// keyNames reports whether key is "<node>.<consumer>.<provision>[.<local>]"
// of p's consumer's node, consumer, provision and local, none of which
// holds a dot (so that the key names exactly these four).
func keyNames(key string, p *mesh.Provision) bool {
	rest := key
	for i, name := range [...]string{p.Consumer.Node, p.Consumer.Module, p.Provision, p.Local} {
		if i == 3 && name == "" {
			return rest == ""
		}
		if i > 0 {
			var ok bool
			if rest, ok = strings.CutPrefix(rest, "."); !ok {
				return false
			}
		}
		var ok bool
		if name == "" || strings.IndexByte(name, '.') >= 0 {
			return false
		}
		if rest, ok = strings.CutPrefix(rest, name); !ok {
			return false
		}
	}
	return rest == ""
}

// later is when a key that failed or waits is tried again, and what it was
// tried with ("retire" for a retire).
type later struct {
	at     time.Time
	inputs string
}

// backingOff reports whether key waits for its next try: its backoff has
// not ended and it is to be tried with the same inputs as last time.
func (k *Kit) backingOff(key, inputs string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.later[key]
	return ok && l.inputs == inputs && time.Now().Before(l.at)
}

// retry schedules key to be handled again after its next backoff (tried
// with inputs), and returns that wait. The backoff grows with each retry of
// the key, whatever it says, up to RetryMax, and starts again once the key
// is done.
func (k *Kit) retry(key, inputs string) time.Duration {
	k.mu.Lock()
	bo, ok := k.tries[key]
	if !ok {
		bo = backoff.NewExponentialBackOff()
		bo.InitialInterval = k.cfg.RetryMin
		bo.MaxInterval = k.cfg.RetryMax
		bo.Reset()
		k.tries[key] = bo
	}
	d := bo.NextBackOff()
	k.later[key] = later{at: time.Now().Add(d), inputs: inputs}
	k.mu.Unlock()
	time.AfterFunc(d, func() { k.q.add(key) })
	return d
}

func (k *Kit) forget(key string) {
	k.mu.Lock()
	delete(k.done, key)
	delete(k.again, key)
	delete(k.tries, key)
	delete(k.later, key)
	delete(k.whys, key)
	k.mu.Unlock()
}

func (k *Kit) sayOnce(key string, say func()) {
	k.mu.Lock()
	already := k.said[key]
	k.said[key] = true
	k.mu.Unlock()
	if !already {
		say()
	}
}
