package state

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// step is one change taken into two meshes: through Take with the value's
// JSON (the decoding path), and through the put methods with the value as
// it is (the seat's path for its own puts). A nil value is a delete, taken
// through Take in both.
type step struct {
	bucket, key string
	value       any // mesh.Provision, mesh.Refusal, mesh.Plan, or nil
}

// touchText is a Touch with its error as text, for comparing.
func touchText(t Touch) string {
	odd := ""
	if t.Odd != nil {
		odd = t.Odd.Error()
	}
	return fmt.Sprintf("nodes %v keys %v bound %v junk %v odd %q", t.Nodes, t.Keys, t.Bound, t.Junk, odd)
}

// runSteps takes each step into a mesh by each path and checks, after each
// step, that both returned the same Touch, and that both meshes are equal
// (every index, revision, junk note and interned name).
func runSteps(t *testing.T, steps []step) (decoded, put *Mesh) {
	t.Helper()
	decoded, put = New(), New()
	for i, s := range steps {
		rev := uint64(i + 1)
		ch := bus.Change{Bucket: s.bucket, Key: s.key, Revision: rev, Deleted: s.value == nil}
		if s.value != nil {
			b, err := json.Marshal(s.value)
			if err != nil {
				t.Fatal(err)
			}
			ch.Value = b
		}
		want := decoded.Take(ch)
		var got Touch
		switch v := s.value.(type) {
		case nil:
			got = put.Take(ch)
		case mesh.Provision:
			got = put.PutProvision(s.key, v, rev)
		case mesh.Refusal:
			got = put.PutRefusal(s.key, v, rev)
		case mesh.Plan:
			got = put.PutPlan(s.key, ch.Value, mesh.NodeModule{Node: v.Node, Module: v.Module}, rev)
		default:
			t.Fatalf("step %d: a %T", i, v)
		}
		if touchText(got) != touchText(want) {
			t.Errorf("step %d (%s %s): put touches\n%s\nwant (Take)\n%s", i, s.bucket, s.key, touchText(got), touchText(want))
		}
		if !reflect.DeepEqual(put, decoded) {
			t.Fatalf("step %d (%s %s): the mesh taking puts differs from the one taking changes:\n%+v\nwant\n%+v",
				i, s.bucket, s.key, put, decoded)
		}
		if s.bucket == mesh.ProvisionsBucket && s.value != nil && want.Odd == nil {
			// The provision read back is the one its JSON decodes to.
			var wantP mesh.Provision
			if err := json.Unmarshal(ch.Value, &wantP); err != nil {
				t.Fatal(err)
			}
			for name, m := range map[string]*Mesh{"Take": decoded, "PutProvision": put} {
				if p, ok := m.Provision(s.key); !ok || !reflect.DeepEqual(p, wantP) {
					t.Errorf("step %d: after %s, Provision(%s) = %+v, %v; want %+v", i, name, s.key, p, ok, wantP)
				}
			}
		}
	}
	return decoded, put
}

var at = time.Date(2026, 12, 1, 5, 40, 12, 345678901, time.UTC)

func prov(node, consumer, provision, local string, st mesh.State, why string, deps ...string) mesh.Provision {
	return mesh.Provision{Provision: provision, Local: local, Consumer: mesh.Ref{Module: consumer, Node: node},
		Provider: mesh.Ref{Module: "pg", Node: "db1"}, State: st, Why: why, DependsOn: deps, At: at}
}

