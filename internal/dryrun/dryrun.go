// Package dryrun composes a change to the mesh against a copy of the live
// state, the way the seat would, and says every key the seat would write:
// on every node, the plans, provisions and refusals written or removed,
// each provision's state and each why, and the asks raised. It is pure:
// the mesh comes in as a [state.Mesh] (built from the buckets read once),
// the change as bus changes, the time as now; nothing is written anywhere.
//
// Like the seat, it takes each change into the mesh, composes every node a
// change touches (once more when a later write touches it again),
// re-judges the keys whose provider's outcome or dependency changed, and
// takes its own writes into the mesh, until nothing is left to do. What
// providers would answer afterwards (their entries and haves) is not
// known to it: a key stays as composition leaves it.
//
// Its cost follows the change: [RunLoaded] runs over a mesh that holds the
// seat's keys of some nodes only, and says which nodes (and which shared
// credentials' dependents) it needed and lacked, for the caller to read
// by subject and run again.
package dryrun

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Op is what a dry run's [Change] does to its key: "add" (the key is
// written and was not there: + in a table), "change" (written over a value
// that says something else: ~) or "remove" (deleted: -).
type Op string

// The ops of a [Change].
const (
	Add    Op = "add"
	Update Op = "change"
	Remove Op = "remove"
)

// Change is one key the seat would write or remove: a plan, a provision or
// a refusal of node Node (a provision's node is its consumer's). A
// provision is written when it says something new besides its time (its
// at), a refusal when its why changes, a plan when its bytes differ, as
// the seat writes them.
type Change struct {
	Node   string `json:"node"`
	Bucket string `json:"bucket"` // mesh-provisioner_plans, _provisions or _refused
	Key    string `json:"key"`
	Op     Op     `json:"op"`
	// State is a provision's state afterwards (before, for a remove), Was
	// its state before a change.
	State mesh.State `json:"state,omitempty"`
	Was   mesh.State `json:"was,omitempty"`
	// Why is a refusal's why, or a provision's why (every state but
	// provided has one); for a remove, the why it had.
	Why string `json:"why,omitempty"`
	// Ask reports whether an ask would be raised for this provision (it
	// turns retiring and names an ask it did not name before).
	Ask bool `json:"ask,omitempty"`
}

// Report is what a dry run found.
type Report struct {
	// Changes lists every key the seat would write or remove, sorted by
	// node, bucket and key.
	Changes []Change `json:"changes"`
	// After is the state of every provision of the nodes the run looked
	// at (those it composed or judged keys of), afterwards, key -> state.
	After map[string]mesh.State `json:"after"`
	// Plans and Refusals are the plan and refusal keys kept afterwards on
	// those nodes.
	Plans    []string `json:"plans"`
	Refusals []string `json:"refusals"`
	// Odd lists the changes that were out of shape, as said by the mesh.
	Odd []string `json:"odd,omitempty"`
	// Rounds is how many compositions and judgings it took.
	Rounds int `json:"rounds"`
}

// Changed reports whether the seat would write or remove any key.
func (r *Report) Changed() bool { return len(r.Changes) > 0 }

// maxRounds bounds the work per node the run composes, so that a
// composition that never settles ends the run instead of looping.
const maxRounds = 20

// run is one dry run: the mesh, what is left to compose and judge, and the
// values each key it wrote held before.
type run struct {
	m    *state.Mesh
	v    *view // m as the run reads it
	now  time.Time
	opts []compose.Option
	// nodes and keys are left to compose and judge; order is the current
	// sweep of nodes in name order (see next).
	nodes, keys map[string]bool
	order       []string
	// warm holds the nodes composed before the changes were taken, and
	// composed those composed since: the nodes whose needs the mesh has
	// learned (see needOf).
	warm, composed map[string]bool
	before         kept
	asked          map[string]bool
}

