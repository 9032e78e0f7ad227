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
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Node is what the seat would write for one node. Keys are sorted.
type Node struct {
	PlansWritten    []string `json:"plans-written,omitempty"`
	PlansRemoved    []string `json:"plans-removed,omitempty"`
	RefusalsWritten []string `json:"refusals-written,omitempty"`
	RefusalsRemoved []string `json:"refusals-removed,omitempty"`
	// Provisions written, key -> the state it would have; keys that turn
	// retiring are also in Retiring.
	Provisions        map[string]mesh.State `json:"provisions-written,omitempty"`
	ProvisionsRemoved []string              `json:"provisions-removed,omitempty"`
	Retiring          []string              `json:"retiring,omitempty"`
	// Asks lists the provision keys an ask would be raised for.
	Asks []string `json:"asks,omitempty"`
}

// Report is what a dry run found: per node (a provision's node is its
// consumer's), and the states every provision would be in afterwards.
type Report struct {
	Nodes map[string]*Node `json:"nodes"`
	// After is the state of every provision kept afterwards, key -> state.
	After map[string]mesh.State `json:"after"`
	// Plans and Refusals are the plan and refusal keys kept afterwards.
	Plans    []string `json:"plans"`
	Refusals []string `json:"refusals"`
	// Odd lists the changes that were out of shape, as said by the mesh.
	Odd []string `json:"odd,omitempty"`
	// Rounds is how many compositions and judgings it took.
	Rounds int `json:"rounds"`
}

// maxRounds bounds the work per node of the mesh, so that a composition
// that never settles ends the run instead of looping.
const maxRounds = 20

// Run takes changes into m (which it changes: pass a copy made for the
// run) and composes as the seat would at time now with the ask TTL of
// opts, then reports what would be written.
func Run(m *state.Mesh, changes []bus.Change, now time.Time, opts ...compose.Option) *Report {
	before := snapshot(m)
	nodes, keys := map[string]bool{}, map[string]bool{}
	rep := &Report{Nodes: map[string]*Node{}}
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

func (r *Report) node(key string) *Node {
	n, _, _ := cutNode(key)
	if r.Nodes[n] == nil {
		r.Nodes[n] = &Node{}
	}
	return r.Nodes[n]
}

func cutNode(key string) (string, string, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '.' {
			return key[:i], key[i+1:], true
		}
	}
	return key, "", false
}

// diff fills the report from what the seat keeps before and after.
func (r *Report) diff(before, after kept, asked map[string]bool) {
	for _, k := range sortedKeys(after.plans) {
		if old, ok := before.plans[k]; !ok || old != after.plans[k] {
			n := r.node(k)
			n.PlansWritten = append(n.PlansWritten, k)
		}
		r.Plans = append(r.Plans, k)
	}
	for _, k := range sortedKeys(before.plans) {
		if _, ok := after.plans[k]; !ok {
			n := r.node(k)
			n.PlansRemoved = append(n.PlansRemoved, k)
		}
	}
	for _, k := range sortedKeys(after.refusals) {
		if old, ok := before.refusals[k]; !ok || old.Why != after.refusals[k].Why {
			n := r.node(k)
			n.RefusalsWritten = append(n.RefusalsWritten, k)
		}
		r.Refusals = append(r.Refusals, k)
	}
	for _, k := range sortedKeys(before.refusals) {
		if _, ok := after.refusals[k]; !ok {
			n := r.node(k)
			n.RefusalsRemoved = append(n.RefusalsRemoved, k)
		}
	}
	r.After = map[string]mesh.State{}
	for _, k := range sortedKeys(after.provisions) {
		p := after.provisions[k]
		r.After[k] = p.State
		old, ok := before.provisions[k]
		if ok && old.State == p.State && old.Why == p.Why && old.Ask == p.Ask {
			continue
		}
		n := r.node(k)
		if n.Provisions == nil {
			n.Provisions = map[string]mesh.State{}
		}
		n.Provisions[k] = p.State
		if p.State == mesh.Retiring && (!ok || old.State != mesh.Retiring) {
			n.Retiring = append(n.Retiring, k)
		}
		if asked["provision."+k] {
			n.Asks = append(n.Asks, k)
		}
	}
	for _, k := range sortedKeys(before.provisions) {
		if _, ok := after.provisions[k]; !ok {
			n := r.node(k)
			n.ProvisionsRemoved = append(n.ProvisionsRemoved, k)
		}
	}
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
