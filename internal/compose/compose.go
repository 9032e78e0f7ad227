// Package compose turns the mesh, as the seat's watched copies hold it, into
// what the seat writes for one node: its plans, its refusals and the states
// of its provisions. It is pure: a [State] in, a [Result] out; the seat does
// every read from and write to the bus.
//
// [Node] composes a node twice (spec 4): at the wanted builds, whose plans
// are written, and at the newest builds, so that a build that adds a
// requirement has its provision asked before its want names it. [Judge]
// re-judges single keys when a provider's entry or have changes, without
// composing their node.
package compose

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Need is a provision key that a composition found needed: who consumes it,
// who provides it, and the keys it depends on.
type Need struct {
	Key       string
	Provision string
	Local     string
	Consumer  mesh.Ref
	Provider  mesh.Ref
	DependsOn []string
	// NoProvider, when set, says why no provider can answer one of the keys
	// this key depends on; the key then stays asked with that why.
	NoProvider string
}

// Result says what composing a node did. Maps and slices hold only what
// changes: the seat writes exactly these.
type Result struct {
	Node string
	// Plans to write, <node>.<module> -> plan JSON (only bytes that differ).
	Plans map[string][]byte
	// PlansRemoved are plan keys of modules no longer composed on the node.
	PlansRemoved []string
	// Refusals to write (only where the why changed), <node>.<module>.
	Refusals map[string]mesh.Refusal
	// RefusalsRemoved are refusals of modules that compose again (or are no
	// longer placed).
	RefusalsRemoved []string
	// Provisions to write, key -> value (only keys that say something new).
	Provisions map[string]mesh.Provision
	// Retiring lists the keys that turned retiring in this composition.
	Retiring []string
	// Asks are the asks to publish on asks.mesh-provisioner: one for each
	// retiring key that has none. The keys in Provisions already name them.
	Asks []mesh.Ask
	// Retired are keys to delete: approved with yes, and their provider's
	// entry is gone.
	Retired []string
	// RetiredWhy says, per key of Retired, what its provider removed
	// ([retire.WhyRetired]): the seat logs it as it deletes the key.
	RetiredWhy map[string]string
	// Withdrawn maps keys needed again before the operator answered to the
	// asks they no longer need: the seat withdraws them from the router.
	Withdrawn map[string]string
	// WithdrawnWhy says, per key of Withdrawn, why its ask is withdrawn
	// when it is not that the key is needed again.
	WithdrawnWhy map[string]string
	// Held maps each held module to its why.
	Held map[string]string
	// Problems are what went wrong short of holding a module.
	Problems []string
	// Needed holds every key this composition found needed (both builds),
	// including keys of other nodes (a provider's shared credential).
	Needed map[string]*Need
	// Requires lists, sorted, the modules that the node's modules require
	// (also where they are held for it): a change to one of them composes
	// this node again.
	Requires []string
	// Compose and Judge are how long the two phases took.
	Compose, Judge time.Duration
}

// Changed reports whether the result writes or removes anything.
func (r *Result) Changed() bool {
	return len(r.Plans)+len(r.PlansRemoved)+len(r.Refusals)+len(r.RefusalsRemoved)+len(r.Provisions)+len(r.Retired)+len(r.Withdrawn) > 0
}

// composer holds one node's composition while it runs. Each call of [Node]
// has its own: a composition shares no memory with another, and its result
// shares none with the scratch memory below.
type composer struct {
	st   State
	node string
	now  time.Time
	opts options
	res  *Result
	// requires lists the modules the node's modules require, each once; it
	// becomes res.Requires.
	requires []string
	// keys and plans are the node's provision and plan keys as the State
	// holds them (sorted): a key the composition builds is taken from
	// them, so that a key that exists makes no new string (intern).
	keys, plans []string

	// Scratch memory, reused from module to module: nothing in res points
	// into it.
	plan  mesh.Plan    // the plan being composed, encoded before the next
	pb    []byte       // the plan's JSON (appendPlan)
	buf   bytes.Buffer // or encoding/json's, when appendPlan cannot
	enc   *json.Encoder
	kb    []byte  // a key being built
	needs []*Need // what the module being composed needs, then every need to judge
	judge judge
	// trunks backs judge.trunks: a node's modules require a few providers.
	trunks [8]trunk

	// Blocks that needs and depends-on lists of res are cut from: handed
	// out once each, never reused.
	slab []Need
	deps []string
}