// Run takes changes into m (which it changes: pass a mesh made for the
// run) and composes and judges as the seat would at time now with the ask
// TTL of opts, then reports what would be written. m holds every node's
// keys; see [RunLoaded] for a mesh that holds some.
//
// Its cost follows what the changes touch: the seat routes a change by
// what it learned composing each node (the keys each needs and their
// providers, the modules each requires), which a mesh read from the
// buckets has not learned. Run composes first, as the mesh stands, the
// nodes whose learned needs route the changes (see warmFor: the nodes the
// changes name and those requiring a module they change), taking each
// result as learned and leaving its writes out (a settled seat has written
// them already); a key of another node that is judged is needed as its
// stored provision says (needOf). It reads and compares only the keys it
// writes.
func Run(m *state.Mesh, changes []bus.Change, now time.Time, opts ...compose.Option) *Report {
	rep, _ := RunLoaded(m, nil, changes, now, opts...)
	return rep
}

// Loaded says which of the seat's keys a mesh holds for [RunLoaded]:
// every key of the buckets a mesh file writes and of the ask router's
// records, the seat's keys (plans, provisions, refusals) and the
// providers' entries of the nodes of Nodes, and, for each shared
// credential key of Dependents, every provision key of its provision on
// any node (<node>.<consumer>.<provision>[.<local>]: the keys that may
// depend on it), and, for each provision name of Provisions, every
// provision key of that provision on any node (the keys that a provider
// offering it may answer). A nil Loaded means every key.
//
// Every says that the mesh holds the seat's keys and the entries of every
// node (Nodes and Dependents are then not read). Lazy, when set, holds
// the wants and haves the mesh was not given, taken as the run reads them
// (see [Lazy]); nil means the mesh holds every one.
type Loaded struct {
	Nodes      map[string]bool
	Dependents map[string]bool
	Provisions map[string]bool
	Every      bool
	Lazy       *Lazy
}

// Missing is what a run read that the mesh did not hold: the nodes whose
// seat keys it needs, the shared credential keys whose dependents it
// needs, key -> their provision, and the provision names whose keys on
// every node it needs (sorted): a change that places or unplaces a
// provider on a node, or changes its have there, re-judges the retiring
// keys asked or approved of that provider on any node (the seat's
// state.Mesh finds them by their provider among the provisions it holds),
// and a key's name says its provision, not its provider: every key of
// each provision the provider offers is read. Changed reports whether the run changed
// the mesh before it stopped: when it did not, the caller may take what it
// reads into the same mesh and run again; when it did, it makes a new one.
type Missing struct {
	Nodes      []string
	Dependents map[string]string
	Provisions []string
	Changed    bool
}

// None reports whether nothing is missing.
func (m Missing) None() bool {
	return len(m.Nodes) == 0 && len(m.Dependents) == 0 && len(m.Provisions) == 0
}

