package compose_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// load takes every key a mesh file writes into a fresh in-memory mesh, as
// the seat's watched copies would.
func load(t testing.TB, path string) *state.Mesh {
	t.Helper()
	f, err := meshfile.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return loadFile(t, f)
}

// loadFile takes every key of a parsed mesh file into a fresh in-memory
// mesh.
func loadFile(t testing.TB, f *meshfile.File) *state.Mesh {
	t.Helper()
	m := state.New()
	keys := f.Keys()
	// Builds get increasing times in the order listed, as apply gives them.
	if keys[mesh.BuildsBucket] == nil {
		keys[mesh.BuildsBucket] = map[string][]byte{}
	}
	for i, b := range f.Builds() {
		b.At = at.Add(time.Duration(i-1000) * time.Second)
		v, _ := json.Marshal(b)
		keys[mesh.BuildsBucket][mesh.BuildKey{Module: b.Module, Fingerprint: b.Fingerprint}.String()] = v
	}
	rev := uint64(0)
	for _, bucket := range meshfile.Buckets {
		names := make([]string, 0, len(keys[bucket]))
		for k := range keys[bucket] {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			rev++
			if tc := m.Take(bus.Change{Bucket: bucket, Key: k, Value: keys[bucket][k], Revision: rev}); tc.Odd != nil {
				t.Fatalf("odd key: %v", tc.Odd)
			}
		}
	}
	return m
}

// settle composes every node, taking each result's writes back into the
// mesh as the seat does, until a round changes nothing. It returns the
// results of the last changing round by node.
func settle(t testing.TB, m *state.Mesh) map[string]*compose.Result {
	t.Helper()
	last := map[string]*compose.Result{}
	for round := 0; round < 5; round++ {
		changed := false
		for _, node := range m.Nodes() {
			res := compose.Node(m, node, at)
			m.Composed(res)
			take(m, res)
			if res.Changed() {
				changed = true
				last[node] = res
			}
		}
		if !changed {
			return last
		}
	}
	t.Fatal("composition did not settle in 5 rounds")
	return nil
}

func take(m *state.Mesh, res *compose.Result) {
	for k, v := range res.Plans {
		m.Take(bus.Change{Bucket: mesh.PlansBucket, Key: k, Value: v})
	}
	for _, k := range res.PlansRemoved {
		m.Take(bus.Change{Bucket: mesh.PlansBucket, Key: k, Deleted: true})
	}
	for k, r := range res.Refusals {
		v, _ := json.Marshal(r)
		m.Take(bus.Change{Bucket: mesh.RefusedBucket, Key: k, Value: v})
	}
	for _, k := range res.RefusalsRemoved {
		m.Take(bus.Change{Bucket: mesh.RefusedBucket, Key: k, Deleted: true})
	}
	for k, p := range res.Provisions {
		v, _ := json.Marshal(p)
		m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: k, Value: v})
	}
	for _, k := range res.Retired {
		m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: k, Deleted: true})
	}
}

// kept is what the seat keeps after composing a mesh, as stored.
type kept struct {
	Plans      map[string]json.RawMessage `json:"plans"`
	Provisions map[string]mesh.Provision  `json:"provisions"`
	Refused    map[string]mesh.Refusal    `json:"refused"`
}

func keptOf(m *state.Mesh) kept {
	k := kept{Plans: map[string]json.RawMessage{}, Provisions: map[string]mesh.Provision{}, Refused: map[string]mesh.Refusal{}}
	for _, n := range m.Nodes() {
		for _, key := range m.PlansOf(n) {
			b, _ := m.Plan(key)
			k.Plans[key] = b
		}
	}
	m.Provisions(func(key string, p mesh.Provision) { k.Provisions[key] = p })
	m.Refusals(func(key string, r mesh.Refusal) { k.Refused[key] = r })
	return k
}