// PutProvision leaves the mesh as Take of the provision's JSON does: its
// indexes (provisions of a node, dependents, asks, warranted retiring
// keys), revisions and interned names, through puts that replace, retire
// and delete keys, and values that are junk (naming another key, an unknown
// state, a provider or a depends-on out of shape, a key out of shape), each
// odd and junk by both paths, and no longer junk once put anew.
func TestPutProvisionIsTake(t *testing.T) {
	const (
		cred = "web1.app.credential.pg_database"
		db   = "web1.app.database"
		db2  = "web2.app.database.main"
	)
	credential := prov("web1", "app", mesh.CredentialProvision, "pg_database", mesh.Asked, "asked of mesh-vault")
	credential.Provider = mesh.Ref{Module: mesh.VaultModule, Node: "lab"}
	provided := credential
	provided.State, provided.Why = mesh.Provided, ""
	database := prov("web1", "app", "database", "", mesh.Waits, "waits for "+cred, cred)
	database.Reference = &mesh.Reference{ID: "r-1", Generation: 3}
	emptyDeps := prov("web1", "app", "database", "", mesh.Asked, "asked of pg on db1")
	emptyDeps.DependsOn = []string{}
	retiring := prov("web2", "app", "database", "main", mesh.Retiring, `the module "app" no longer requires it`, cred)
	retiring.Ask = "ask-7"
	warranted := retiring
	warranted.Warrant = &mesh.Warrant{Ask: "ask-7", Option: "yes", By: mesh.Identity{Who: "ops", Kind: "user", Identity: "ops@lab"}, At: at}
	otherConsumer := database
	otherConsumer.Consumer.Module = "api"
	badState := database
	badState.State = "pending"
	badProvider := database
	badProvider.Provider.Node = "Not A Name"
	badDep := database
	badDep.DependsOn = []string{"no-dots"}
	wrongLocal := database
	wrongLocal.Local = "extra"

	runSteps(t, []step{
		{mesh.ProvisionsBucket, cred, credential},
		{mesh.ProvisionsBucket, db, database},
		{mesh.ProvisionsBucket, cred, provided}, // touches db, its dependent
		{mesh.ProvisionsBucket, cred, provided}, // the same state and why: touches none
		{mesh.ProvisionsBucket, db, emptyDeps},  // no longer depends on cred
		{mesh.ProvisionsBucket, db2, retiring},
		{mesh.ProvisionsBucket, db2, warranted},
		{mesh.ProvisionsBucket, db, otherConsumer}, // junk: taken as absent
		{mesh.ProvisionsBucket, db, database},      // written anew: no longer junk
		{mesh.ProvisionsBucket, db, badState},
		{mesh.ProvisionsBucket, db, badProvider},
		{mesh.ProvisionsBucket, db, badDep},
		{mesh.ProvisionsBucket, db, wrongLocal},
		{mesh.ProvisionsBucket, "web1..database", database}, // key out of shape
		{mesh.ProvisionsBucket, db, database},
		{mesh.ProvisionsBucket, db2, nil},
		{mesh.ProvisionsBucket, cred, nil},
		{mesh.ProvisionsBucket, cred, credential},
	})
}

// PutPlan leaves the mesh as Take of the plan does, for plans that name
// their key's node and module and for junk: a plan naming another node or
// module, a key out of shape.
func TestPutPlanIsTake(t *testing.T) {
	plan := func(node, module, fp string) mesh.Plan {
		return mesh.Plan{Node: node, Module: module, Fingerprint: fp, Manifest: "sha256:ab",
			Dirs: []mesh.Dir{{Name: "data"}}, Secrets: []string{"db"}}
	}
	runSteps(t, []step{
		{mesh.PlansBucket, "web1.app", plan("web1", "app", "f1")},
		{mesh.PlansBucket, "web1.api", plan("web1", "api", "f1")},
		{mesh.PlansBucket, "web1.app", plan("web1", "app", "f2")},
		{mesh.PlansBucket, "web1.app", plan("web2", "app", "f2")}, // another node's: junk
		{mesh.PlansBucket, "web1.app", plan("web1", "app", "f3")},
		{mesh.PlansBucket, "web1.api", plan("web1", "app", "f3")}, // another module's: junk
		{mesh.PlansBucket, "web1.a.b", plan("web1", "a", "f1")},   // key out of shape
		{mesh.PlansBucket, "web1.api", nil},
		{mesh.PlansBucket, "web1.app", nil},
	})
}

// PutRefusal leaves the mesh as Take of the refusal's JSON does, for
// refusals of their key's module and for junk: another node's or module's
// refusal, one with no why, a key out of shape.
func TestPutRefusalIsTake(t *testing.T) {
	refusal := func(node, module, why string) mesh.Refusal {
		return mesh.Refusal{Node: node, Module: module, Why: why, Since: at}
	}
	runSteps(t, []step{
		{mesh.RefusedBucket, "web1.app", refusal("web1", "app", `requires "db", which no node provides`)},
		{mesh.RefusedBucket, "web1.api", refusal("web1", "api", "its manifest <sha256:ab> does not decode & more")},
		{mesh.RefusedBucket, "web1.app", refusal("web1", "app", "another why")},
		{mesh.RefusedBucket, "web1.app", refusal("web2", "app", "another why")}, // another node's: junk
		{mesh.RefusedBucket, "web1.app", refusal("web1", "app", "")},            // no why: junk
		{mesh.RefusedBucket, "web1.api", refusal("web1", "app", "why")},         // another module's: junk
		{mesh.RefusedBucket, "web1.app", refusal("web1", "app", "why")},
		{mesh.RefusedBucket, "web1", refusal("web1", "app", "why")}, // key out of shape
		{mesh.RefusedBucket, "web1.api", nil},
	})
}
