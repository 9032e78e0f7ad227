package meshfile

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func mustParse(t *testing.T, text string) *File {
	t.Helper()
	f, err := Parse("t.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return f
}

// applied returns current with the diff's puts and removes taken in.
func applied(current map[string]map[string][]byte, d *Diff) map[string]map[string][]byte {
	out := map[string]map[string][]byte{}
	for b, keys := range current {
		out[b] = map[string][]byte{}
		for k, v := range keys {
			out[b][k] = v
		}
	}
	for _, p := range d.Puts {
		if out[p.Bucket] == nil {
			out[p.Bucket] = map[string][]byte{}
		}
		out[p.Bucket][p.Key] = p.Value
	}
	for _, r := range d.Removes {
		delete(out[r.Bucket], r.Key)
	}
	return out
}

func buildAt(t *testing.T, current map[string]map[string][]byte, key string) time.Time {
	t.Helper()
	var b mesh.Build
	if err := json.Unmarshal(current[mesh.BuildsBucket][key], &b); err != nil {
		t.Fatalf("build %s: %v", key, err)
	}
	return b.At
}

const threeBuilds = `nodes: [a]
modules:
  app:
    builds:
      - {fp: f1, manifest: {module: app}}
      - {fp: f2, manifest: {module: app, ports: [{name: http}]}}
      - {fp: f3, manifest: {module: app, ports: [{name: http}, {name: ssh}]}}
placement:
  a: [app]
wants:
  a: {app: f2}
`

// TestDiffBuildTimes checks that builds get increasing times in the order
// listed, keep them on a second apply, and that a build inserted in the
// middle keeps the order.
func TestDiffBuildTimes(t *testing.T) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	f := mustParse(t, threeBuilds)
	d := f.Diff(nil, now)
	cur := applied(nil, d)
	at1, at2, at3 := buildAt(t, cur, "app.f1"), buildAt(t, cur, "app.f2"), buildAt(t, cur, "app.f3")
	if !at1.Equal(now) || !at2.Equal(now.Add(time.Millisecond)) || !at3.Equal(now.Add(2*time.Millisecond)) {
		t.Errorf("build times = %v %v %v; want now, now+1ms, now+2ms", at1, at2, at3)
	}
	if len(d.Puts) != 1+3+3+1+1 { // placement, 3 manifests, 3 builds, module, want
		t.Errorf("first diff puts %d keys; want 9", len(d.Puts))
	}

	d = f.Diff(cur, now.Add(time.Hour))
	if len(d.Puts) != 0 || len(d.Removes) != 0 {
		t.Fatalf("second diff = %d puts, %d removes (%+v); want nothing", len(d.Puts), len(d.Removes), d.Puts)
	}
	if d.Unchanged[mesh.BuildsBucket] != 3 || d.Unchanged[mesh.ManifestsBucket] != 3 || d.Unchanged[mesh.PlacementBucket] != 1 {
		t.Errorf("Unchanged = %v", d.Unchanged)
	}

	// A build listed between f1 and f2 gets a time after f1 and before
	// f2; f2 and f3 are rewritten after it, so that the order holds.
	later := now.Add(time.Hour)
	g := mustParse(t, `nodes: [a]
modules:
  app:
    builds:
      - {fp: f1, manifest: {module: app}}
      - {fp: f15, manifest: {module: app, dirs: [{name: state}]}}
      - {fp: f2, manifest: {module: app, ports: [{name: http}]}}
      - {fp: f3, manifest: {module: app, ports: [{name: http}, {name: ssh}]}}
placement:
  a: [app]
`)
	d = g.Diff(cur, later)
	next := applied(cur, d)
	a1, a15, a2, a3 := buildAt(t, next, "app.f1"), buildAt(t, next, "app.f15"), buildAt(t, next, "app.f2"), buildAt(t, next, "app.f3")
	if !a1.Equal(at1) {
		t.Errorf("f1 at = %v; want kept %v", a1, at1)
	}
	if !(a1.Before(a15) && a15.Before(a2) && a2.Before(a3)) {
		t.Errorf("times f1 %v, f15 %v, f2 %v, f3 %v; want increasing", a1, a15, a2, a3)
	}
	if got := d.Removes; len(got) != 1 || got[0] != (Remove{Bucket: mesh.WantsBucket, Key: "want.a.app"}) {
		t.Errorf("removes = %+v; want want.a.app alone", got)
	}
	var rec mesh.ModuleRecord
	if err := json.Unmarshal(next[mesh.ModulesBucket]["app"], &rec); err != nil || rec.Manifest != g.Module("app").Trunk().Digest {
		t.Errorf("module record = %+v; want the digest of f3", rec)
	}
	if d := g.Diff(next, later.Add(time.Hour)); len(d.Puts)+len(d.Removes) != 0 {
		t.Errorf("re-diff after the insert changes %+v", d.Puts)
	}
}