// RunLoaded is [Run] over a mesh that holds what loaded says (nil: every
// key). It returns what the run read that m does not hold: when anything
// is missing there is no report, and the caller runs again on a mesh that
// holds it too (a node is read when it is composed, when a key of it is
// judged or written; a shared credential's dependents when it changes or
// its node is composed). It stops at the first step that read what m does
// not hold.
func RunLoaded(m *state.Mesh, loaded *Loaded, changes []bus.Change, now time.Time, opts ...compose.Option) (*Report, Missing) {
	v := &view{Mesh: m, missing: map[string]bool{}, missingDeps: map[string]string{}, missingProvs: map[string]bool{}}
	if loaded != nil {
		v.lazy = loaded.Lazy
	}
	if loaded != nil && !loaded.Every {
		v.loaded, v.deps, v.provs = loaded.Nodes, loaded.Dependents, loaded.Provisions
		if v.loaded == nil {
			v.loaded = map[string]bool{}
		}
	}
	// The retiring keys that the changes' providers re-judge, on any node,
	// are found among the provisions the mesh holds when it takes the
	// changes: they must be there before the first is taken.
	for _, prov := range providersTouched(v, changes) {
		for _, name := range offered(m, prov.Module) {
			v.needProvision(name)
		}
	}
	r := &run{m: m, v: v, now: now, opts: opts, nodes: map[string]bool{}, keys: map[string]bool{},
		warm: map[string]bool{}, composed: map[string]bool{}, asked: map[string]bool{},
		before: kept{plans: map[string]*string{}, provisions: map[string]*mesh.Provision{}, refusals: map[string]*mesh.Refusal{}}}
	// Composing reads the mesh and never its learned needs: the warm
	// nodes are composed first, and their needs learned only once nothing
	// they read was missing, so that m is as it came when something was.
	var warm []*compose.Result
	for _, n := range warmFor(v, changes) {
		warm = append(warm, compose.Node(v, n, now, opts...))
		r.warm[n] = true
	}
	if v.lacks() {
		return nil, v.missed()
	}
	for _, res := range warm {
		m.Composed(res)
	}
	rep := &Report{}
	for _, ch := range changes {
		v.lazy.takeFor(m, ch)
		t := m.Take(ch)
		if t.Odd != nil {
			rep.Odd = append(rep.Odd, t.Odd.Error())
		}
		for _, n := range t.Nodes {
			r.nodes[n] = true
		}
		for _, k := range t.Keys {
			r.keys[k] = true
		}
	}
	for len(r.nodes)+len(r.keys) > 0 && rep.Rounds < maxRounds*(len(r.composed)+len(r.warm)+1) {
		if v.lacks() {
			v.changed = true
			return nil, v.missed() // what follows would build on what is not there
		}
		rep.Rounds++
		if len(r.nodes) > 0 {
			node := r.next()
			res := compose.Node(v, node, now, opts...)
			m.Composed(res)
			r.composed[node] = true
			r.take(res)
			for _, k := range res.Retiring {
				p, _ := v.Provision(k)
				for _, dep := range p.DependsOn {
					if dk, err := mesh.ParseProvisionKey(dep); err == nil && dk.Node != node {
						r.nodes[dk.Node] = true
					}
				}
			}
			continue
		}
		ks := sortedKeys(r.keys)
		r.keys = map[string]bool{}
		for _, k := range ks {
			v.need(nodeOf(k))
		}
		r.take(compose.Judge(v, ks, r.needOf, now, opts...))
	}
	rep.diff(r.before, r.after(), r.asked)
	if v.lacks() {
		v.changed = true
		return nil, v.missed()
	}
	return rep, Missing{}
}

// next takes the first node left to compose, in name order of the current
// sweep (a node marked again behind the sweep is taken in the next one).
func (r *run) next() string {
	for {
		if len(r.order) == 0 {
			r.order = sortedKeys(r.nodes)
		}
		node := r.order[0]
		r.order = r.order[1:]
		if r.nodes[node] {
			delete(r.nodes, node)
			return node
		}
	}
}

// needOf is the need the seat has learned for key: the mesh's, learned
// from the nodes composed so far; else, when a node whose composition may
// need key (its own, or the node of a key that depends on it: a shared
// credential is needed by its consumers' nodes) is one the run has not
// composed, what the key's stored provision says, unless it is retiring:
// in a settled mesh any other stored key is needed (a held consumer's too),
// from its provider, with its depends-on, as it stands.
func (r *run) needOf(key string) *compose.Need {
	if n := r.m.NeedOf(key); n != nil {
		return n
	}
	cold := func(k string) bool { n := nodeOf(k); return !r.warm[n] && !r.composed[n] }
	unknown := cold(key)
	for _, d := range r.v.DependentsOf(key) {
		unknown = unknown || cold(d)
	}
	p, ok := r.v.Provision(key)
	if !unknown || !ok || p.State == mesh.Retiring {
		return nil
	}
	n := &compose.Need{Key: key, Provision: p.Provision, Local: p.Local, Consumer: p.Consumer, Provider: p.Provider, DependsOn: p.DependsOn}
	// A credential with no vault to answer it, and each key depending on
	// it, was judged saying so (compose.Need.NoProvider), as its stored why
	// says.
	n.NoProvider = compose.NoProviderOf(p)
	return n
}

