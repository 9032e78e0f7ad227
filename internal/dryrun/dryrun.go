// Package dryrun composes a change to the mesh against a copy of the live
// state, the way the seat would, and says what the seat would write: per
// node, the plans, provisions and refusals written, removed or turned
// retiring, and the asks raised. It is pure: the mesh comes in as a
// [state.Mesh] (built from the buckets read once), the change as bus
// changes, the time as now; nothing is written anywhere.
//
// Like the seat, it takes each change into the mesh, composes every node a
// change touches (once more when a later write touches it again),
// re-judges the keys whose provider's outcome or dependency changed, and
// takes its own writes into the mesh, until nothing is left to do. What
// providers would answer afterwards (their entries and haves) is not
// known to it: a key stays as composition leaves it.
package dryrun

import (
	"encoding/json"
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

// maxRounds bounds the work per node of the mesh, so that a composition
// that never settles ends the run instead of looping.
const maxRounds = 20

// Run takes changes into m (which it changes: pass a copy made for the
// run) and composes as the seat would at time now with the ask TTL of
// opts, then reports what would be written.
func Run(m *state.Mesh, changes []bus.Change, now time.Time, opts ...compose.Option) *Report {
	// What the seat learned from its last composition of each node (the
	// keys each needs and their providers, the modules each requires) routes
	// a change to the nodes and keys it touches: a mesh read from the
	// buckets has not learned it yet. Each node is composed once as the
	// mesh stands, its result taken as learned and its writes left out (a
	// settled seat has written them already).
	for _, n := range m.Nodes() {
		m.Composed(compose.Node(m, n, now, opts...))
	}
	before := snapshot(m)
	nodes, keys := map[string]bool{}, map[string]bool{}
	rep := &Report{}
	for _, ch := range changes {
		t := m.Take(ch)
		if t.Odd != nil {
			rep.Odd = append(rep.Odd, t.Odd.Error())
		}
		for _, n := range t.Nodes {
			nodes[n] = true
		}
		for _, k := range t.Keys {
			keys[k] = true
		}
	}
	asked := map[string]bool{}
	limit := maxRounds * (len(m.Nodes()) + 1)
	for len(nodes)+len(keys) > 0 && rep.Rounds < limit {
		rep.Rounds++
		if len(nodes) > 0 {
			node := first(nodes)
			delete(nodes, node)
			res := compose.Node(m, node, now, opts...)
			m.Composed(res)
			take(m, res, nodes, keys)
			for _, a := range res.Asks {
				asked[a.About] = true
			}
			for _, k := range res.Retiring {
				p, _ := m.Provision(k)
				for _, dep := range p.DependsOn {
					if dk, err := mesh.ParseProvisionKey(dep); err == nil && dk.Node != node {
						nodes[dk.Node] = true
					}
				}
			}
			continue
		}
		ks := make([]string, 0, len(keys))
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		keys = map[string]bool{}
		res := compose.Judge(m, ks, m.NeedOf, now, opts...)
		take(m, res, nodes, keys)
		for _, a := range res.Asks {
			asked[a.About] = true
		}
	}
	after := snapshot(m)
	rep.diff(before, after, asked)
	return rep
}

// take writes a result into m as the seat's writes are taken into its
// mesh, marking what the seat would compose or judge next.
func take(m *state.Mesh, res *compose.Result, nodes, keys map[string]bool) {
	for _, k := range sorted(res.Plans) {
		m.Take(bus.Change{Bucket: mesh.PlansBucket, Key: k, Value: res.Plans[k]})
	}
	for _, k := range sorted(res.Refusals) {
		b, _ := json.Marshal(res.Refusals[k])
		m.Take(bus.Change{Bucket: mesh.RefusedBucket, Key: k, Value: b})
	}
	for _, k := range sorted(res.Provisions) {
		p := res.Provisions[k]
		old, had := m.Provision(k)
		if !had || old.State != p.State || old.Why != p.Why {
			for _, dep := range m.DependentsOf(k) {
				keys[dep] = true
			}
		}
		for _, dep := range m.Left(k, p) {
			keys[dep] = true
			if n, _, _ := strings.Cut(dep, "."); !strings.HasPrefix(k, n+".") {
				nodes[n] = true
			}
		}
		b, _ := json.Marshal(p)
		m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: k, Value: b})
	}
	for _, k := range res.PlansRemoved {
		m.Take(bus.Change{Bucket: mesh.PlansBucket, Key: k, Deleted: true})
	}
	for _, k := range res.RefusalsRemoved {
		m.Take(bus.Change{Bucket: mesh.RefusedBucket, Key: k, Deleted: true})
	}
	for _, k := range res.Retired {
		p, _ := m.Provision(k)
		for _, dep := range p.DependsOn {
			if dk, err := mesh.ParseProvisionKey(dep); err == nil {
				nodes[dk.Node] = true
			}
		}
		m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: k, Deleted: true})
	}
}

