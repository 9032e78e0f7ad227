package state_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func placement(t *testing.T, modules ...string) []byte {
	t.Helper()
	var p mesh.Placement
	for _, m := range modules {
		p.Modules = append(p.Modules, mesh.PlacedModule{Module: m})
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// NodesOf stays sorted and exact as placements come, change, go, and one
// fails to decode (its node keeps its modules).
func TestNodesOfFollowsPlacements(t *testing.T) {
	m := state.New()
	rev := uint64(0)
	take := func(node string, value []byte, deleted bool) {
		rev++
		m.Take(bus.Change{Bucket: mesh.PlacementBucket, Key: node, Value: value, Revision: rev, Deleted: deleted})
	}
	take("delta", placement(t, "redis", "app"), false)
	take("alpha", placement(t, "app"), false)
	take("charlie", placement(t, "app", "postgres"), false)
	take("bravo", placement(t, "redis"), false)
	steps := []struct {
		name   string
		do     func()
		module string
		want   []string
	}{
		{"placed in any order", func() {}, "app", []string{"alpha", "charlie", "delta"}},
		{"two nodes", func() {}, "redis", []string{"bravo", "delta"}},
		{"module added to a node", func() { take("bravo", placement(t, "redis", "app"), false) }, "app", []string{"alpha", "bravo", "charlie", "delta"}},
		{"module taken from a node", func() { take("delta", placement(t, "app"), false) }, "redis", []string{"bravo"}},
		{"placement deleted", func() { take("alpha", nil, true) }, "app", []string{"bravo", "charlie", "delta"}},
		{"bad value keeps the node's modules", func() { take("charlie", []byte("{"), false) }, "postgres", []string{"charlie"}},
		{"last node of a module gone", func() { take("bravo", placement(t, "app"), false) }, "redis", nil},
		{"same placement again", func() { take("delta", placement(t, "app"), false) }, "app", []string{"bravo", "charlie", "delta"}},
	}
	for _, st := range steps {
		st.do()
		if got := m.NodesOf(st.module); !slices.Equal(got, st.want) {
			t.Errorf("%s: NodesOf(%s) = %v; want %v", st.name, st.module, got, st.want)
		}
	}
}
