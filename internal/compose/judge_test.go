package compose_test

import (
	"encoding/json"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// judgeMesh is one node n1 running the vault, postgres (by entries, own
// credentials), redis (by have, a shared credential), kv (answered-by
// helper in an offer, but its state does not name bound: by have) and app,
// which needs all three.
const judgeMesh = `
nodes: [n1]
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
        manifest: {module: redis, provides: [{name: cache, credential: shared}]}
  kv:
    builds:
      - fp: k1
        manifest: {module: kv, provides: [{name: store, answered-by: helper}], state: [data]}
  app:
    builds:
      - fp: a1
        manifest:
          module: app
          requires: [{provision: database, from: postgres}, {provision: cache, from: redis}, {provision: store, from: kv}]
placement:
  n1: [mesh-vault, postgres, redis, kv, app]
wants:
  n1: {mesh-vault: v1, postgres: p1, redis: r1, kv: k1, app: a1}
`

const (
	jDB       = "n1.app.database"
	jDBCred   = "n1.app.credential.postgres_database"
	jCache    = "n1.app.cache"
	jRedisCrd = "n1.redis.credential.redis_cache"
	jStore    = "n1.app.store"
)

// running is the have of a module running build fp with health ok.
func running(fp string) mesh.Have {
	return mesh.Have{Phase: mesh.PhaseRunning, Health: mesh.HealthOK, Fingerprint: fp}
}

// judgeCase is a change to the mesh and the state and why it leaves keys
// in.
type judgeCase struct {
	name    string
	entries map[string]map[string]mesh.Entry // provider -> key -> entry
	haves   map[string]mesh.Have             // module on n1 -> have
	want    map[string]provState
}

type provState struct {
	state mesh.State
	why   string
}

func TestJudgeDependsOnAndHelpers(t *testing.T) {
	vaultSays := func(s mesh.State, why string) mesh.Entry { return mesh.Entry{State: s, Why: why} }
	cred := func(g int64) mesh.Entry { return mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: g} }
	for _, c := range []judgeCase{{
		name: "nothing answered: each key waits for its credential, quoting why that one is asked",
		want: map[string]provState{
			jDBCred: {mesh.Asked, "asked of mesh-vault on n1; waits for its entry in mesh-vault_bound"},
			jDB:     {mesh.Waits, "waits for " + jDBCred + ", which is asked: asked of mesh-vault on n1; waits for its entry in mesh-vault_bound"},
			jCache:  {mesh.Waits, "waits for " + jRedisCrd + ", which is asked: asked of mesh-vault on n1; waits for its entry in mesh-vault_bound"},
			// kv's offer says answered-by helper, but kv keeps no entries
			// (its state does not name bound): judged by its have.
			jStore: {mesh.Asked, "waits for kv on n1 to run"},
		},
	}, {
		name: "a failed credential takes its provided database with it, its why quoted",
		entries: map[string]map[string]mesh.Entry{
			"mesh-vault": {jDBCred: vaultSays(mesh.Failed, "the store is sealed"), jRedisCrd: vaultSays(mesh.Waits, "rotating")},
			"postgres":   {jDB: {State: mesh.Provided, VaultName: jDBCred, Generation: 1}},
		},
		haves: map[string]mesh.Have{"redis": running("r1"), "kv": running("k1")},
		want: map[string]provState{
			jDBCred:   {mesh.Failed, "mesh-vault on n1 says failed: the store is sealed"},
			jDB:       {mesh.Waits, "waits for " + jDBCred + ", which is failed: mesh-vault on n1 says failed: the store is sealed"},
			jRedisCrd: {mesh.Waits, "mesh-vault on n1 says waits: rotating"},
			jCache:    {mesh.Waits, "waits for " + jRedisCrd + ", which is waits: mesh-vault on n1 says waits: rotating"},
			jStore:    {mesh.Provided, ""},
		},
	}, {
		name: "credentials provided: each key follows its own provider",
		entries: map[string]map[string]mesh.Entry{
			"mesh-vault": {jDBCred: cred(1), jRedisCrd: cred(1)},
			"postgres":   {jDB: {State: mesh.Failed, Why: "disk full"}},
		},
		haves: map[string]mesh.Have{"redis": {Phase: mesh.PhaseFailed, Health: mesh.HealthFailed, Detail: "oom"}},
		want: map[string]provState{
			jDBCred: {mesh.Provided, ""},
			jDB:     {mesh.Failed, "postgres on n1 says failed: disk full"},
			jCache:  {mesh.Failed, "redis on n1 is failed with health failed: oom"},
			jStore:  {mesh.Asked, "waits for kv on n1 to run"},
		},
	}, {
		name: "a provider that keeps no entries is judged by its have, even with an entry in its bucket",
		entries: map[string]map[string]mesh.Entry{
			"kv": {jStore: vaultSays(mesh.Failed, "an entry nobody reads")},
		},
		haves: map[string]mesh.Have{"kv": running("k1")},
		want:  map[string]provState{jStore: {mesh.Provided, ""}},
	}} {
		t.Run(c.name, func(t *testing.T) {
			f, err := meshfile.Parse("judge.yaml", []byte(judgeMesh))
			if err != nil {
				t.Fatal(err)
			}
			m := loadFile(t, f)
			for provider, es := range c.entries {
				for k, e := range es {
					put(t, m, mesh.BoundBucket(provider), k, e)
				}
			}
			for mod, h := range c.haves {
				put(t, m, mesh.HaveBucket, "n1."+mod, h)
			}
			settle(t, m)
			check(t, m, c.want)
		})
	}
}

