package compose_test

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// heldProvided loads heldMesh with every key of app provided.
func heldProvided(t *testing.T) *state.Mesh {
	t.Helper()
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
	return m
}

// The only vault unplaced while app still needs its credential: the
// credential stays needed, asked with the problem's why (spec 4), never
// retiring; its database key waits for it, saying the same.
func TestCredentialStaysAskedWithNoVault(t *testing.T) {
	m := heldProvided(t)
	put(t, m, mesh.PlacementBucket, "n1", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "postgres"}, {Module: "redis"}}})
	last := settle(t, m)
	const problem = "no node runs mesh-vault, so the credential " + hDBCred + " has no provider"
	check(t, m, map[string]provState{
		hDBCred: {mesh.Asked, "asked of mesh-vault: " + problem},
		hDB:     {mesh.Asked, "waits for " + hDBCred + ", which has no provider: " + problem},
		hCache:  {mesh.Provided, ""},
	})
	if r := last["n2"]; r == nil || len(r.Asks) != 0 || len(r.Retiring) != 0 {
		t.Errorf("n2's composition = %+v; want no key retiring and no ask", r)
	}
	if p, _ := m.Provision(hDBCred); p.Reference != nil {
		t.Errorf("%s keeps reference %+v; want none (nothing provides it)", hDBCred, *p.Reference)
	}
	// The vault placed again on n3: the credential follows it (its entry
	// in mesh-vault_bound answers it).
	put(t, m, mesh.PlacementBucket, "n3", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "mesh-vault"}}})
	settle(t, m)
	if p, _ := m.Provision(hDBCred); p.Provider != (mesh.Ref{Module: "mesh-vault", Node: "n3"}) || p.State != mesh.Provided {
		t.Errorf("%s = %s of %+v; want provided by mesh-vault on n3", hDBCred, p.State, p.Provider)
	}
}

// yes answers the ask of key yes, as the router records it, and re-judges
// the key; it returns the judgement.
func yes(t *testing.T, m *state.Mesh, key string) *compose.Result {
	t.Helper()
	p, _ := m.Provision(key)
	a, ok := m.Record(p.Ask)
	if !ok {
		t.Fatalf("%s has no recorded ask (%q)", key, p.Ask)
	}
	a.State = mesh.RecordAnswered
	a.Warrant = &mesh.RecordWarrant{Asker: retire.Asker, Ask: p.Ask, Outcome: mesh.OutcomeChosen, Option: retire.Yes,
		Binds: mesh.ActDigest(key, p.Ask, retire.Yes), By: mesh.Identity{Who: "alice", Kind: "nats-user", Identity: "alice"}, At: at}
	put(t, m, mesh.RecordsBucket, p.Ask, a)
	res := compose.Judge(m, []string{key}, m.NeedOf, at)
	take(m, res)
	return res
}

// recordAsks records every ask a result raised, open, as the router does.
func recordAsks(t *testing.T, m *state.Mesh, res map[string]*compose.Result) map[string]mesh.Ask {
	t.Helper()
	out := map[string]mesh.Ask{}
	for _, r := range res {
		for _, a := range r.Asks {
			put(t, m, mesh.RecordsBucket, a.ID, mesh.Record{State: mesh.RecordOpen, Ask: a})
			out[strings.TrimPrefix(a.About, "provision.")] = a
		}
	}
	return out
}