// TestGolden composes each shared mesh with no bus and compares all the
// seat would keep with testdata/<mesh>.golden.json (go test -update
// rewrites it; review the diff).
func TestGolden(t *testing.T) {
	for _, name := range []string{"homelab"} {
		t.Run(name, func(t *testing.T) {
			m := load(t, filepath.Join("..", "..", "examples", name+".yaml"))
			settle(t, m)
			got, err := json.MarshalIndent(keptOf(m), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if string(want) != string(got)+"\n" {
				t.Errorf("composition of %s differs from %s; run go test ./internal/compose -update and review the diff", name, golden)
			}
		})
	}
}

// A settled mesh composes to nothing new, and composing a node does not
// allocate beyond a budget.
func TestSettledNodeChangesNothing(t *testing.T) {
	m := load(t, filepath.Join("..", "..", "examples", "homelab.yaml"))
	settle(t, m)
	for _, n := range m.Nodes() {
		if res := compose.Node(m, n, at); res.Changed() || len(res.Held) > 0 || len(res.Problems) > 0 {
			t.Errorf("settled node %s composed to changes: %+v", n, res)
		}
	}
	allocs := testing.AllocsPerRun(20, func() { compose.Node(m, "shanks", at) })
	if allocs > 40 { // 18 on 2026-12-01 (go1.26); 195 before the scratch memory
		t.Errorf("composing shanks allocates %.0f times; budget 40", allocs)
	}
}

// The mesh keeps of each composition's needs only what their keys do not
// say: NeedOf gives back, for every key a settled mesh's compositions
// need (credentials, own and shared, included), a Need equal to the
// composition's.
func TestNeedOfIsTheComposedNeed(t *testing.T) {
	for name, m := range map[string]*state.Mesh{
		"homelab": load(t, filepath.Join("..", "..", "examples", "homelab.yaml")),
		"gen-10":  loadGen(t, 10),
	} {
		settle(t, m)
		credentials := 0
		for _, node := range m.Nodes() {
			res := compose.Node(m, node, at)
			m.Composed(res)
			for key, n := range res.Needed {
				if n.Provision == mesh.CredentialProvision {
					credentials++
				}
				got := m.NeedOf(key)
				if got == nil || !reflect.DeepEqual(*got, *n) {
					t.Errorf("%s: NeedOf(%s) = %+v; want %+v", name, key, got, n)
				}
			}
		}
		if credentials == 0 {
			t.Errorf("%s: no credential needed; want some", name)
		}
		if got := m.NeedOf("nowhere.app.database"); got != nil {
			t.Errorf("%s: NeedOf of a key no composition needs = %+v; want nil", name, got)
		}
	}
}

// A key that depends on a shared credential (held on its provider's node)
// names it with the mesh's own string of that key, not a copy per
// dependent: composed with no stored provision of its own (so that no
// stored depends-on list is taken again), a dependent's list shares the
// bytes of the key in the credential node's ProvisionsOf.
func TestDependsOnSharesTheCredentialsKey(t *testing.T) {
	m := loadGen(t, 10)
	shared := 0
	m.Provisions(func(key string, p mesh.Provision) {
		if len(p.DependsOn) != 1 {
			return
		}
		dep, err := mesh.ParseProvisionKey(p.DependsOn[0])
		if err != nil || dep.Node == p.Consumer.Node || shared > 0 {
			return
		}
		shared++
		// Compose the dependent's node with the dependent gone.
		m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: key, Deleted: true})
		res := compose.Node(m, p.Consumer.Node, at)
		n := res.Needed[key]
		if n == nil || len(n.DependsOn) != 1 || n.DependsOn[0] != p.DependsOn[0] {
			t.Fatalf("%s composed anew needs %+v; want it depending on %s", key, n, p.DependsOn[0])
		}
		keys := m.ProvisionsOf(dep.Node)
		i, found := slices.BinarySearch(keys, p.DependsOn[0])
		if !found {
			t.Fatalf("%s is not among the provisions of %s", p.DependsOn[0], dep.Node)
		}
		if unsafe.StringData(n.DependsOn[0]) != unsafe.StringData(keys[i]) {
			t.Errorf("%s depends on a copy of %s; want the mesh's own string", key, keys[i])
		}
	})
	if shared == 0 {
		t.Fatal("gen-10 has no key depending on another node's credential; want one")
	}
}