// TestDiffRemoves checks which keys a file that no longer has a node or a
// module removes, and which it leaves.
func TestDiffRemoves(t *testing.T) {
	f := mustParse(t, `nodes: [a, b]
modules:
  x: {builds: [{fp: f1, manifest: {module: x}}]}
  y: {builds: [{fp: f1, manifest: {module: y}}]}
placement:
  a: [x]
  b: [x, y]
wants:
  a: {x: f1}
haves:
  b: {y: {phase: running, health: ok, fp: f1}}
`)
	put := func(v any) []byte { return marshal(v) }
	current := map[string]map[string][]byte{
		mesh.PlacementBucket: {
			"a":        put(mesh.Placement{Modules: []mesh.PlacedModule{{Module: "x"}, {Module: "y"}}}),
			"c":        put(mesh.Placement{Modules: []mesh.PlacedModule{{Module: "x"}}}),
			"Odd_Node": []byte(`{}`),
		},
		mesh.WantsBucket: {
			"want.a.x": put(mesh.Want{Fingerprint: "f1"}),
			"want.a.y": put(mesh.Want{Fingerprint: "f1"}),
			"want.c.x": put(mesh.Want{Fingerprint: "f1"}),
			"want.b.y": put(mesh.Want{Fingerprint: "f1"}),
			"wanted.a": []byte(`{}`),
		},
		mesh.HaveBucket: {
			"a":     put(mesh.Have{Phase: "running", Health: "ok"}),                                 // the node itself: kept
			"a.x":   put(mesh.Have{Phase: "running", Health: "ok"}),                                 // placed, not in the file: kept (its engine writes it)
			"b.x":   put(mesh.Have{Phase: "running", Health: "ok", WrittenBy: mesh.HaveByMeshFile}), // placed, written by a file, not in this one: removed
			"a.y":   put(mesh.Have{Phase: "running", Health: "ok"}),                                 // y no longer placed on a: removed
			"c":     put(mesh.Have{Phase: "running", Health: "ok"}),                                 // node c gone: removed
			"c.x":   put(mesh.Have{Phase: "running", Health: "ok"}),                                 // node c gone: removed
			"b.y":   put(mesh.Have{Phase: "stopped", Health: "unknown", Fingerprint: "f1"}),
			"a.x.z": []byte(`{}`),
		},
		mesh.BuildsBucket:  {"z.f9": []byte(`{}`)},
		mesh.ModulesBucket: {"z": []byte(`{}`)},
	}
	d := f.Diff(current, time.Now())
	want := []Remove{
		{Bucket: mesh.PlacementBucket, Key: "c"},
		{Bucket: mesh.WantsBucket, Key: "want.a.y"},
		{Bucket: mesh.WantsBucket, Key: "want.b.y"},
		{Bucket: mesh.WantsBucket, Key: "want.c.x"},
		{Bucket: mesh.HaveBucket, Key: "a.y"},
		{Bucket: mesh.HaveBucket, Key: "b.x"},
		{Bucket: mesh.HaveBucket, Key: "c"},
		{Bucket: mesh.HaveBucket, Key: "c.x"},
	}
	if len(d.Removes) != len(want) {
		t.Fatalf("Removes = %+v; want %+v", d.Removes, want)
	}
	for i := range want {
		if d.Removes[i] != want[i] {
			t.Errorf("Removes[%d] = %+v; want %+v", i, d.Removes[i], want[i])
		}
	}
	odd := map[string]string{}
	for _, o := range d.Odd {
		odd[o.Bucket+" "+o.Key] = o.Why
	}
	if len(odd) != 3 || odd[mesh.PlacementBucket+" Odd_Node"] == "" || odd[mesh.WantsBucket+" wanted.a"] == "" || odd[mesh.HaveBucket+" a.x.z"] == "" {
		t.Errorf("Odd = %+v; want Odd_Node, wanted.a and a.x.z", d.Odd)
	}
	// Placement a is rewritten to [x]; b's have of y is rewritten to the file's.
	var puts []string
	for _, p := range d.Puts {
		if p.Bucket == mesh.PlacementBucket || p.Bucket == mesh.HaveBucket {
			puts = append(puts, p.Bucket+" "+p.Key+" "+string(p.Value))
		}
	}
	wantPuts := []string{
		mesh.HaveBucket + ` b.y {"phase":"running","health":"ok","fp":"f1","written-by":"mesh-file"}`,
		mesh.PlacementBucket + ` a {"modules":[{"module":"x"}]}`,
		mesh.PlacementBucket + ` b {"modules":[{"module":"x"},{"module":"y"}]}`,
	}
	if len(puts) != len(wantPuts) {
		t.Fatalf("placement and have puts = %q; want %q", puts, wantPuts)
	}
	for i := range puts {
		if puts[i] != wantPuts[i] {
			t.Errorf("put %d = %s; want %s", i, puts[i], wantPuts[i])
		}
	}
}