// Option changes how [Node] and [Judge] work.
type Option func(*options)

type options struct {
	askTTL    time.Duration
	answerers *retire.Answerers
}

// AskTTL sets how long a retiring key's ask stays open. Zero means
// [retire.DefaultTTL].
func AskTTL(d time.Duration) Option { return func(o *options) { o.askTTL = d } }

// Answerers sets who may sign an operator's answer ([retire.Trust]): a
// warrant without such a signature is refused. Nil (the default) takes the
// router's word, as on a mesh with no accounts.
func Answerers(a *retire.Answerers) Option { return func(o *options) { o.answerers = a } }

func optionsOf(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Node composes node from st at time now (spec 4, 5 and 6) and returns what
// changes. It never fails: a module that cannot be composed is held with a
// why, and everything else of the node is still composed.
//
// Node is safe for concurrent use when st is (each call reads st only). It
// keeps no memory between calls; the result it returns is the caller's.
func Node(st State, node string, now time.Time, opts ...Option) *Result {
	start := time.Now()
	c := &composer{
		st:   st,
		node: node,
		now:  now,
		opts: optionsOf(opts),
		res: &Result{
			Node:       node,
			Plans:      map[string][]byte{},
			Refusals:   map[string]mesh.Refusal{},
			Provisions: map[string]mesh.Provision{},
			Held:       map[string]string{},
		},
	}
	placed, err := st.Placed(node)
	if err != nil {
		// Without a placement nothing can be said to be unneeded: leave the
		// node as it is.
		c.res.Problems = append(c.res.Problems, problemPlacement(node, err))
		c.res.Needed = map[string]*Need{}
		return c.res
	}
	c.keys = st.ProvisionsOf(node)
	c.plans = st.PlansOf(node)
	// A settled node needs about the keys it has, and a few of other
	// nodes (shared credentials).
	c.res.Needed = make(map[string]*Need, len(c.keys)+4)
	c.slab = make([]Need, 0, max(len(c.keys)+4, 8))
	c.needs = make([]*Need, 0, len(c.keys)+8)
	c.judge.trunks = c.trunks[:0]
	// One block for the byte buffers, sized for most plans, keys and whys
	// (each grows on its own past its part).
	b := make([]byte, 1536)
	c.pb, c.kb, c.judge.why = b[:0:1024], b[1024:1024:1152], b[1152:1152]
	// composed holds the modules composed (not held); a module placed twice
	// is composed once.
	composed := make([]string, 0, len(placed))
	for i, m := range placed {
		if slices.Contains(placed[:i], m) {
			continue
		}
		if c.module(m) {
			composed = append(composed, m)
		}
	}
	c.sweepPlans(composed)
	c.sweepRefusals()
	sort.Strings(c.requires)
	c.res.Requires = c.requires
	c.res.Compose = time.Since(start)

	start = time.Now()
	c.judgeNode()
	c.res.Judge = time.Since(start)
	return c.res
}

// module composes m on the node at its wanted build and at its newest. It
// reports whether m is composed (not held).
func (c *composer) module(m string) bool {
	if !mesh.ValidName(m) {
		c.hold(m, whyBadModuleName(m))
		return false
	}
	newest, hasNewest := c.st.Newest(m)
	build, why := c.wanted(m, newest, hasNewest)
	if why != "" {
		c.hold(m, why)
		return false
	}
	c.needs = c.needs[:0]
	if why := c.at(m, build); why != "" {
		c.hold(m, why)
		return false
	}
	c.putPlan(m) // before the newest build's composition takes c.plan
	if hasNewest && newest.Fingerprint != build.Fingerprint {
		wanted := len(c.needs)
		if why := c.at(m, newest); why != "" {
			c.needs = c.needs[:wanted]
			c.res.Problems = append(c.res.Problems, problemNewest(m, newest.Fingerprint, why))
		}
	}
	for _, n := range c.needs {
		if _, ok := c.res.Needed[n.Key]; !ok {
			c.res.Needed[n.Key] = n
		}
	}
	return true
}

// putPlan encodes c.plan, the plan of m, and puts it into the result when
// its bytes differ from the stored plan's. The bytes are those of
// json.Marshal (appendPlan, or encoding/json), made in scratch memory and
// copied only when written.
func (c *composer) putPlan(m string) {
	c.kb = mesh.NodeModule{Node: c.node, Module: m}.AppendTo(c.kb[:0])
	key := intern(c.plans, c.kb)
	b, ok := appendPlan(c.pb[:0], &c.plan)
	c.pb = b
	if !ok {
		if c.enc == nil {
			c.enc = json.NewEncoder(&c.buf)
		}
		c.buf.Reset()
		_ = c.enc.Encode(&c.plan) // a plan always encodes; into memory, nothing fails
		b = bytes.TrimSuffix(c.buf.Bytes(), []byte("\n"))
	}
	if old, ok := c.st.Plan(key); !ok || string(old) != string(b) {
		c.res.Plans[key] = bytes.Clone(b)
	}
}

// intern returns key as a string: the one of sorted that equals it, when
// there is one, so that a key that exists makes no new string.
func intern(sorted []string, key []byte) string {
	i, j := 0, len(sorted)
	for i < j {
		h := int(uint(i+j) >> 1)
		if sorted[h] < string(key) {
			i = h + 1
		} else {
			j = h
		}
	}
	if i < len(sorted) && sorted[i] == string(key) {
		return sorted[i]
	}
	return string(key)
}

// need returns a new need, cut from c.slab.
func (c *composer) need() *Need {
	if len(c.slab) == cap(c.slab) {
		c.slab = make([]Need, 0, 16)
	}
	c.slab = c.slab[:len(c.slab)+1]
	return &c.slab[len(c.slab)-1]
}

// require notes that the node's modules require module.
func (c *composer) require(module string) {
	if c.requires == nil {
		c.requires = make([]string, 0, 8)
	}
	if !slices.Contains(c.requires, module) {
		c.requires = append(c.requires, module)
	}
}

// wanted picks the build m is composed at on the node: its want's; with no
// want, the one its have runs; else its newest.
func (c *composer) wanted(m string, newest mesh.Build, hasNewest bool) (mesh.Build, string) {
	fp, ok, err := c.st.Want(c.node, m)
	if err != nil {
		return mesh.Build{}, whyWantUndecodable(m, err)
	}
	if ok {
		b, known := c.st.Build(m, fp)
		if !known {
			return mesh.Build{}, whyWantUnknown(m, fp)
		}
		return b, ""
	}
	if h, ok, err := c.st.Have(c.node, m); err == nil && ok && h.Fingerprint != "" {
		b, known := c.st.Build(m, h.Fingerprint)
		if !known {
			return mesh.Build{}, whyHaveUnknown(m, h.Fingerprint)
		}
		return b, ""
	}
	if !hasNewest {
		return mesh.Build{}, whyNoBuild(m)
	}
	return newest, ""
}

// at composes m at build b into c.plan, and appends what it needs to
// c.needs; or it says why m is held (c.plan and c.needs then hold part of
// it).
func (c *composer) at(m string, b mesh.Build) string {
	man, err := c.st.Manifest(b.Manifest)
	if err == ErrNoManifest {
		return whyManifestMissing(m, b.Fingerprint, b.Manifest)
	}
	if err != nil {
		return whyManifestInvalid(m, b.Fingerprint, b.Manifest, err)
	}
	if man.Module != m {
		return whyManifestOtherModule(m, b.Fingerprint, man.Module)
	}
	plan := &c.plan
	*plan = mesh.Plan{
		Node:        c.node,
		Module:      m,
		Fingerprint: b.Fingerprint,
		Manifest:    b.Manifest,
		Dirs:        emptied(plan.Dirs, len(man.Dirs)),
		Ports:       orEmpty(man.Ports),
		Secrets:     orEmpty(man.Secrets),
		Config:      orEmpty(man.Config),
		Contributes: orEmpty(man.Contributes),
		Provisions:  emptied(plan.Provisions, len(man.Requires)),
		Templates:   man.Templates,
		Reload:      man.Reload,
	}
	for _, d := range man.Dirs {
		if d.Unknown == "" {
			d.Unknown = mesh.UnknownProgram
		}
		plan.Dirs = append(plan.Dirs, d)
	}
	var held []string // why each requirement that cannot be met is not
	for _, r := range man.Requires {
		c.require(r.From)
		pnode, where := c.providerNode(r)
		pman, err := c.trunk(r.From)
		var offer mesh.Offer
		var offers bool
		if err == nil {
			offer, offers = pman.Offer(r.Provision)
		}
		if where != "" || !offers {
			// Every reason of every requirement, each naming its key.
			k := mesh.ProvisionKey{Node: c.node, Consumer: m, Provision: r.Provision, Local: r.Local}
			held = append(held, whyRequirement(k, r, where, pman, err))
			continue
		}
		if held != nil {
			continue
		}
		cred := offer.Credential
		if cred == "" {
			cred = mesh.CredentialNone
		}
		plan.Provisions = append(plan.Provisions, mesh.PlanProvision{
			Provision: r.Provision, Local: r.Local, Provider: pnode, ProviderModule: r.From, Credential: cred,
		})
		n := c.need()
		c.kb = mesh.ProvisionKey{Node: c.node, Consumer: m, Provision: r.Provision, Local: r.Local}.AppendTo(c.kb[:0])
		*n = Need{
			Key:       intern(c.keys, c.kb),
			Provision: r.Provision,
			Local:     r.Local,
			Consumer:  mesh.Ref{Module: m, Node: c.node},
			Provider:  mesh.Ref{Module: r.From, Node: pnode},
		}
		if cred != mesh.CredentialNone {
			c.require(mesh.VaultModule)
			var holder mesh.Ref
			var local int
			if cred == mesh.CredentialOwn {
				c.kb, local = mesh.AppendCredentialKey(c.kb[:0], c.node, m, r.From, r.Provision, r.Local)
				holder = n.Consumer
			} else {
				c.kb, local = mesh.AppendCredentialKey(c.kb[:0], pnode, r.From, r.From, r.Provision, "")
				holder = n.Provider
			}
			n.DependsOn = c.dependsOn(n.Key, c.kb, holder.Node)
			ck := n.DependsOn[0]
			vnode, problem := c.vaultNode(holder.Node, ck)
			if problem != "" {
				c.res.Problems = append(c.res.Problems, problem)
				n.NoProvider = problem
				// A credential still needed stays needed, following its
				// provider: asked, saying that it has none (spec 4), never
				// retiring because its vault left, and kept whether or not
				// a vault ever answered it. Its provider is the vault that
				// last answered it (where its store is), else the vault of
				// its own node.
				provider := mesh.Ref{Module: mesh.VaultModule, Node: holder.Node}
				if old, ok := c.st.Provision(ck); ok {
					provider = old.Provider
				}
				cn := c.need()
				*cn = Need{
					Key: ck, Provision: mesh.CredentialProvision, Local: ck[len(ck)-local:], Consumer: holder,
					Provider: provider, NoProvider: problem,
				}
				c.needs = append(c.needs, cn)
			} else {
				cn := c.need()
				*cn = Need{
					Key: ck, Provision: mesh.CredentialProvision, Local: ck[len(ck)-local:], Consumer: holder,
					Provider: mesh.Ref{Module: mesh.VaultModule, Node: vnode},
				}
				c.needs = append(c.needs, cn)
			}
		}
		c.needs = append(c.needs, n)
	}
	return strings.Join(held, "; ")
}

// dependsOn returns the depends-on list of key, one credential key ck of
// a credential held on node: the stored provision's own list when it names
// just ck (shared with it: lists are never changed), else a new one whose
// key is the State's string when it holds ck (a shared credential's key,
// on its provider's node, is then one string for all its dependents).
func (c *composer) dependsOn(key string, ck []byte, node string) []string {
	if old, ok := c.st.Provision(key); ok && len(old.DependsOn) == 1 && old.DependsOn[0] == string(ck) {
		return old.DependsOn
	}
	if len(c.deps) == cap(c.deps) {
		c.deps = make([]string, 0, 16)
	}
	keys := c.keys
	if node != c.node {
		keys = c.st.ProvisionsOf(node)
	}
	c.deps = append(c.deps, intern(keys, ck))
	return c.deps[len(c.deps)-1 : len(c.deps) : len(c.deps)]
}

// providerNode resolves a requirement to its provider's node: its on node;
// else the consumer's node when the provider is placed there; else the one
// node the provider is placed on. When it cannot, it says where the
// provider is instead (a part of [whyRequirement]).
func (c *composer) providerNode(r mesh.Requirement) (string, string) {
	nodes := c.st.NodesOf(r.From)
	if r.On != "" {
		if !slices.Contains(nodes, r.On) {
			return "", whereNotOn(r)
		}
		return r.On, ""
	}
	switch {
	case slices.Contains(nodes, c.node):
		return c.node, ""
	case len(nodes) == 1:
		return nodes[0], ""
	case len(nodes) == 0:
		return "", whereNowhere
	}
	return "", whereSeveral(nodes)
}

// vaultNode resolves the vault for a credential held on node.
func (c *composer) vaultNode(node, key string) (string, string) {
	nodes := c.st.NodesOf(mesh.VaultModule)
	switch {
	case slices.Contains(nodes, node):
		return node, ""
	case len(nodes) == 1:
		return nodes[0], ""
	case len(nodes) == 0:
		return "", problemNoVault(key)
	}
	return "", problemSeveralVaults(key, nodes)
}

// trunk returns the trunk manifest of module, read once per composition
// (judge.trunk).
func (c *composer) trunk(module string) (*mesh.Manifest, error) {
	c.judge.st = c.st
	return c.judge.trunk(module)
}

// hold records m as held: a refusal written only when its why changes. A
// module with no name cannot stand in a refusal key (no key token is
// empty: "<node>." is no key the bus stores); it is a problem instead,
// neither held nor composed.
func (c *composer) hold(m, why string) {
	if m == "" {
		c.res.Problems = append(c.res.Problems, problemNoName(c.node, why))
		return
	}
	c.res.Held[m] = why
	key := mesh.RefusalKey{Node: c.node, Module: m}.String()
	if old, ok := c.st.Refusal(key); ok && old.Why == why {
		return
	}
	c.res.Refusals[key] = mesh.Refusal{Node: c.node, Module: m, Why: why, Since: c.now}
}

// sweepPlans removes the plans of modules neither composed nor held.
func (c *composer) sweepPlans(composed []string) {
	for _, key := range c.plans {
		node, module, ok := strings.Cut(key, ".")
		if !ok || !mesh.ValidName(node) || !mesh.ValidName(module) || slices.Contains(composed, module) {
			continue // a key out of shape (mesh.ParseNodeModule fails) is left
		}
		if _, held := c.res.Held[module]; held {
			continue
		}
		c.res.PlansRemoved = append(c.res.PlansRemoved, key)
	}
	sort.Strings(c.res.PlansRemoved)
}

// sweepRefusals removes the refusals of modules no longer placed.
func (c *composer) sweepRefusals() {
	for _, key := range c.st.RefusalsOf(c.node) {
		k, err := mesh.ParseRefusalKey(key)
		if err != nil {
			continue
		}
		if _, held := c.res.Held[k.Module]; held {
			continue
		}
		c.res.RefusalsRemoved = append(c.res.RefusalsRemoved, key)
	}
	sort.Strings(c.res.RefusalsRemoved)
}

// emptied returns s emptied for reuse, or a new empty slice of capacity n
// when s has less: never nil, which would encode as null.
func emptied[T any](s []T, n int) []T {
	if s == nil || cap(s) < n {
		return make([]T, 0, max(n, 4))
	}
	return s[:0]
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
