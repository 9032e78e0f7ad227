package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/digest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// startVerb answers the seat's verb (mesh-provisioner.provisioning) on
// its own connection until the test ends, as the seat's process does.
func startVerb(t *testing.T, s *bus.Server) {
	t.Helper()
	nc, js := bustest.Connect(t, s, "mesh-provisioner-verb")
	if err := provisioning.Start(bustest.Context(t), nc, js, provisioning.Options{Log: testLog(t)}); err != nil {
		t.Fatal(err)
	}
}

// TestDryRunAndApplyReadTheNodesTheFileChanges runs a 40-node mesh with
// the seat's verb. Without the verb, apply --dry-run reads placement,
// wants and haves whole and says so once. With it, the dry run of the
// file as applied reads no key of those buckets (only manifests, builds
// and modules); of a file placing one more module on node-0001, over a bus
// that also holds a placement of a node the file does not have
// (node-extra) and node-0003's own have, which its engine wrote, it reads the keys
// of those three nodes only, and its diff is the one of the whole buckets
// (the same puts and removes). Apply of that file writes that diff, after
// which the buckets are what the file says, and a second apply reads no
// node's keys and writes nothing. Before, both read every key of the six
// buckets (some 174,000 at 10,000 nodes) and diffed them all.
func TestDryRunAndApplyReadTheNodesTheFileChanges(t *testing.T) {
	t.Parallel()
	zero := 0
	byNode := testHooks{nodeShare: &zero} // every differing node read by subject, however many
	s := bustest.Server(t)
	text := gen.Generate(40, 8, 1)
	path := filepath.Join(t.TempDir(), "gen.yaml")
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	startSeat(t, s, path)
	ctx := withTestHooks(bustest.Context(t), byNode)
	_, js := bustest.Connect(t, s, "dry")
	f, err := meshfile.Parse("gen.yaml", text)
	if err != nil {
		t.Fatal(err)
	}
	moduleKeys := 0
	current, err := meshfile.Current(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range moduleBuckets {
		moduleKeys += len(current[b])
	}

	_, errOut, err := runWith(t, byNode, "apply", "--dry-run", "-f", path, "--nats", s.URL())
	const whole = "apply --dry-run: read mesh-controller_placement, mesh-assigner_wants and node-engine_have whole (no seat answers mesh-provisioner.provisioning)"
	if err != nil || strings.Count(errOut, whole) != 1 {
		t.Fatalf("apply --dry-run with no verb: %v, stderr %q; want it said once: %q", err, errOut, whole)
	}

	startVerb(t, s)
	ask := asker{nc: js.Conn()}
	rep, d, in, _, err := dryRun(ctx, js, ask, f, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if in.file.whole != "" || in.file.nodes == nil || len(in.file.nodes) != 0 || in.file.keys != moduleKeys {
		t.Fatalf("dry run of the file as applied: read whole %q, nodes %v, %d keys; want the %d keys of manifests, builds and modules only",
			in.file.whole, in.file.nodes, in.file.keys, moduleKeys)
	}
	if rep.Changed() || len(d.Puts)+len(d.Removes) != 0 {
		t.Fatalf("dry run of the file as applied: changes %v, puts %v, removes %v; want none", rep.Changes, d.Puts, d.Removes)
	}

	// The bus holds what the file does not: another node's placement and
	// an engine's have of a module placed on node-0003.
	kv := func(b string) jetstream.KeyValue {
		t.Helper()
		k, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if _, err := kv(mesh.PlacementBucket).Put(ctx, "node-extra", []byte(`{"modules":[]}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Haves["node-0003"][""]; ok {
		t.Fatal("the generated file writes node-0003's own have; the test puts an engine's there")
	}
	engine := []byte(`{"phase":"running","health":"ok"}`)
	if _, err := kv(mesh.HaveBucket).Put(ctx, "node-0003", engine); err != nil {
		t.Fatal(err)
	}
	changed := placeOneMore(t, text)
	g, err := meshfile.Parse("more.yaml", changed)
	if err != nil {
		t.Fatal(err)
	}
	_, d, in, _, err = dryRun(ctx, js, ask, g, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedNodes(in.file.nodes); !slices.Equal(got, []string{"node-0001", "node-0003", "node-extra"}) || in.file.whole != "" {
		t.Fatalf("the dry run read the keys of %v (whole: %q); want node-0001's, node-0003's and node-extra's", got, in.file.whole)
	}
	current, err = meshfile.Current(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	nodeKeys := 0
	for _, b := range digest.Buckets {
		for k := range current[b] {
			if n, _ := digest.NodeOf(b, k); in.file.nodes[n] {
				nodeKeys++
			}
		}
	}
	if in.file.keys != moduleKeys+nodeKeys {
		t.Errorf("the dry run read %d keys; want the %d of manifests, builds and modules and the %d of the three nodes", in.file.keys, moduleKeys, nodeKeys)
	}
	now := time.Now()
	wholeDiff := g.Diff(current, now)
	if got, want := diffLines(d), diffLines(wholeDiff); !slices.Equal(got, want) {
		t.Fatalf("the diff of the three nodes =\n  %s\nthe diff of the whole buckets =\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if !slices.Contains(diffLines(d), "remove "+mesh.PlacementBucket+" node-extra") {
		t.Errorf("the diff %v does not remove node-extra's placement", diffLines(d))
	}

	morePath := filepath.Join(t.TempDir(), "more.yaml")
	if err := os.WriteFile(morePath, changed, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runWith(t, byNode, "apply", "--yes", "-f", morePath, "--nats", s.URL())
	written := fmt.Sprintf("%d written, ", len(d.Puts))
	if err != nil || !strings.Contains(out, written) || !strings.Contains(out, fmt.Sprintf(", %d removed", len(d.Removes))) || strings.Contains(errOut, "whole") {
		t.Fatalf("apply = %q, %v (stderr %q); want %s%d removed, nothing read whole", out, err, errOut, written, len(d.Removes))
	}
	after, err := meshfile.Current(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if left := g.Diff(after, time.Now()); len(left.Puts)+len(left.Removes) != 0 {
		t.Fatalf("after apply the buckets differ from the file: %v", diffLines(left))
	}
	if string(after[mesh.HaveBucket]["node-0003"]) != string(engine) {
		t.Errorf("apply changed the engine's have of node-0003: %s", after[mesh.HaveBucket]["node-0003"])
	}
	// Once the verb has taken the writes (it answers once its copies are
	// at the buckets' last revisions), a second apply reads only
	// node-0003, whose engine's have the file does not write.
	fr, d, err := readDiff(ctx, js, ask, g, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedNodes(fr.nodes); !slices.Equal(got, []string{"node-0003"}) || len(d.Puts)+len(d.Removes) != 0 {
		t.Errorf("apply again: read the nodes %v, diff %v; want node-0003 read, nothing to write", got, diffLines(d))
	}
}

// placeOneMore returns a generated file's text with one more app module
// placed on node-0001.
func placeOneMore(t *testing.T, text []byte) []byte {
	t.Helper()
	lines := strings.Split(string(text), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "  node-0001: [") {
			mine := strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "  node-0001: ["), "]"), ", ")
			for _, m := range []string{"forge-1", "wiki-1", "chat-1", "photos-1"} {
				if !slices.Contains(mine, m) {
					lines[i] = "  node-0001: [" + strings.Join(append(mine, m), ", ") + "]"
					return []byte(strings.Join(lines, "\n"))
				}
			}
		}
	}
	t.Fatal("found no module to place on node-0001")
	return nil
}

// diffLines says a diff's puts and removes, one line each, in its order.
func diffLines(d *meshfile.Diff) []string {
	var out []string
	for _, p := range d.Puts {
		out = append(out, "put "+p.Bucket+" "+p.Key+" "+string(p.Value))
	}
	for _, r := range d.Removes {
		out = append(out, "remove "+r.Bucket+" "+r.Key)
	}
	return out
}