// placementPuts returns the keys of the diff's placement puts, in order.
func placementPuts(d *Diff) []string {
	var out []string
	for _, p := range d.Puts {
		if p.Bucket == mesh.PlacementBucket {
			out = append(out, p.Key)
		}
	}
	return out
}

// TestDiffPlacementOrder checks that a fresh mesh's placement keys are
// written provider nodes first, each after the nodes of the providers it
// requires, so that the seat never composes a node whose providers are
// placed on no node yet.
func TestDiffPlacementOrder(t *testing.T) {
	f, err := ParseFile(homelab)
	if err != nil {
		t.Fatal(err)
	}
	// control hosts postgres, keycloak, redis, route-proxy and mesh-vault;
	// ace hosts gitea, which woodpecker on shanks requires.
	if got, want := fmt.Sprint(placementPuts(f.Diff(nil, time.Now()))), "[control ace g14 shanks]"; got != want {
		t.Errorf("homelab placement puts = %s; want %s", got, want)
	}

	f = mustParse(t, `nodes: [a, b, c, d, e, f, g]
modules:
  web: {builds: [{fp: f1, manifest: {module: web, requires: [{provision: api, from: app}]}}]}
  app:
    builds:
      - {fp: f1, manifest: {module: app}}
      - {fp: f2, manifest: {module: app, provides: [{name: api}], requires: [{provision: database, from: db}]}}
  loner: {builds: [{fp: f1, manifest: {module: loner}}]}
  db: {builds: [{fp: f1, manifest: {module: db, provides: [{name: database}]}}]}
  c1: {builds: [{fp: f1, manifest: {module: c1, provides: [{name: x}], requires: [{provision: x, from: c2}]}}]}
  c2: {builds: [{fp: f1, manifest: {module: c2, provides: [{name: x}], requires: [{provision: x, from: c1}]}}]}
  mesh-vault: {builds: [{fp: f1, manifest: {module: mesh-vault}}]}
placement:
  a: [web]
  b: [app]
  c: [loner]
  d: [db]
  e: [c1]
  f: [c2]
  g: [mesh-vault]
`)
	// Providers b, d, e, f, g before a and c; d and g (the vault, which
	// every node with requirements waits for) before b; the cycle e-f by
	// name; then a (after b) and c.
	if got, want := fmt.Sprint(placementPuts(f.Diff(nil, time.Now()))), "[d g b e f a c]"; got != want {
		t.Errorf("placement puts = %s; want %s", got, want)
	}
	// Only changed keys are put, in the same order.
	cur := applied(nil, f.Diff(nil, time.Now()))
	delete(cur[mesh.PlacementBucket], "a")
	delete(cur[mesh.PlacementBucket], "d")
	if got, want := fmt.Sprint(placementPuts(f.Diff(cur, time.Now()))), "[d a]"; got != want {
		t.Errorf("placement puts after two keys went = %s; want %s", got, want)
	}
}