// warmFor returns, sorted, the nodes whose learned needs route changes:
// the nodes a change names (a placement, want or have key's node), the
// nodes where a module whose builds or trunk change is placed, and every
// node whose placed modules, at any build the seat composes them
// at, require a module that a change places, unplaces, builds anew, or
// whose want or have changes (mesh-vault, for a requirement of an offer
// with a credential). A superset only composes a node whose composition
// changes nothing more.
func warmFor(v *view, changes []bus.Change) []string {
	nodes := map[string]bool{}
	modules := map[string]bool{} // placed, unplaced, wanted or had anew: their consumers
	built := map[string]bool{}   // builds or trunk anew: where placed too
	for _, ch := range changes {
		switch ch.Bucket {
		case mesh.PlacementBucket:
			nodes[ch.Key] = true
			was, _ := v.Placed(ch.Key)
			var now mesh.Placement
			if !ch.Deleted {
				_ = json.Unmarshal(ch.Value, &now)
			}
			for _, mod := range was {
				if !slices.ContainsFunc(now.Modules, func(pm mesh.PlacedModule) bool { return pm.Module == mod }) {
					modules[mod] = true
				}
			}
			for _, pm := range now.Modules {
				if !slices.Contains(was, pm.Module) {
					modules[pm.Module] = true
				}
			}
		case mesh.WantsBucket:
			if k, err := mesh.ParseWantKey(ch.Key); err == nil {
				nodes[k.Node], modules[k.Module] = true, true
			}
		case mesh.HaveBucket:
			if k, err := mesh.ParseHaveKey(ch.Key); err == nil {
				nodes[k.Node] = true
				if k.Module != "" {
					modules[k.Module] = true
				}
			}
		case mesh.BuildsBucket:
			if k, err := mesh.ParseBuildKey(ch.Key); err == nil {
				built[k.Module] = true
			}
		case mesh.ModulesBucket:
			built[ch.Key] = true
		}
	}
	for mod := range built {
		modules[mod] = true
		for _, n := range v.NodesOf(mod) {
			nodes[n] = true
		}
	}
	for mod := range modules {
		for _, n := range v.consumersOf(mod) {
			nodes[n] = true
		}
	}
	return sortedKeys(nodes)
}

// providersTouched returns the providers (a module on a node) that
// changes place or unplace, or whose have they change: taking such a
// change, the mesh re-judges the retiring keys asked or approved of that
// provider (they follow it, and an open ask whose promise it changes is
// withdrawn and asked anew), whatever node they are on.
func providersTouched(v *view, changes []bus.Change) []mesh.Ref {
	var out []mesh.Ref
	for _, ch := range changes {
		switch ch.Bucket {
		case mesh.PlacementBucket:
			was, _ := v.Placed(ch.Key)
			var now mesh.Placement
			if !ch.Deleted {
				_ = json.Unmarshal(ch.Value, &now)
			}
			for _, mod := range was {
				if !slices.ContainsFunc(now.Modules, func(pm mesh.PlacedModule) bool { return pm.Module == mod }) {
					out = append(out, mesh.Ref{Module: mod, Node: ch.Key})
				}
			}
			for _, pm := range now.Modules {
				if !slices.Contains(was, pm.Module) {
					out = append(out, mesh.Ref{Module: pm.Module, Node: ch.Key})
				}
			}
		case mesh.HaveBucket:
			if k, err := mesh.ParseHaveKey(ch.Key); err == nil && k.Module != "" {
				out = append(out, mesh.Ref{Module: k.Module, Node: k.Node})
			}
		}
	}
	return out
}