// Each ask promises only what its provider can remove, and a yes retires
// the key saying what was removed: redis (by have) removes nothing;
// postgres removes what it set up once its entry goes; the vault that left
// with its entry removes nothing, so the key goes on the yes and its why
// says what to clean by hand.
func TestRetiringSaysWhatItsProviderRemoves(t *testing.T) {
	m := heldProvided(t)
	// app leaves n2 and the vault leaves the mesh (its entry stays).
	put(t, m, mesh.PlacementBucket, "n2", mesh.Placement{})
	put(t, m, mesh.PlacementBucket, "n1", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "postgres"}, {Module: "redis"}}})
	asks := recordAsks(t, m, settle(t, m))
	for key, want := range map[string]string{
		hCache: "The key is dropped; nothing of redis on n1 is removed.",
		hDB:    "postgres on n1 removes app's access to the database and hands what app owned to the database's owner; the database and its data stay.",
	} {
		if o, _ := asks[key].Option(retire.Yes); o.Does != want {
			t.Errorf("ask of %s: Remove does %q; want %q", key, o.Does, want)
		}
	}
	if _, ok := asks[hDBCred]; ok {
		t.Errorf("%s asked while %s depends on it", hDBCred, hDB)
	}

	res := yes(t, m, hCache)
	if w := res.RetiredWhy[hCache]; w != "retired on the operator's warrant: redis on n1 answers cache by running and keeps nothing for app, so nothing was removed" {
		t.Errorf("retired %v, why of %s = %q", res.Retired, hCache, w)
	}
	if res = yes(t, m, hDB); len(res.Retired) != 0 {
		t.Fatalf("%s retired while postgres keeps its entry", hDB)
	}
	tc := m.Take(bus.Change{Bucket: mesh.BoundBucket("postgres"), Key: hDB, Deleted: true})
	res = compose.Judge(m, tc.Keys, m.NeedOf, at)
	take(m, res)
	if w := res.RetiredWhy[hDB]; w != "retired on the operator's warrant: postgres on n1 removed what it set up for app" {
		t.Errorf("retired %v, why of %s = %q", res.Retired, hDB, w)
	}

	// Its dependent gone, the credential is asked about: the ask says its
	// vault left with it, and what stays.
	asks = recordAsks(t, m, settle(t, m))
	const clean = "clean by hand its entry " + hDBCred + " in mesh-vault_bound and the credential it keeps in its store"
	a := asks[hDBCred]
	if o, _ := a.Option(retire.Yes); o.Does != "The key is dropped; nothing removes what mesh-vault on n1 set up: "+clean+"." ||
		!strings.Contains(a.Explanation, "mesh-vault is no longer placed on n1, so nothing running can remove") {
		t.Errorf("ask of %s = %q, Remove does %q; want it to say the vault left and what to clean", hDBCred, a.Explanation, o.Does)
	}
	res = yes(t, m, hDBCred)
	if w := res.RetiredWhy[hDBCred]; w != "retired on the operator's warrant: mesh-vault on n1 left n1 with its entry, and nothing removed it: "+clean {
		t.Errorf("retired %v, why of %s = %q", res.Retired, hDBCred, w)
	}
	if keys := m.ProvisionsOf("n2"); len(keys) != 0 {
		t.Errorf("n2 keeps keys %v; want none", keys)
	}
}

// A key approved yes whose provider then leaves its node with its entry:
// nothing running will remove the entry, so the key goes on the warrant
// as the provider leaves, its why saying what to clean by hand (it stayed
// retiring for ever: "place it there again, or delete the entry"). An open
// ask whose provider leaves is withdrawn and asked anew, saying so: no ask
// promises what nothing running does.
func TestProviderThatLeavesAfterTheAsk(t *testing.T) {
	m := heldProvided(t)
	put(t, m, mesh.PlacementBucket, "n2", mesh.Placement{})
	asks := recordAsks(t, m, settle(t, m))
	if o, _ := asks[hDB].Option(retire.Yes); !strings.HasPrefix(o.Does, "postgres on n1 removes app's access") {
		t.Fatalf("ask of %s: Remove does %q; want postgres to remove app's access", hDB, o.Does)
	}
	if res := yes(t, m, hDB); len(res.Retired) != 0 {
		t.Fatalf("%s retired while postgres keeps its entry on n1", hDB)
	}
	// postgres leaves n1, its entry kept: the approved key is re-judged.
	tc := put(t, m, mesh.PlacementBucket, "n1", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "mesh-vault"}, {Module: "redis"}}})
	res := compose.Judge(m, tc.Keys, m.NeedOf, at)
	take(m, res)
	want := "retired on the operator's warrant: postgres on n1 left n1 with its entry, and nothing removed it: " +
		"clean by hand its entry " + hDB + " in postgres_bound and what it set up for app, such as a login"
	if w := res.RetiredWhy[hDB]; w != want {
		t.Errorf("judged %v: retired %v, why of %s = %q; want %q", tc.Keys, res.Retired, hDB, w, want)
	}
	if _, ok := m.Provision(hDB); ok {
		t.Errorf("%s still kept", hDB)
	}

	// Its credential is asked about now, the vault promising to delete it;
	// the vault leaves n1 before anyone answers.
	asks = recordAsks(t, m, settle(t, m))
	old := asks[hDBCred]
	if o, _ := old.Option(retire.Yes); !strings.HasPrefix(o.Does, "mesh-vault on n1 deletes app's credential") {
		t.Fatalf("ask of %s: Remove does %q; want the vault to delete it", hDBCred, o.Does)
	}
	put(t, m, mesh.PlacementBucket, "n1", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "redis"}}})
	last := settle(t, m)
	r := last["n2"]
	if r == nil || r.Withdrawn[hDBCred] != old.ID || r.WithdrawnWhy[hDBCred] != "what mesh-vault on n1 can remove for the key "+hDBCred+
		" changed since it was asked (it left its node, or its entry came or went): it is asked anew" {
		t.Fatalf("n2's composition after the vault left = %+v; want %s's ask %s withdrawn, saying why", r, hDBCred, old.ID)
	}
	asks = recordAsks(t, m, last)
	if o, _ := asks[hDBCred].Option(retire.Yes); !strings.HasPrefix(o.Does, "The key is dropped; nothing removes what mesh-vault on n1 set up") {
		t.Errorf("new ask of %s: Remove does %q; want it to say nothing removes it", hDBCred, o.Does)
	}
	res = yes(t, m, hDBCred)
	if len(res.Retired) != 1 || res.Retired[0] != hDBCred {
		t.Errorf("yes on the new ask retired %v; want %s", res.Retired, hDBCred)
	}
}

