package seat_test

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A provider's entry taken while many nodes are dirty is judged between
// their compositions, not once the last of them is composed: its key's
// result comes before the last dirty node's (at the cold start the vault's
// entries come while the seat still composes, and waited for the last
// node). The seat is paused while every node but node-0001 is touched (each
// want put again as it is) and mesh-vault's entry for a credential of
// node-0001 is written, so that all of it is taken in one round.
func TestEntryJudgedWhileNodesAreComposed(t *testing.T) {
	h := start(t, gen.Generate(30, 8, 1))
	const owner = "node-0001"
	var cred string
	for _, k := range h.keys(mesh.ProvisionsBucket, owner+".") {
		p, _ := h.provision(k)
		if strings.Contains(k, ".credential.") && p.Provider.Module == mesh.VaultModule && p.State == mesh.Asked {
			cred = k
			break
		}
	}
	if cred == "" {
		t.Fatalf("no credential of %s is asked of %s", owner, mesh.VaultModule)
	}
	deps := h.dependentsOf(owner, cred)
	if len(deps) == 0 {
		t.Fatalf("no key depends on %s", cred)
	}
	h.mu.Lock()
	mark := len(h.results)
	h.mu.Unlock()

	h.seat.Pause()
	wants := h.kv(mesh.WantsBucket)
	dirtied := map[string]bool{}
	var touched []string
	for _, k := range h.keys(mesh.WantsBucket, "") {
		node := strings.Split(k, ".")[1] // want.<node>.<module>
		if node == owner {
			continue
		}
		e, err := wants.Get(h.ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wants.Put(h.ctx, k, e.Value()); err != nil {
			t.Fatal(err)
		}
		dirtied[node] = true
		touched = append(touched, k)
	}
	if len(dirtied) < 20 {
		t.Fatalf("%d nodes touched; want the 29 of gen-30 other than %s", len(dirtied), owner)
	}
	vault := mesh.BoundBucket(mesh.VaultModule)
	h.put(vault, cred, mesh.Entry{State: mesh.Provided, VaultName: cred, Generation: 1})
	bustest.WaitFor(t, 0, "the paused seat to keep every change", func() bool {
		if !h.seat.Keeps(vault, cred) {
			return false
		}
		for _, k := range touched {
			if !h.seat.Keeps(mesh.WantsBucket, k) {
				return false
			}
		}
		return true
	})
	h.seat.Resume(func(bus.Change) bool { return true })()
	h.settle()

	h.mu.Lock()
	results := h.results[mark:]
	h.mu.Unlock()
	judged, lastNode := -1, -1
	composed := map[string]bool{}
	for i, r := range results {
		if dirtied[r.Node] {
			composed[r.Node] = true
			lastNode = i
		}
		if p, ok := r.Provisions[cred]; ok && r.Node == "" && judged < 0 {
			if p.State != mesh.Provided {
				t.Errorf("the judgement of %s says %s %q; want provided", cred, p.State, p.Why)
			}
			judged = i
		}
	}
	if len(composed) != len(dirtied) {
		t.Fatalf("%d of the %d touched nodes composed again; want every one", len(composed), len(dirtied))
	}
	if judged < 0 {
		t.Fatalf("no judgement of %s in the %d results since the entry", cred, len(results))
	}
	if judged > lastNode {
		t.Errorf("%s judged after the last touched node was composed (result %d of %d); want it judged between the compositions",
			cred, judged, len(results))
	}
	h.waitState(cred, mesh.Provided, "")
	for _, dep := range deps {
		if p, _ := h.provision(dep); strings.Contains(p.Why, cred) {
			t.Errorf("%s still waits for %s once it is provided: %s %q", dep, cred, p.State, p.Why)
		}
	}
}

// dependentsOf returns the provision keys of node on the bus that depend
// on key.
func (h *harness) dependentsOf(node, key string) []string {
	h.t.Helper()
	var out []string
	for _, k := range h.keys(mesh.ProvisionsBucket, node+".") {
		p, _ := h.provision(k)
		for _, d := range p.DependsOn {
			if d == key {
				out = append(out, k)
			}
		}
	}
	return out
}

// A judgement of more keys than the window of puts goes out in several
// flights (of a quarter of the window each, here one put): with a window of
// two puts, every credential of the homelab that
// mesh-vault provides at once (taken in one round, judged in one pass) is
// written provided, the keys waiting for them are judged again, nothing is
// refused, and the judgement's result is said once, holding every
// credential, after its last flight landed.
func TestJudgementThroughASmallWindow(t *testing.T) {
	h := startWith(t, homelab(t), options{window: 2})
	var creds []string
	for _, k := range h.keys(mesh.ProvisionsBucket, "") {
		if p, _ := h.provision(k); p.Provider == vaultControl && p.State == mesh.Asked {
			creds = append(creds, k)
		}
	}
	if len(creds) < 5 {
		t.Fatalf("credentials asked of mesh-vault = %v; want the homelab's (more than the window of 2)", creds)
	}
	h.mu.Lock()
	mark := len(h.results)
	h.mu.Unlock()
	h.seat.Pause()
	vault := mesh.BoundBucket(mesh.VaultModule)
	for i, k := range creds {
		h.put(vault, k, mesh.Entry{State: mesh.Provided, VaultName: k, Generation: int64(i + 1)})
	}
	bustest.WaitFor(t, 0, "the paused seat to keep every entry", func() bool {
		for _, k := range creds {
			if !h.seat.Keeps(vault, k) {
				return false
			}
		}
		return true
	})
	h.seat.Resume(func(bus.Change) bool { return true })()
	h.settle()

	for _, k := range creds {
		h.waitState(k, mesh.Provided, "")
	}
	for _, k := range h.keys(mesh.ProvisionsBucket, "") {
		if p, _ := h.provision(k); strings.Contains(p.Why, "which is asked: asked of mesh-vault") {
			t.Errorf("%s = %s %q; want it judged again once its credential is provided", k, p.State, p.Why)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	said := 0
	for _, r := range h.results[mark:] {
		n := 0
		for _, k := range creds {
			if _, ok := r.Provisions[k]; ok {
				n++
			}
		}
		if n > 0 {
			said++
			if r.Node != "" || n != len(creds) {
				t.Errorf("a result of node %q holds %d of the %d credentials; want one judgement holding every one", r.Node, n, len(creds))
			}
		}
	}
	if said != 1 {
		t.Errorf("%d results hold the credentials; want the one judgement's", said)
	}
	if len(h.writeErrs) > 0 {
		t.Errorf("write errors: %v", h.writeErrs)
	}
}
