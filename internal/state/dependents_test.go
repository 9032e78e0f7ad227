package state_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A provision taken from the bus whose state or why changed (or that came
// or went) touches the keys that depend on it, on whatever node, for
// re-judging; one that says the same state and why touches none.
func TestTakenProvisionTouchesItsDependents(t *testing.T) {
	const cred = "other.db.credential.db_database"
	m := state.New()
	rev := uint64(0)
	take := func(key string, p *mesh.Provision) state.Touch {
		t.Helper()
		rev++
		ch := bus.Change{Bucket: mesh.ProvisionsBucket, Key: key, Revision: rev, Deleted: p == nil}
		if p != nil {
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			ch.Value = b
		}
		return m.Take(ch)
	}
	credential := func(st mesh.State, why string) *mesh.Provision {
		return &mesh.Provision{Provision: mesh.CredentialProvision, Local: "db_database",
			Consumer: mesh.Ref{Module: "db", Node: "other"}, Provider: mesh.Ref{Module: mesh.VaultModule, Node: "lab"},
			State: st, Why: why}
	}
	take(cred, credential(mesh.Asked, "asked of mesh-vault"))
	for _, k := range []string{"third.web.database", "lab.web.database"} {
		node, _, _ := cutNode(k)
		take(k, &mesh.Provision{Provision: "database", Consumer: mesh.Ref{Module: "web", Node: node},
			Provider: mesh.Ref{Module: "db", Node: "other"}, State: mesh.Waits, Why: "waits for " + cred, DependsOn: []string{cred}})
	}
	deps := []string{"lab.web.database", "third.web.database"}
	for _, c := range []struct {
		name string
		p    *mesh.Provision
		keys []string
	}{
		{"state changed", credential(mesh.Provided, ""), deps},
		{"the same state and why", credential(mesh.Provided, ""), nil},
		{"why changed", credential(mesh.Provided, "rotated"), deps},
		{"gone", nil, deps},
		{"back", credential(mesh.Provided, ""), deps},
	} {
		tc := take(cred, c.p)
		if !slices.Equal(tc.Keys, c.keys) {
			t.Errorf("%s: keys touched %v; want %v", c.name, tc.Keys, c.keys)
		}
		if !slices.Equal(tc.Nodes, []string{"other"}) {
			t.Errorf("%s: nodes touched %v; want [other]", c.name, tc.Nodes)
		}
	}
}

func cutNode(key string) (string, string, bool) {
	k, err := mesh.ParseProvisionKey(key)
	if err != nil {
		return "", "", false
	}
	return k.Node, k.Consumer, true
}
