package meshfile_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

const homelab = "../../examples/homelab.yaml"

// homelabCounts is the number of keys the homelab writes per bucket.
var homelabCounts = map[string]int{
	mesh.PlacementBucket: 4,
	mesh.WantsBucket:     17,
	mesh.ModulesBucket:   15,
	mesh.ManifestsBucket: 16,
	mesh.BuildsBucket:    16,
	mesh.HaveBucket:      8,
}

// keysOf returns every key of bucket and its value.
func keysOf(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket string) map[string][]byte {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	out := map[string][]byte{}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatalf("list %s: %v", bucket, err)
	}
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s %s: %v", bucket, k, err)
		}
		out[k] = e.Value()
	}
	return out
}

func parse(t *testing.T, name, text string) *meshfile.File {
	t.Helper()
	f, err := meshfile.Parse(name, []byte(text))
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return f
}

func readHomelab(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(homelab)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withoutVaultwarden returns the homelab with vaultwarden dropped from ace's
// placement and wants.
func withoutVaultwarden(t *testing.T, text string) string {
	t.Helper()
	for _, r := range [][2]string{
		{"ace: [gitea, vaultwarden, node-tools]", "ace: [gitea, node-tools]"},
		{"ace: {gitea: b7c100, vaultwarden: 4a4a4a, node-tools: 0d0d01}", "ace: {gitea: b7c100, node-tools: 0d0d01}"},
	} {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("homelab has no %q", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	return text
}

// TestApplyHomelab applies the homelab, applies it again (nothing
// written), then applies it without vaultwarden on ace.
func TestApplyHomelab(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "apply")
	ctx := bustest.Context(t)
	text := readHomelab(t)
	f := parse(t, "homelab", text)
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

	st, err := meshfile.Apply(ctx, js, f, now)
	if err != nil {
		t.Fatalf("Apply = %v", err)
	}
	if st.Written != 76 || st.Unchanged != 0 || st.Removed != 0 {
		t.Errorf("first Apply = %+v; want 76 written, 0 unchanged, 0 removed", st.Counts)
	}
	for bucket, n := range homelabCounts {
		if got := st.Buckets[bucket]; got != (meshfile.Counts{Written: n}) {
			t.Errorf("first Apply %s = %+v; want %d written", bucket, got, n)
		}
		if got := len(keysOf(t, ctx, js, bucket)); got != n {
			t.Errorf("bucket %s holds %d keys; want %d", bucket, got, n)
		}
	}
	if got := string(keysOf(t, ctx, js, mesh.PlacementBucket)["ace"]); got != `{"modules":[{"module":"gitea"},{"module":"vaultwarden"},{"module":"node-tools"}]}` {
		t.Errorf("placement ace = %s", got)
	}
	builds := keysOf(t, ctx, js, mesh.BuildsBucket)

	// The same file again, later: nothing written.
	st, err = meshfile.Apply(ctx, js, f, now.Add(time.Hour))
	if err != nil {
		t.Fatalf("second Apply = %v", err)
	}
	if st.Counts != (meshfile.Counts{Unchanged: 76}) {
		t.Errorf("second Apply = %+v; want 0 written, 76 unchanged, 0 removed", st.Counts)
	}
	for k, v := range keysOf(t, ctx, js, mesh.BuildsBucket) {
		if string(v) != string(builds[k]) {
			t.Errorf("build %s = %s after the second apply; want it kept as %s", k, v, builds[k])
		}
	}

	// Without vaultwarden on ace: the placement of ace is rewritten and its
	// want removed; nothing else changes.
	st, err = meshfile.Apply(ctx, js, parse(t, "homelab-", withoutVaultwarden(t, text)), now.Add(2*time.Hour))
	if err != nil {
		t.Fatalf("third Apply = %v", err)
	}
	if st.Counts != (meshfile.Counts{Written: 1, Unchanged: 74, Removed: 1}) {
		t.Errorf("third Apply = %+v; want 1 written, 74 unchanged, 1 removed", st.Counts)
	}
	if st.Buckets[mesh.PlacementBucket].Written != 1 || st.Buckets[mesh.WantsBucket].Removed != 1 {
		t.Errorf("third Apply per bucket = %+v", st.Buckets)
	}
	if got := string(keysOf(t, ctx, js, mesh.PlacementBucket)["ace"]); got != `{"modules":[{"module":"gitea"},{"module":"node-tools"}]}` {
		t.Errorf("placement ace = %s; want gitea and node-tools", got)
	}
	wants := keysOf(t, ctx, js, mesh.WantsBucket)
	if _, ok := wants["want.ace.vaultwarden"]; ok || len(wants) != 16 {
		t.Errorf("wants = %d keys, want.ace.vaultwarden present %v; want 16 and gone", len(wants), ok)
	}
	if got := len(keysOf(t, ctx, js, mesh.BuildsBucket)); got != 16 {
		t.Errorf("builds = %d; want 16 (builds stay)", got)
	}
	if _, ok := keysOf(t, ctx, js, mesh.ModulesBucket)["vaultwarden"]; !ok {
		t.Errorf("module vaultwarden is gone; modules stay")
	}
}

// TestApplyReadsOnce applies a generated mesh to an empty store and checks
// that Apply's connection received about one message per write (its ack),
// not two: each bucket's watch stops once its values are read, so that the
// echo of Apply's own writes is not delivered to it.
func TestApplyReadsOnce(t *testing.T) {
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s, "apply")
	ctx := bustest.Context(t)
	f, err := meshfile.Parse("gen-40", gen.Generate(40, 4, 1))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	before := nc.Stats().InMsgs
	st, err := meshfile.Apply(ctx, js, f, time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatalf("Apply = %v", err)
	}
	if st.Written < 300 {
		t.Fatalf("Apply wrote %d keys; want at least 300 for the count below to tell", st.Written)
	}
	// Beside the acks, a few replies per bucket: its info, its watch's
	// consumer and status.
	got := nc.Stats().InMsgs - before
	if limit := uint64(st.Written + 10*len(meshfile.Buckets)); got > limit {
		t.Errorf("Apply of %d keys received %d messages; want at most %d (the echo of its writes delivered?)", st.Written, got, limit)
	}
}

// TestApplyBuildTimes checks on the bus that the last listed build is the
// newest and that a re-apply keeps the times.
func TestApplyBuildTimes(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "apply")
	ctx := bustest.Context(t)
	f := parse(t, "homelab", readHomelab(t))
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	if _, err := meshfile.Apply(ctx, js, f, now); err != nil {
		t.Fatal(err)
	}
	at := func() (older, newer time.Time) {
		builds := keysOf(t, ctx, js, mesh.BuildsBucket)
		var a, b mesh.Build
		if err := json.Unmarshal(builds["gitea.b7c100"], &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(builds["gitea.b7c2f0"], &b); err != nil {
			t.Fatal(err)
		}
		if a.Manifest == b.Manifest || b.Manifest != f.Module("gitea").Trunk().Digest {
			t.Errorf("gitea builds name manifests %s and %s", a.Manifest, b.Manifest)
		}
		return a.At, b.At
	}
	a, b := at()
	if !a.Equal(now) || !b.Equal(now.Add(time.Millisecond)) {
		t.Errorf("gitea builds at %v and %v; want %v and 1ms later", a, b, now)
	}
	if _, err := meshfile.Apply(ctx, js, f, now.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if a2, b2 := at(); !a2.Equal(a) || !b2.Equal(b) {
		t.Errorf("after a re-apply gitea builds at %v and %v; want kept %v and %v", a2, b2, a, b)
	}
}

// TestApplyHaves checks which have keys an apply removes: those of nodes
// gone from the file and of modules no longer placed on their node; a
// node's own have, a have of a placed module, and odd keys stay.
func TestApplyHaves(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "apply")
	ctx := bustest.Context(t)
	text := readHomelab(t)
	if _, err := meshfile.Apply(ctx, js, parse(t, "homelab", text), time.Now()); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, mesh.HaveBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ace", "ace.vaultwarden", "ace.node-tools", "old", "old.gitea", "Odd.Key.Here"} {
		if _, err := kv.Put(ctx, k, []byte(`{"phase":"running","health":"ok"}`)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := meshfile.Apply(ctx, js, parse(t, "homelab-", withoutVaultwarden(t, text)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Buckets[mesh.HaveBucket]; got != (meshfile.Counts{Unchanged: 8, Removed: 3}) {
		t.Errorf("haves = %+v; want 8 unchanged, 3 removed", got)
	}
	if len(st.Odd) != 1 || st.Odd[0].Key != "Odd.Key.Here" || st.Odd[0].Bucket != mesh.HaveBucket {
		t.Errorf("Odd = %+v; want Odd.Key.Here", st.Odd)
	}
	haves := keysOf(t, ctx, js, mesh.HaveBucket)
	for _, k := range []string{"ace", "ace.node-tools", "Odd.Key.Here", "ace.gitea"} {
		if _, ok := haves[k]; !ok {
			t.Errorf("have %s removed; want it kept", k)
		}
	}
	for _, k := range []string{"ace.vaultwarden", "old", "old.gitea"} {
		if _, err := kv.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("have %s: Get = %v; want it removed", k, err)
		}
	}
}

// TestApplyRemovesNode checks that a node dropped from the file loses its
// placement, wants and haves.
func TestApplyRemovesNode(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "apply")
	ctx := bustest.Context(t)
	text := readHomelab(t)
	if _, err := meshfile.Apply(ctx, js, parse(t, "homelab", text), time.Now()); err != nil {
		t.Fatal(err)
	}
	// shanks gone: its placement (1), wants (4) and have (1) are removed.
	for _, r := range [][2]string{
		{"nodes: [control, ace, g14, shanks]", "nodes: [control, ace, g14]"},
		{"  shanks: [matrix-synapse, woodpecker, immich, home-assistant, node-tools]\n", ""},
		{"  shanks: {matrix-synapse: 5a5a5a, woodpecker: 3c3c3c, immich: e1e1c0, node-tools: 0d0d01}\n", ""},
		{"  shanks:\n    home-assistant: {phase: running, health: ok, fp: aa2026}", ""},
	} {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("homelab has no %q", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	st, err := meshfile.Apply(ctx, js, parse(t, "homelab-", text), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts != (meshfile.Counts{Unchanged: 76 - 6, Removed: 6}) {
		t.Errorf("Apply = %+v; want 70 unchanged, 6 removed", st.Counts)
	}
	for bucket, n := range map[string]int{mesh.PlacementBucket: 3, mesh.WantsBucket: 13, mesh.HaveBucket: 7, mesh.BuildsBucket: 16, mesh.ManifestsBucket: 16, mesh.ModulesBucket: 15} {
		if got := len(keysOf(t, ctx, js, bucket)); got != n {
			t.Errorf("bucket %s holds %d keys; want %d", bucket, got, n)
		}
	}
}

// TestApplyTakesBackItsHaves applies the homelab (8 haves), then the same
// file with haves: {} and then with no haves: section: the file's haves are
// removed (they stayed, "0 removed"), while a have a node's engine wrote
// for a placed module (no mark) stays through both, and the node's own have
// too.
func TestApplyTakesBackItsHaves(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "apply")
	ctx := bustest.Context(t)
	text := readHomelab(t)
	f := parse(t, "homelab", text)
	if _, err := meshfile.Apply(ctx, js, f, time.Now()); err != nil {
		t.Fatal(err)
	}
	var written []string
	for node, hs := range f.Haves {
		for m := range hs {
			written = append(written, mesh.HaveKey{Node: node, Module: m}.String())
		}
	}
	if len(written) != 8 {
		t.Fatalf("homelab writes %d haves (%v); the test expects 8", len(written), written)
	}
	kv, err := js.KeyValue(ctx, mesh.HaveBucket)
	if err != nil {
		t.Fatal(err)
	}
	// ace.node-tools is placed and has no have in the file: its engine's.
	engine := map[string]string{"ace.node-tools": `{"phase":"running","health":"ok","fp":"0d0d01"}`, "ace": `{"phase":"running","health":"ok"}`}
	for k, v := range engine {
		if _, err := kv.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	i := strings.Index(text, "\nhaves:")
	if i < 0 {
		t.Fatal("homelab has no haves: section")
	}
	without := text[:i+1] // haves is the last section
	for _, tc := range []struct{ name, text string }{
		{"haves: {}", without + "haves: {}\n"},
		{"no haves", without},
	} {
		if _, err := meshfile.Apply(ctx, js, f, time.Now()); err != nil { // the file's haves back
			t.Fatal(err)
		}
		st, err := meshfile.Apply(ctx, js, parse(t, tc.name, tc.text), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Buckets[mesh.HaveBucket]; got != (meshfile.Counts{Removed: 8}) {
			t.Errorf("%s: haves = %+v; want 8 removed", tc.name, got)
		}
		haves := keysOf(t, ctx, js, mesh.HaveBucket)
		for _, k := range written {
			if _, ok := haves[k]; ok {
				t.Errorf("%s: have %s, written by the file, stays", tc.name, k)
			}
		}
		for k, v := range engine {
			if got := string(haves[k]); got != v {
				t.Errorf("%s: the engine's have %s = %q; want %s kept", tc.name, k, got, v)
			}
		}
	}
}
