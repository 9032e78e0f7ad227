package web

import (
	"sort"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/internal/why"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// walkState is the [compose.State] a key's why walk reads: the provisions,
// refusals and ask records from the page's own state (it follows them),
// everything else (entries, haves, wants, manifests, plans' values) from
// the bus, by key, through bus.
type walkState struct {
	compose.State
	p *Page
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

// walk walks key to the root cause of its state (internal/why).
func (p *Page) walk(key string) ([]why.Step, error) {
	return why.Walk(walkState{State: state.New(), p: p}, key)
}
