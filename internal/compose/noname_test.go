package compose_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// placedExtra is a mesh whose node places one module more than its
// placement says (compose.State is read as given: the mesh leaves such a
// module out, another State may not).
type placedExtra struct {
	*state.Mesh
	node, module string
}

func (p placedExtra) Placed(node string) ([]string, error) {
	mods, err := p.Mesh.Placed(node)
	if node == p.node {
		mods = append(slices.Clone(mods), p.module)
	}
	return mods, err
}

// A module with no name placed on a node is a problem, not a refusal: no
// key token is empty, and the refusal key "<node>." is none the bus
// stores (the seat's write failed and it composed the node again without
// end). The node's other modules are composed as before; a module with a
// name that is not valid is still held, its refusal key escaped.
func TestModuleWithNoNameIsAProblem(t *testing.T) {
	m := load(t, filepath.Join("..", "..", "examples", "homelab.yaml"))
	settle(t, m)
	const node = "shanks"
	placed, err := m.Placed(node)
	if err != nil || len(placed) == 0 {
		t.Fatalf("Placed(%s) = %v, %v; want modules", node, placed, err)
	}
	for _, c := range []struct {
		module, refusal, problem string
	}{
		{"", "", "a module with no name is placed on shanks, so no refusal can name it"},
		{"Bad_Name", "shanks.Bad_Name", ""},
		{"a.b", "shanks.a=2Eb", ""},
	} {
		res := compose.Node(placedExtra{m, node, c.module}, node, at)
		for key := range res.Refusals {
			if _, err := mesh.ParseRefusalKey(key); err != nil || key != c.refusal {
				t.Errorf("placing %q: refusal key %q (%v); want only %q", c.module, key, err, c.refusal)
			}
		}
		if c.refusal != "" && len(res.Refusals) != 1 {
			t.Errorf("placing %q: refusals %v; want %s", c.module, res.Refusals, c.refusal)
		}
		_, held := res.Held[c.module]
		if held != (c.refusal != "") {
			t.Errorf("placing %q: held = %v; want %v", c.module, held, c.refusal != "")
		}
		said := slices.ContainsFunc(res.Problems, func(p string) bool { return c.problem != "" && strings.Contains(p, c.problem) })
		if (c.problem != "") != said || len(res.Problems) != btoi(said) {
			t.Errorf("placing %q: problems %q; want one with %q", c.module, res.Problems, c.problem)
		}
		// The rest of the node is as settled: no plan, provision or
		// removal.
		if len(res.Plans) > 0 || len(res.PlansRemoved) > 0 || len(res.Provisions) > 0 || len(res.RefusalsRemoved) > 0 {
			t.Errorf("placing %q: the node's modules composed to changes: %+v", c.module, res)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
