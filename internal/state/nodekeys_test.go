package state_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// ProvisionsOf, PlansOf and RefusalsOf stay sorted and exact as keys come
// in any order, come again, go, and turn out of shape (taken as absent).
func TestNodeKeysStaySorted(t *testing.T) {
	m := state.New()
	rev := uint64(0)
	take := func(bucket, key string, v any) {
		t.Helper()
		rev++
		ch := bus.Change{Bucket: bucket, Key: key, Revision: rev, Deleted: v == nil}
		if b, ok := v.([]byte); ok {
			ch.Value = b
		} else if v != nil {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			ch.Value = b
		}
		m.Take(ch)
	}
	prov := func(key string) mesh.Provision {
		k, err := mesh.ParseProvisionKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return mesh.Provision{Provision: k.Provision, Local: k.Local, Consumer: mesh.Ref{Module: k.Consumer, Node: k.Node},
			Provider: mesh.Ref{Module: "redis", Node: "ace"}, State: mesh.Asked}
	}
	plan := func(node, module string) mesh.Plan { return mesh.Plan{Node: node, Module: module} }
	refusal := func(node, module string) mesh.Refusal { return mesh.Refusal{Node: node, Module: module, Why: "held"} }

	for _, k := range []string{"ace.web.cache", "ace.app.cache", "bob.app.cache", "ace.app.database.main", "ace.app.cache"} {
		take(mesh.ProvisionsBucket, k, prov(k))
	}
	for _, mod := range []string{"web", "app", "db", "app"} {
		take(mesh.PlansBucket, "ace."+mod, plan("ace", mod))
	}
	take(mesh.RefusedBucket, "ace.zed", refusal("ace", "zed"))
	take(mesh.RefusedBucket, "ace.abc", refusal("ace", "abc"))
	steps := []struct {
		name                     string
		do                       func()
		provisions, plans, holds []string
	}{
		{"any order, twice", func() {},
			[]string{"ace.app.cache", "ace.app.database.main", "ace.web.cache"}, []string{"ace.app", "ace.db", "ace.web"}, []string{"ace.abc", "ace.zed"}},
		{"deleted", func() {
			take(mesh.ProvisionsBucket, "ace.app.database.main", nil)
			take(mesh.PlansBucket, "ace.db", nil)
			take(mesh.RefusedBucket, "ace.abc", nil)
		}, []string{"ace.app.cache", "ace.web.cache"}, []string{"ace.app", "ace.web"}, []string{"ace.zed"}},
		{"out of shape", func() {
			take(mesh.ProvisionsBucket, "ace.web.cache", []byte("{"))
			take(mesh.PlansBucket, "ace.app", plan("bob", "app"))
			take(mesh.RefusedBucket, "ace.zed", []byte("{"))
		}, []string{"ace.app.cache"}, []string{"ace.web"}, nil},
		{"the last gone", func() {
			take(mesh.ProvisionsBucket, "ace.app.cache", nil)
			take(mesh.PlansBucket, "ace.web", nil)
		}, nil, nil, nil},
	}
	for _, st := range steps {
		st.do()
		if got := m.ProvisionsOf("ace"); !slices.Equal(got, st.provisions) {
			t.Errorf("%s: ProvisionsOf(ace) = %v; want %v", st.name, got, st.provisions)
		}
		if got := m.PlansOf("ace"); !slices.Equal(got, st.plans) {
			t.Errorf("%s: PlansOf(ace) = %v; want %v", st.name, got, st.plans)
		}
		if got := m.RefusalsOf("ace"); !slices.Equal(got, st.holds) {
			t.Errorf("%s: RefusalsOf(ace) = %v; want %v", st.name, got, st.holds)
		}
	}
	if got := m.ProvisionsOf("bob"); !slices.Equal(got, []string{"bob.app.cache"}) {
		t.Errorf("ProvisionsOf(bob) = %v; want [bob.app.cache]", got)
	}
}
