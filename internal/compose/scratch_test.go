package compose_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// said is all a result says, its phase times aside, as JSON (maps sorted).
func said(t *testing.T, res *compose.Result) string {
	t.Helper()
	r := *res
	r.Compose, r.Judge = 0, 0
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Composing the same node twice gives the same result, and a result shares
// no memory that a later composition (of it or another node) writes: a
// composition reuses scratch memory from module to module, never across
// results. Each plan's bytes are its own module's (the plan buffer is
// reused per module), and changing one result leaves another as it was.
func TestComposeAgainGivesTheSameAndSharesNothing(t *testing.T) {
	m := load(t, filepath.Join("..", "..", "examples", "homelab.yaml"))
	// Not settled: shanks's first composition writes every plan and
	// provision, so that the result holds plenty of it.
	first := compose.Node(m, "shanks", at)
	before := said(t, first)
	if len(first.Plans) < 2 || len(first.Provisions) < 10 || len(first.Needed) < 10 {
		t.Fatalf("first composition of shanks: %d plans, %d provisions, %d needed; want at least 2, 10, 10",
			len(first.Plans), len(first.Provisions), len(first.Needed))
	}
	for key, b := range first.Plans {
		var p mesh.Plan
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("plan %s: %v", key, err)
		}
		if got := (mesh.NodeModule{Node: p.Node, Module: p.Module}).String(); got != key {
			t.Errorf("plan at %s is the plan of %s", key, got)
		}
		if again, _ := json.Marshal(p); string(again) != string(b) {
			t.Errorf("plan %s = %s; json.Marshal of it gives %s", key, b, again)
		}
	}
	for key, n := range first.Needed {
		if n.Key != key {
			t.Errorf("Needed[%s].Key = %s", key, n.Key)
		}
	}

	second := compose.Node(m, "shanks", at)
	for _, n := range m.Nodes() {
		compose.Node(m, n, at)
	}
	if got := said(t, second); got != before {
		t.Errorf("composing shanks again gave\n%s\nwant\n%s", got, before)
	}
	// Change everything the second result holds that could be shared.
	for _, b := range second.Plans {
		clear(b)
	}
	for key, n := range second.Needed {
		*n = compose.Need{Key: "changed"}
		delete(second.Needed, key)
	}
	for key := range second.Provisions {
		second.Provisions[key] = mesh.Provision{Why: "changed"}
	}
	second.Requires[0] = "changed"
	if got := said(t, first); got != before {
		t.Errorf("the first result changed after later compositions and changes to the second:\n%s\nwant\n%s", got, before)
	}
}

// loadGen takes a generated mesh of nodes nodes into a fresh in-memory mesh
// and settles it.
func loadGen(t testing.TB, nodes int) *state.Mesh {
	t.Helper()
	f, err := meshfile.Parse(fmt.Sprintf("gen-%d.yaml", nodes), gen.Generate(nodes, 8, 1))
	if err != nil {
		t.Fatal(err)
	}
	m := loadFile(t, f)
	settle(t, m)
	return m
}

// A settled node's composition allocates within a budget, the same at
// every mesh size: node-0001 of a generated mesh with seed 1 is the same
// node, with the same 34 keys, whatever the number of other nodes (gen-10
// and gen-50 here; BenchmarkComposeNode in internal/seat goes to 1000).
func TestComposeAllocationsFlat(t *testing.T) {
	const budget = 40 // 19 on 2026-12-01 (go1.26); 420 before the scratch memory
	var allocs []float64
	for _, nodes := range []int{10, 50} {
		m := loadGen(t, nodes)
		if res := compose.Node(m, "node-0001", at); res.Changed() || len(res.Needed) != 34 {
			t.Fatalf("gen-%d: node-0001 composes to changes (%v) or needs %d keys; want none and 34", nodes, res.Changed(), len(res.Needed))
		}
		a := testing.AllocsPerRun(20, func() { compose.Node(m, "node-0001", at) })
		if a > budget {
			t.Errorf("gen-%d: composing node-0001 allocates %.0f times; budget %d", nodes, a, budget)
		}
		allocs = append(allocs, a)
	}
	if allocs[0] != allocs[1] {
		t.Errorf("composing node-0001 allocates %.0f times in gen-10 and %.0f in gen-50; want the same", allocs[0], allocs[1])
	}
}