// offered returns the provision names module may answer keys of: the
// offers of its trunk manifest and of every build of it the mesh knows
// (a key retiring since an offer was dropped is still of the provider),
// and credential for mesh-vault.
func offered(m *state.Mesh, module string) []string {
	names := map[string]bool{}
	if module == mesh.VaultModule {
		names[mesh.CredentialProvision] = true
	}
	add := func(digest string) {
		if man, err := m.Manifest(digest); err == nil {
			for _, o := range man.Provides {
				if o.Name != "" {
					names[o.Name] = true
				}
			}
		}
	}
	if d, ok := m.Trunk(module); ok {
		add(d)
	}
	m.Builds(func(b mesh.Build) {
		if b.Module == module {
			add(b.Manifest)
		}
	})
	return sortedKeys(names)
}

// credentialOf reports whether the provider's trunk offer of req hands a
// credential (own or shared).
func credentialOf(m *state.Mesh, req mesh.Requirement) bool {
	digest, ok := m.Trunk(req.From)
	if !ok {
		return false
	}
	man, err := m.Manifest(digest)
	if err != nil {
		return false
	}
	o, ok := man.Offer(req.Provision)
	return ok && (o.Credential == mesh.CredentialOwn || o.Credential == mesh.CredentialShared)
}

// take writes a result into the mesh as the seat's writes are taken into
// its mesh, noting what each key held before its first write and marking
// what the seat would compose or judge next.
func (r *run) take(res *compose.Result) {
	m, v := r.m, r.v
	for _, a := range res.Asks {
		r.asked[a.About] = true
	}
	for _, k := range sorted(res.Plans) {
		r.notePlan(k)
		m.Take(bus.Change{Bucket: mesh.PlansBucket, Key: k, Value: res.Plans[k]})
	}
	for _, k := range sorted(res.Refusals) {
		r.noteRefusal(k)
		b, _ := json.Marshal(res.Refusals[k])
		m.Take(bus.Change{Bucket: mesh.RefusedBucket, Key: k, Value: b})
	}
	for _, k := range sorted(res.Provisions) {
		r.noteProvision(k)
		p := res.Provisions[k]
		v.need(nodeOf(k))
		old, had := v.Provision(k)
		if !had || old.State != p.State || old.Why != p.Why {
			for _, dep := range v.DependentsOf(k) {
				r.keys[dep] = true
			}
		}
		for _, dep := range m.Left(k, p) {
			r.keys[dep] = true
			if n, _, _ := strings.Cut(dep, "."); !strings.HasPrefix(k, n+".") {
				r.nodes[n] = true
			}
		}
		b, _ := json.Marshal(p)
		m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: k, Value: b})
	}
	for _, k := range res.PlansRemoved {
		r.notePlan(k)
		m.Take(bus.Change{Bucket: mesh.PlansBucket, Key: k, Deleted: true})
	}
	for _, k := range res.RefusalsRemoved {
		r.noteRefusal(k)
		m.Take(bus.Change{Bucket: mesh.RefusedBucket, Key: k, Deleted: true})
	}
	for _, k := range res.Retired {
		r.noteProvision(k)
		p, _ := v.Provision(k)
		for _, dep := range p.DependsOn {
			if dk, err := mesh.ParseProvisionKey(dep); err == nil {
				r.nodes[dk.Node] = true
			}
		}
		m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: k, Deleted: true})
	}
}

// kept is what the seat keeps at the keys a run wrote: plan bytes,
// provisions and refusals; nil for a key that held none.
type kept struct {
	plans      map[string]*string
	provisions map[string]*mesh.Provision
	refusals   map[string]*mesh.Refusal
}

func (r *run) notePlan(k string) {
	if _, ok := r.before.plans[k]; !ok {
		var v *string
		if b, ok := r.v.Plan(k); ok {
			s := string(b)
			v = &s
		}
		r.before.plans[k] = v
	}
}

func (r *run) noteProvision(k string) {
	if _, ok := r.before.provisions[k]; !ok {
		var v *mesh.Provision
		if p, ok := r.v.Provision(k); ok {
			v = &p
		}
		r.before.provisions[k] = v
	}
}