// A retiring key follows its provider to the node it is placed on now (the
// same provider, another instance: a vault moved with its store): its
// provider becomes that instance, and an open ask that promised what the
// departed one could not do is withdrawn and asked anew with what the new
// one does. It stayed with mesh-vault on n1, its ask telling the operator
// to clean by hand what n3's vault now keeps.
func TestRetiringKeyFollowsItsMovedProvider(t *testing.T) {
	m := heldProvided(t)
	put(t, m, mesh.PlacementBucket, "n2", mesh.Placement{})
	recordAsks(t, m, settle(t, m))
	yes(t, m, hDB)
	tc := m.Take(bus.Change{Bucket: mesh.BoundBucket("postgres"), Key: hDB, Deleted: true})
	take(m, compose.Judge(m, tc.Keys, m.NeedOf, at))
	asks := recordAsks(t, m, settle(t, m))
	if o, _ := asks[hDBCred].Option(retire.Yes); !strings.HasPrefix(o.Does, "mesh-vault on n1 deletes app's credential") {
		t.Fatalf("ask of %s: Remove does %q; want the vault on n1 to delete it", hDBCred, o.Does)
	}
	// The vault leaves n1: nothing running can remove it, asked anew.
	put(t, m, mesh.PlacementBucket, "n1", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "postgres"}, {Module: "redis"}}})
	asks = recordAsks(t, m, settle(t, m))
	gone := asks[hDBCred]
	if o, _ := gone.Option(retire.Yes); !strings.HasPrefix(o.Does, "The key is dropped; nothing removes what mesh-vault on n1 set up") {
		t.Fatalf("ask of %s once the vault left: Remove does %q; want nothing to remove it", hDBCred, o.Does)
	}
	// The vault placed on n3 (its store moved there): the key follows it.
	put(t, m, mesh.PlacementBucket, "n3", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "mesh-vault"}}})
	last := settle(t, m)
	p, _ := m.Provision(hDBCred)
	if p.State != mesh.Retiring || p.Provider != (mesh.Ref{Module: "mesh-vault", Node: "n3"}) {
		t.Errorf("%s = %s of %+v; want retiring, of mesh-vault on n3", hDBCred, p.State, p.Provider)
	}
	if want := "no build wanted or placed on n2 requires credential of mesh-vault on n3 any more"; p.Why != want {
		t.Errorf("%s says %q; want %q", hDBCred, p.Why, want)
	}
	r := last["n2"]
	if r == nil || r.Withdrawn[hDBCred] != gone.ID || r.WithdrawnWhy[hDBCred] != "what mesh-vault on n1 can remove for the key "+hDBCred+
		" changed since it was asked (it left its node, or its entry came or went): it is asked anew" {
		t.Fatalf("n2's composition after the vault came to n3 = %+v; want %s's ask %s withdrawn, saying why", r, hDBCred, gone.ID)
	}
	asks = recordAsks(t, m, last)
	if o, _ := asks[hDBCred].Option(retire.Yes); !strings.HasPrefix(o.Does, "mesh-vault on n3 deletes app's credential") {
		t.Errorf("new ask of %s: Remove does %q; want the vault on n3 to delete it", hDBCred, o.Does)
	}
	if p.Ask != asks[hDBCred].ID {
		t.Errorf("%s names ask %q; want the new one %q", hDBCred, p.Ask, asks[hDBCred].ID)
	}
	// Approved, it waits for n3's vault to remove its entry.
	if res := yes(t, m, hDBCred); len(res.Retired) != 0 {
		t.Errorf("yes retired %v while mesh-vault on n3 keeps its entry", res.Retired)
	}
	tc = m.Take(bus.Change{Bucket: mesh.BoundBucket("mesh-vault"), Key: hDBCred, Deleted: true})
	res := compose.Judge(m, tc.Keys, m.NeedOf, at)
	if w := res.RetiredWhy[hDBCred]; w != "retired on the operator's warrant: mesh-vault on n3 removed the credential" {
		t.Errorf("retired %v, why of %s = %q", res.Retired, hDBCred, w)
	}
}
