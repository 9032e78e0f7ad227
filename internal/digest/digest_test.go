package digest_test

import (
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/digest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func TestNodeOf(t *testing.T) {
	for _, c := range []struct {
		bucket, key, node string
		ok                bool
	}{
		{mesh.PlacementBucket, "ace", "ace", true},
		{mesh.PlacementBucket, "ace.gitea", "", false},
		{mesh.WantsBucket, "want.ace.gitea", "ace", true},
		{mesh.WantsBucket, "want.ace", "", false},
		{mesh.WantsBucket, "wants.ace.gitea", "", false},
		{mesh.WantsBucket, "want.ace.gitea.x", "", false},
		{mesh.HaveBucket, "ace", "ace", true},
		{mesh.HaveBucket, "ace.gitea", "ace", true},
		{mesh.HaveBucket, "ace.gitea.x", "", false},
		{mesh.PlansBucket, "ace.gitea", "", false},
	} {
		n, ok := digest.NodeOf(c.bucket, c.key)
		if ok != c.ok || ok && n != c.node {
			t.Errorf("NodeOf(%s, %s) = %q, %v; want %q, %v", c.bucket, c.key, n, ok, c.node, c.ok)
		}
	}
}

// TestSetsFindTheNodesThatDiffer sums two holders of the same keys, then
// changes, adds and removes keys of some nodes in one: the groups of the
// others keep their sums, Differ names exactly the changed nodes, and
// taking the change back gives the first sums again.
func TestSetsFindTheNodesThatDiffer(t *testing.T) {
	keys := map[string]map[string][]byte{mesh.PlacementBucket: {}, mesh.WantsBucket: {}, mesh.HaveBucket: {}}
	for _, n := range []string{"ace", "g14", "control", "shanks", "dell"} {
		keys[mesh.PlacementBucket][n] = []byte(`{"modules":[{"module":"gitea"}]}`)
		keys[mesh.WantsBucket]["want."+n+".gitea"] = []byte(`{"fp":"b7c100"}`)
		keys[mesh.HaveBucket][n+".gitea"] = []byte(`{"phase":"running"}`)
	}
	file, bus := digest.Of(keys), digest.Of(keys)
	if !slices.Equal(file.Sums(), bus.Sums()) {
		t.Fatal("two sets of the same keys sum differently")
	}
	before := bus.Sums()
	bus.Put(mesh.WantsBucket, "want.ace.gitea", []byte(`{"fp":"c0ffee"}`)) // changed
	bus.Delete(mesh.HaveBucket, "g14.gitea")                               // removed
	bus.Put(mesh.PlacementBucket, "extra", []byte(`{"modules":[]}`))       // a node the file lacks
	bus.Put(mesh.HaveBucket, "dell.gitea", []byte(`{"phase":"running"}`))  // the same bytes again
	bus.Put(mesh.WantsBucket, "odd", []byte(`{}`))
	if odd := bus.Odd(); len(odd) != 1 || odd[0] != (digest.OddKey{Bucket: mesh.WantsBucket, Key: "odd"}) {
		t.Errorf("Odd = %v; want the wants key odd", odd)
	}
	theirs := map[int]map[string]string{}
	changed := map[int]bool{}
	for _, n := range []string{"ace", "g14", "extra"} {
		changed[digest.GroupOf(n)] = true
	}
	sums := bus.Sums()
	for g := 0; g < digest.Groups; g++ {
		if changed[g] == (sums[g] == before[g]) {
			t.Errorf("group %d: sum %q before, %q after; changed nodes in it: %v", g, before[g], sums[g], changed[g])
		}
		if sums[g] != file.Group(g) {
			theirs[g] = map[string]string{}
			for _, n := range bus.NodesOf(g) {
				theirs[g][n] = bus.Node(n)
			}
		}
	}
	if got := file.Differ(theirs); !slices.Equal(got, []string{"ace", "extra", "g14"}) {
		t.Errorf("Differ = %v; want ace, extra and g14", got)
	}
	bus.Put(mesh.WantsBucket, "want.ace.gitea", []byte(`{"fp":"b7c100"}`))
	bus.Put(mesh.HaveBucket, "g14.gitea", []byte(`{"phase":"running"}`))
	bus.Delete(mesh.PlacementBucket, "extra")
	if !slices.Equal(bus.Sums(), before) {
		t.Error("the keys taken back do not give the sums before")
	}
}