// A change of a credential's outcome reaches the keys that depend on it
// when the seat re-judges them (compose.Judge of the credential, then of
// its dependents, as the seat does after writing it), without composing.
func TestJudgeCredentialChangeReachesDependents(t *testing.T) {
	f, err := meshfile.Parse("judge.yaml", []byte(judgeMesh))
	if err != nil {
		t.Fatal(err)
	}
	m := loadFile(t, f)
	put(t, m, mesh.BoundBucket("mesh-vault"), jDBCred, mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 1})
	put(t, m, mesh.BoundBucket("postgres"), jDB, mesh.Entry{State: mesh.Provided, VaultName: jDBCred, Generation: 1})
	settle(t, m)
	check(t, m, map[string]provState{jDB: {mesh.Provided, ""}})

	for _, step := range []struct {
		entry mesh.Entry
		want  provState
	}{
		{mesh.Entry{State: mesh.Failed, Why: "the store is sealed"},
			provState{mesh.Waits, "waits for " + jDBCred + ", which is failed: mesh-vault on n1 says failed: the store is sealed"}},
		// A new why of the same state is quoted anew.
		{mesh.Entry{State: mesh.Failed, Why: "the key file is gone"},
			provState{mesh.Waits, "waits for " + jDBCred + ", which is failed: mesh-vault on n1 says failed: the key file is gone"}},
		{mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 2}, provState{mesh.Provided, ""}},
	} {
		tc := put(t, m, mesh.BoundBucket("mesh-vault"), jDBCred, step.entry)
		res := compose.Judge(m, tc.Keys, m.NeedOf, at)
		take(m, res)
		if _, ok := res.Provisions[jDBCred]; !ok {
			t.Fatalf("Judge(%v) after the entry %+v wrote no %s", tc.Keys, step.entry, jDBCred)
		}
		res = compose.Judge(m, m.DependentsOf(jDBCred), m.NeedOf, at)
		take(m, res)
		check(t, m, map[string]provState{jDB: step.want})
	}
}