// kept is what the seat keeps: plan bytes, provisions and refusals.
type kept struct {
	plans      map[string]string
	provisions map[string]mesh.Provision
	refusals   map[string]mesh.Refusal
}

func snapshot(m *state.Mesh) kept {
	k := kept{plans: map[string]string{}, provisions: map[string]mesh.Provision{}, refusals: map[string]mesh.Refusal{}}
	for _, n := range m.Nodes() {
		for _, key := range m.PlansOf(n) {
			b, _ := m.Plan(key)
			k.plans[key] = string(b)
		}
	}
	m.Provisions(func(key string, p mesh.Provision) { k.provisions[key] = p })
	m.Refusals(func(key string, r mesh.Refusal) { k.refusals[key] = r })
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

// diff fills the report from what the seat keeps before and after.
func (r *Report) diff(before, after kept, asked map[string]bool) {
	add := func(c Change) {
		c.Node = nodeOf(c.Key)
		r.Changes = append(r.Changes, c)
	}
	for _, k := range sortedKeys(after.plans) {
		r.Plans = append(r.Plans, k)
		if old, ok := before.plans[k]; !ok {
			add(Change{Bucket: mesh.PlansBucket, Key: k, Op: Add})
		} else if old != after.plans[k] {
			add(Change{Bucket: mesh.PlansBucket, Key: k, Op: Update})
		}
	}
	for _, k := range sortedKeys(before.plans) {
		if _, ok := after.plans[k]; !ok {
			add(Change{Bucket: mesh.PlansBucket, Key: k, Op: Remove})
		}
	}
	for _, k := range sortedKeys(after.refusals) {
		r.Refusals = append(r.Refusals, k)
		why := after.refusals[k].Why
		if old, ok := before.refusals[k]; !ok {
			add(Change{Bucket: mesh.RefusedBucket, Key: k, Op: Add, Why: why})
		} else if old.Why != why {
			add(Change{Bucket: mesh.RefusedBucket, Key: k, Op: Update, Why: why})
		}
	}
	for _, k := range sortedKeys(before.refusals) {
		if _, ok := after.refusals[k]; !ok {
			add(Change{Bucket: mesh.RefusedBucket, Key: k, Op: Remove, Why: before.refusals[k].Why})
		}
	}
	r.After = map[string]mesh.State{}
	for _, k := range sortedKeys(after.provisions) {
		p := after.provisions[k]
		r.After[k] = p.State
		old, ok := before.provisions[k]
		c := Change{Bucket: mesh.ProvisionsBucket, Key: k, Op: Add, State: p.State, Why: p.Why,
			Ask: asked["provision."+k] && p.Ask != "" && (!ok || old.Ask != p.Ask)}
		if ok {
			if same(old, p) {
				continue
			}
			c.Op, c.Was = Update, old.State
		}
		add(c)
	}
	for _, k := range sortedKeys(before.provisions) {
		if _, ok := after.provisions[k]; !ok {
			add(Change{Bucket: mesh.ProvisionsBucket, Key: k, Op: Remove, State: before.provisions[k].State, Why: before.provisions[k].Why})
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

func first(m map[string]bool) string {
	best := ""
	for k := range m {
		if best == "" || k < best {
			best = k
		}
	}
	return best
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
