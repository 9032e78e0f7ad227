package compose_test

import (
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// heldMesh is app on n2 needing a database of postgres (by entries, its
// own credential from the vault) and a cache of redis (by have), both on
// n1.
const heldMesh = `
nodes: [n1, n2, n3]
modules:
  mesh-vault:
    builds:
      - fp: v1
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  postgres:
    builds:
      - fp: p1
        manifest: {module: postgres, provides: [{name: database, credential: own, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  redis:
    builds:
      - fp: r1
        manifest: {module: redis, provides: [{name: cache}]}
  app:
    builds:
      - fp: a1
        manifest:
          module: app
          requires: [{provision: database, from: postgres}, {provision: cache, from: redis}]
placement:
  n1: [mesh-vault, postgres, redis]
  n2: [app]
wants:
  n1: {mesh-vault: v1, postgres: p1, redis: r1}
  n2: {app: a1}
`

const (
	hDB     = "n2.app.database"
	hDBCred = "n2.app.credential.postgres_database"
	hCache  = "n2.app.cache"
)

// composeTouched composes the nodes a change touched, as the seat does,
// taking each result back into the mesh.
func composeTouched(t *testing.T, m *state.Mesh, tc state.Touch) {
	t.Helper()
	for _, n := range tc.Nodes {
		res := compose.Node(m, n, at)
		m.Composed(res)
		take(m, res)
	}
}

// judgeTouched re-judges the keys a change touched, as the seat does, and
// then the keys that depend on those it wrote.
func judgeTouched(m *state.Mesh, tc state.Touch) {
	res := compose.Judge(m, tc.Keys, m.NeedOf, at)
	take(m, res)
	var deps []string
	for k := range res.Provisions {
		deps = append(deps, m.DependentsOf(k)...)
	}
	take(m, compose.Judge(m, deps, m.NeedOf, at))
}

// A held consumer's keys still follow their provider: its entry and its
// have re-judge them, and a provider that leaves its node (or the mesh)
// provides them no more, whatever its entry still says.
func TestHeldConsumerKeysFollowTheirProvider(t *testing.T) {
	f, err := meshfile.Parse("held.yaml", []byte(heldMesh))
	if err != nil {
		t.Fatal(err)
	}
	m := loadFile(t, f)
	put(t, m, mesh.BoundBucket("mesh-vault"), hDBCred, mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 1})
	put(t, m, mesh.BoundBucket("postgres"), hDB, mesh.Entry{State: mesh.Provided, VaultName: hDBCred, Generation: 1})
	put(t, m, mesh.HaveBucket, "n1.redis", running("r1"))
	settle(t, m)
	check(t, m, map[string]provState{hDB: {mesh.Provided, ""}, hCache: {mesh.Provided, ""}, hDBCred: {mesh.Provided, ""}})

	// app is held: its want names a build nobody knows.
	put(t, m, mesh.WantsBucket, "want.n2.app", mesh.Want{Fingerprint: "a9"})
	settle(t, m)
	if r, ok := m.Refusal("n2.app"); !ok || r.Why != "its want names build a9 of app, which is not known" {
		t.Fatalf("refusal n2.app = %+v, %v; want app held for its want", r, ok)
	}
	check(t, m, map[string]provState{hDB: {mesh.Provided, ""}, hCache: {mesh.Provided, ""}})

	for _, step := range []struct {
		name   string
		bucket string
		key    string
		value  any
		want   map[string]provState
	}{
		{"its provider's entry fails", mesh.BoundBucket("postgres"), hDB, mesh.Entry{State: mesh.Failed, Why: "disk full"},
			map[string]provState{hDB: {mesh.Failed, "postgres on n1 says failed: disk full"}}},
		{"its provider's have fails", mesh.HaveBucket, "n1.redis", mesh.Have{Phase: mesh.PhaseFailed, Health: mesh.HealthFailed, Detail: "oom"},
			map[string]provState{hCache: {mesh.Failed, "redis on n1 is failed with health failed: oom"}}},
		{"its credential's entry fails", mesh.BoundBucket("mesh-vault"), hDBCred, mesh.Entry{State: mesh.Failed, Why: "sealed"},
			map[string]provState{hDBCred: {mesh.Failed, "mesh-vault on n1 says failed: sealed"}}},
		{"its credential's entry comes back", mesh.BoundBucket("mesh-vault"), hDBCred, mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 1},
			map[string]provState{hDBCred: {mesh.Provided, ""}, hDB: {mesh.Failed, "postgres on n1 says failed: disk full"}}},
		{"its provider's entry is provided again", mesh.BoundBucket("postgres"), hDB, mesh.Entry{State: mesh.Provided, VaultName: hDBCred, Generation: 1},
			map[string]provState{hDB: {mesh.Provided, ""}}},
	} {
		judgeTouched(m, put(t, m, step.bucket, step.key, step.value))
		t.Run(step.name, func(t *testing.T) { check(t, m, step.want) })
	}

	// The providers leave n1 (postgres to n3, redis out of the mesh): the
	// composition of n2, which a placement of n1 touches, says so; the
	// entry postgres still keeps provides nothing.
	tc := put(t, m, mesh.PlacementBucket, "n1", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "mesh-vault"}}})
	if !slices.Contains(tc.Nodes, "n2") {
		t.Fatalf("the placement of n1 touches nodes %v; want n2, whose held app needs its providers", tc.Nodes)
	}
	composeTouched(t, m, tc)
	composeTouched(t, m, put(t, m, mesh.PlacementBucket, "n3", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "postgres"}}}))
	check(t, m, map[string]provState{
		hDB:     {mesh.Asked, "asked of postgres on n1, which is no longer placed on n1 (it is placed on n3): nothing answers this key"},
		hCache:  {mesh.Asked, "asked of redis on n1, which is placed on no node any more: nothing answers this key"},
		hDBCred: {mesh.Provided, ""},
	})
	judgeTouched(m, put(t, m, mesh.BoundBucket("postgres"), hDB, mesh.Entry{State: mesh.Provided, VaultName: hDBCred, Generation: 2}))
	check(t, m, map[string]provState{
		hDB: {mesh.Asked, "asked of postgres on n1, which is no longer placed on n1 (it is placed on n3): nothing answers this key"},
	})
	if p, _ := m.Provision(hDB); p.Reference != nil {
		t.Errorf("%s reference = %+v; want none (nothing provides it)", hDB, *p.Reference)
	}
}