// A provided entry's why (the vault's, while a rotation is not in force)
// is the key's why, quoting its provider; the keys that depend on it stay
// provided with none; once the entry says nothing more the why goes.
func TestProvidedEntrysWhyIsTheKeys(t *testing.T) {
	f, err := meshfile.Parse("judge.yaml", []byte(judgeMesh))
	if err != nil {
		t.Fatal(err)
	}
	m := loadFile(t, f)
	put(t, m, mesh.BoundBucket("mesh-vault"), jDBCred, mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 1})
	put(t, m, mesh.BoundBucket("postgres"), jDB, mesh.Entry{State: mesh.Provided, VaultName: jDBCred, Generation: 1})
	settle(t, m)
	rotating := "rotated to generation 2, not in force yet: gitea on n1 has applied generation 1; in force once it applies 2 or at 2026-12-01T18:30:00Z"
	for _, step := range []struct {
		entry mesh.Entry
		why   string
		gen   int64
	}{
		{mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 1, Next: 2, Why: rotating}, "mesh-vault on n1 says provided: " + rotating, 1},
		{mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 2}, "", 2},
	} {
		tc := put(t, m, mesh.BoundBucket("mesh-vault"), jDBCred, step.entry)
		take(m, compose.Judge(m, tc.Keys, m.NeedOf, at))
		take(m, compose.Judge(m, m.DependentsOf(jDBCred), m.NeedOf, at))
		check(t, m, map[string]provState{jDBCred: {mesh.Provided, step.why}, jDB: {mesh.Provided, ""}})
		if p, _ := m.Provision(jDBCred); p.Reference == nil || p.Reference.Generation != step.gen {
			t.Errorf("entry %+v: %s reference = %v; want generation %d", step.entry, jDBCred, p.Reference, step.gen)
		}
	}
}

func put(t *testing.T, m *state.Mesh, bucket, key string, v any) state.Touch {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	tc := m.Take(bus.Change{Bucket: bucket, Key: key, Value: b})
	if tc.Odd != nil {
		t.Fatalf("odd change: %v", tc.Odd)
	}
	return tc
}

func check(t *testing.T, m *state.Mesh, want map[string]provState) {
	t.Helper()
	for k, w := range want {
		p, ok := m.Provision(k)
		if !ok {
			t.Errorf("%s is missing; want %s %q", k, w.state, w.why)
			continue
		}
		if p.State != w.state || p.Why != w.why {
			t.Errorf("%s = %s %q; want %s %q", k, p.State, p.Why, w.state, w.why)
		}
	}
}

// The reference of a key is the one its provider's current entry names, or
// none: a key that failed shows no old reference, and an entry provided
// with no vault name or generation leaves none.
func TestReferenceIsTheCurrentEntrys(t *testing.T) {
	f, err := meshfile.Parse("judge.yaml", []byte(judgeMesh))
	if err != nil {
		t.Fatal(err)
	}
	m := loadFile(t, f)
	put(t, m, mesh.BoundBucket("mesh-vault"), jDBCred, mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 1})
	settle(t, m)
	for _, step := range []struct {
		entry mesh.Entry
		state mesh.State
		ref   *mesh.Reference
	}{
		{mesh.Entry{State: mesh.Provided, VaultName: "pg/app", Generation: 3}, mesh.Provided, &mesh.Reference{ID: "pg/app", Generation: 3}},
		{mesh.Entry{State: mesh.Failed, Why: "disk full"}, mesh.Failed, nil},
		{mesh.Entry{State: mesh.Provided}, mesh.Provided, nil},
		{mesh.Entry{State: mesh.Provided, VaultName: "pg/app", Generation: 4}, mesh.Provided, &mesh.Reference{ID: "pg/app", Generation: 4}},
		{mesh.Entry{State: mesh.Waits, Why: "restoring"}, mesh.Waits, nil},
	} {
		take(m, compose.Judge(m, put(t, m, mesh.BoundBucket("postgres"), jDB, step.entry).Keys, m.NeedOf, at))
		p, _ := m.Provision(jDB)
		if p.State != step.state || (p.Reference == nil) != (step.ref == nil) || p.Reference != nil && *p.Reference != *step.ref {
			t.Errorf("entry %+v: %s = %s reference %v; want %s reference %v", step.entry, jDB, p.State, p.Reference, step.state, step.ref)
		}
	}
}