func (r *run) noteRefusal(k string) {
	if _, ok := r.before.refusals[k]; !ok {
		var v *mesh.Refusal
		if x, ok := r.v.Refusal(k); ok {
			v = &x
		}
		r.before.refusals[k] = v
	}
}

// after returns what the mesh holds now at the keys the run wrote.
func (r *run) after() kept {
	k := kept{plans: map[string]*string{}, provisions: map[string]*mesh.Provision{}, refusals: map[string]*mesh.Refusal{}}
	for key := range r.before.plans {
		if b, ok := r.m.Plan(key); ok {
			s := string(b)
			k.plans[key] = &s
		} else {
			k.plans[key] = nil
		}
	}
	for key := range r.before.provisions {
		if p, ok := r.m.Provision(key); ok {
			k.provisions[key] = &p
		} else {
			k.provisions[key] = nil
		}
	}
	for key := range r.before.refusals {
		if x, ok := r.m.Refusal(key); ok {
			k.refusals[key] = &x
		} else {
			k.refusals[key] = nil
		}
	}
	return k
}

func nodeOf(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '.' {
			return key[:i]
		}
	}
	return key
}

// same reports whether two provisions say the same, their at aside: the
// seat writes a key only when it says something new.
func same(a, b mesh.Provision) bool {
	a.At, b.At = time.Time{}, time.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// diff fills the report from what the keys the run wrote held before and
// hold after.
func (r *Report) diff(before, after kept, asked map[string]bool) {
	add := func(c Change) {
		c.Node = nodeOf(c.Key)
		r.Changes = append(r.Changes, c)
	}
	for _, k := range sortedKeys(after.plans) {
		old, now := before.plans[k], after.plans[k]
		switch {
		case now != nil:
			r.Plans = append(r.Plans, k)
			if old == nil {
				add(Change{Bucket: mesh.PlansBucket, Key: k, Op: Add})
			} else if *old != *now {
				add(Change{Bucket: mesh.PlansBucket, Key: k, Op: Update})
			}
		case old != nil:
			add(Change{Bucket: mesh.PlansBucket, Key: k, Op: Remove})
		}
	}
	for _, k := range sortedKeys(after.refusals) {
		old, now := before.refusals[k], after.refusals[k]
		switch {
		case now != nil:
			r.Refusals = append(r.Refusals, k)
			if old == nil {
				add(Change{Bucket: mesh.RefusedBucket, Key: k, Op: Add, Why: now.Why})
			} else if old.Why != now.Why {
				add(Change{Bucket: mesh.RefusedBucket, Key: k, Op: Update, Why: now.Why})
			}
		case old != nil:
			add(Change{Bucket: mesh.RefusedBucket, Key: k, Op: Remove, Why: old.Why})
		}
	}
	r.After = map[string]mesh.State{}
	for _, k := range sortedKeys(after.provisions) {
		old, p := before.provisions[k], after.provisions[k]
		switch {
		case p != nil:
			r.After[k] = p.State
			c := Change{Bucket: mesh.ProvisionsBucket, Key: k, Op: Add, State: p.State, Why: p.Why,
				Ask: asked["provision."+k] && p.Ask != "" && (old == nil || old.Ask != p.Ask)}
			if old != nil {
				if same(*old, *p) {
					continue
				}
				c.Op, c.Was = Update, old.State
			}
			add(c)
		case old != nil:
			add(Change{Bucket: mesh.ProvisionsBucket, Key: k, Op: Remove, State: old.State, Why: old.Why})
		}
	}
	sort.SliceStable(r.Changes, func(i, j int) bool {
		a, b := r.Changes[i], r.Changes[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		if a.Bucket != b.Bucket {
			return a.Bucket < b.Bucket
		}
		return a.Key < b.Key
	})
}

func sorted[V any](m map[string]V) []string { return sortedKeys(m) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
