package web

import (
	"context"
	"sort"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/internal/why"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// walkState is the [compose.State] a key's why walk reads: the
// provisions, refusals, ask records and which nodes have a plan of a
// module from the page's own state (it follows them), everything else
// (entries, haves, wants, modules, manifests, builds, a plan's value) from
// the bus, by key ([lookup.State]): a walk costs the keys it passes, not
// the mesh.
type walkState struct {
	*lookup.State
	p *Page
}

var _ compose.State = walkState{}

// NodesOf returns the nodes that have a plan of module or hold it: the
// nodes the seat composed it on, which are those it is placed on (the
// seat writes a plan or a refusal for every placed module).
func (w walkState) NodesOf(module string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	nodes := keySet{}
	for n := range w.p.idx.planned[module] {
		nodes[n] = struct{}{}
	}
	for key := range w.p.idx.heldMod[module] {
		if r, ok := w.p.refusals[key]; ok {
			node, _ := refusalNames(key, r)
			nodes[node] = struct{}{}
		}
	}
	return nodes.sorted()
}

func (w walkState) PlansOf(node string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	var out []string
	for _, mod := range w.p.idx.plansOf[node].sorted() {
		out = append(out, mesh.NodeModule{Node: node, Module: mod}.String())
	}
	return out
}

// Records calls f with every ask record the page holds.
func (w walkState) Records(f func(id string, r mesh.Record)) {
	w.p.mu.Lock()
	recs := make(map[string]mesh.Record, len(w.p.records))
	for id, r := range w.p.records {
		recs[id] = r
	}
	w.p.mu.Unlock()
	for id, r := range recs {
		f(id, r)
	}
}

func (w walkState) Provision(key string) (mesh.Provision, bool) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	pv, ok := w.p.provs[key]
	return pv, ok
}

func (w walkState) ProvisionsOf(node string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.idx.consumes[node].sorted()
}

func (w walkState) DependentsOf(key string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	var out []string
	for k, pv := range w.p.provs {
		for _, d := range pv.DependsOn {
			if d == key {
				out = append(out, k)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func (w walkState) Refusal(key string) (mesh.Refusal, bool) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	r, ok := w.p.refusals[key]
	return r, ok
}

func (w walkState) RefusalsOf(node string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.idx.heldOf[node].sorted()
}

func (w walkState) Record(id string) (mesh.Record, bool) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	r, ok := w.p.records[id]
	return r, ok
}

// walkTimeout bounds the bus's reads of one walk.
const walkTimeout = 5 * time.Second

// walk walks key to the root cause of its state (internal/why), reading
// from the bus while ctx lasts. A read the bus failed is said as the
// walk's last step.
func (p *Page) walk(ctx context.Context, key string) ([]why.Step, error) {
	ctx, cancel := context.WithTimeout(ctx, walkTimeout)
	defer cancel()
	b := lookup.New(ctx, p.cfg.JS)
	steps, err := why.Walk(walkState{State: b, p: p}, key)
	if b.Err() != nil {
		steps = append(steps, why.Step{What: "error", Says: "the walk may miss a step: " + b.Err().Error()})
	}
	return steps, err
}
