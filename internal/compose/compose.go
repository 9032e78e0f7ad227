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
	"encoding/json"
	"slices"
	"sort"
	"time"

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
	// Withdrawn maps keys needed again before the operator answered to the
	// asks they no longer need: the seat withdraws them from the router.
	Withdrawn map[string]string
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

// composer holds one node's composition while it runs.
type composer struct {
	st       State
	node     string
	now      time.Time
	opts     options
	res      *Result
	requires map[string]bool
}

// Option changes how [Node] and [Judge] work.
type Option func(*options)

type options struct {
	askTTL time.Duration
}

// AskTTL sets how long a retiring key's ask stays open. Zero means
// [retire.DefaultTTL].
func AskTTL(d time.Duration) Option { return func(o *options) { o.askTTL = d } }

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
			Needed:     map[string]*Need{},
		},
		requires: map[string]bool{},
	}
	placed, err := st.Placed(node)
	if err != nil {
		// Without a placement nothing can be said to be unneeded: leave the
		// node as it is.
		c.res.Problems = append(c.res.Problems, problemPlacement(node, err))
		return c.res
	}
	composed := map[string]bool{}
	seen := map[string]bool{}
	for _, m := range placed {
		if seen[m] {
			continue
		}
		seen[m] = true
		if c.module(m) {
			composed[m] = true
		}
	}
	c.sweepPlans(composed)
	c.sweepRefusals()
	for m := range c.requires {
		c.res.Requires = append(c.res.Requires, m)
	}
	sort.Strings(c.res.Requires)
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
	plan, needs, why := c.at(m, build)
	if why != "" {
		c.hold(m, why)
		return false
	}
	if hasNewest && newest.Fingerprint != build.Fingerprint {
		_, newer, why := c.at(m, newest)
		if why != "" {
			c.res.Problems = append(c.res.Problems, problemNewest(m, newest.Fingerprint, why))
		} else {
			needs = append(needs, newer...)
		}
	}
	for _, n := range needs {
		if _, ok := c.res.Needed[n.Key]; !ok {
			c.res.Needed[n.Key] = n
		}
	}
	key := mesh.NodeModule{Node: c.node, Module: m}.String()
	b, _ := json.Marshal(plan)
	if old, ok := c.st.Plan(key); !ok || string(old) != string(b) {
		c.res.Plans[key] = b
	}
	return true
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

// at composes m at build b: its plan and what it needs, or why it is held.
func (c *composer) at(m string, b mesh.Build) (*mesh.Plan, []*Need, string) {
	man, err := c.st.Manifest(b.Manifest)
	if err == ErrNoManifest {
		return nil, nil, whyManifestMissing(m, b.Fingerprint, b.Manifest)
	}
	if err != nil {
		return nil, nil, whyManifestInvalid(m, b.Fingerprint, b.Manifest, err)
	}
	if man.Module != m {
		return nil, nil, whyManifestOtherModule(m, b.Fingerprint, man.Module)
	}
	plan := &mesh.Plan{
		Node:        c.node,
		Module:      m,
		Fingerprint: b.Fingerprint,
		Manifest:    b.Manifest,
		Dirs:        make([]mesh.Dir, 0, len(man.Dirs)),
		Ports:       orEmpty(man.Ports),
		Secrets:     orEmpty(man.Secrets),
		Config:      orEmpty(man.Config),
		Contributes: orEmpty(man.Contributes),
		Provisions:  make([]mesh.PlanProvision, 0, len(man.Requires)),
	}
	for _, d := range man.Dirs {
		if d.Unknown == "" {
			d.Unknown = mesh.UnknownProgram
		}
		plan.Dirs = append(plan.Dirs, d)
	}
	var needs []*Need
	for _, r := range man.Requires {
		c.requires[r.From] = true
		pnode, why := c.providerNode(r)
		if why != "" {
			return nil, nil, why
		}
		pman, err := c.trunk(r.From)
		if err != nil {
			return nil, nil, whyProviderNoManifest(r, err)
		}
		offer, ok := pman.Offer(r.Provision)
		if !ok {
			return nil, nil, whyNoOffer(r, pman)
		}
		cred := offer.Credential
		if cred == "" {
			cred = mesh.CredentialNone
		}
		plan.Provisions = append(plan.Provisions, mesh.PlanProvision{
			Provision: r.Provision, Local: r.Local, Provider: pnode, ProviderModule: r.From, Credential: cred,
		})
		n := &Need{
			Key:       mesh.ProvisionKey{Node: c.node, Consumer: m, Provision: r.Provision, Local: r.Local}.String(),
			Provision: r.Provision,
			Local:     r.Local,
			Consumer:  mesh.Ref{Module: m, Node: c.node},
			Provider:  mesh.Ref{Module: r.From, Node: pnode},
		}
		if cred != mesh.CredentialNone {
			c.requires[mesh.VaultModule] = true
			var ck mesh.ProvisionKey
			var holder mesh.Ref
			if cred == mesh.CredentialOwn {
				ck = mesh.CredentialKey(c.node, m, r.From, r.Provision, r.Local)
				holder = n.Consumer
			} else {
				ck = mesh.CredentialKey(pnode, r.From, r.From, r.Provision, "")
				holder = n.Provider
			}
			cn := &Need{Key: ck.String(), Provision: ck.Provision, Local: ck.Local, Consumer: holder}
			n.DependsOn = []string{cn.Key}
			vnode, problem := c.vaultNode(holder.Node, cn.Key)
			if problem != "" {
				c.res.Problems = append(c.res.Problems, problem)
				n.NoProvider = problem
			} else {
				cn.Provider = mesh.Ref{Module: mesh.VaultModule, Node: vnode}
				needs = append(needs, cn)
			}
		}
		needs = append(needs, n)
	}
	return plan, needs, ""
}

// providerNode resolves a requirement to its provider's node: its on node;
// else the consumer's node when the provider is placed there; else the one
// node the provider is placed on.
func (c *composer) providerNode(r mesh.Requirement) (string, string) {
	nodes := c.st.NodesOf(r.From)
	if r.On != "" {
		if !slices.Contains(nodes, r.On) {
			return "", whyProviderNotOn(r)
		}
		return r.On, ""
	}
	switch {
	case slices.Contains(nodes, c.node):
		return c.node, ""
	case len(nodes) == 1:
		return nodes[0], ""
	case len(nodes) == 0:
		return "", whyProviderNowhere(r)
	}
	return "", whyProviderSeveral(r, nodes)
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

func (c *composer) trunk(module string) (*mesh.Manifest, error) {
	d, ok := c.st.Trunk(module)
	if !ok {
		return nil, ErrNoManifest
	}
	return c.st.Manifest(d)
}

// hold records m as held: a refusal written only when its why changes.
func (c *composer) hold(m, why string) {
	c.res.Held[m] = why
	key := mesh.RefusalKey{Node: c.node, Module: m}.String()
	if old, ok := c.st.Refusal(key); ok && old.Why == why {
		return
	}
	c.res.Refusals[key] = mesh.Refusal{Node: c.node, Module: m, Why: why, Since: c.now}
}

// sweepPlans removes the plans of modules neither composed nor held.
func (c *composer) sweepPlans(composed map[string]bool) {
	for _, key := range c.st.PlansOf(c.node) {
		k, err := mesh.ParseNodeModule(key)
		if err != nil || composed[k.Module] {
			continue
		}
		if _, held := c.res.Held[k.Module]; held {
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

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
