package compose_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestOpenAskStaysWhileTheProvidersTrunkIsNotKnown: n2.c.route is
// retiring, its ask open, promising what p (answering route by its have)
// does on yes: nothing is removed. A new build of p becomes its trunk, and
// the seat takes mesh-indexer_modules before the new manifest comes
// (apply writes one bucket after another; the seat follows each on its
// own). Judged then, the key is left as it is: no ask withdrawn and none
// raised. Before, the promise was judged changed (no trunk read: "keeps
// no entry for it") and the ask withdrawn and raised anew, and once more
// when the manifest came, which no dry run can say (seed 6 of
// TestDryRunPredictsWhatTheSeatWrites, now and then at step 7).
func TestOpenAskStaysWhileTheProvidersTrunkIsNotKnown(t *testing.T) {
	const text = `nodes: [n1, n2]
modules:
  p:
    builds:
      - fp: f0
        manifest: {module: p, provides: [{name: route}]}
  c:
    builds:
      - fp: b0
        manifest: {module: c, requires: [{provision: route, from: p}]}
placement:
  n1: [p]
  n2: []
`
	f, err := meshfile.Parse("promise.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	m := loadFile(t, f)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	key := mesh.ProvisionKey{Node: "n2", Consumer: "c", Provision: "route"}
	p := mesh.Provision{Provision: "route", Consumer: mesh.Ref{Module: "c", Node: "n2"}, Provider: mesh.Ref{Module: "p", Node: "n1"},
		State: mesh.Retiring, Why: "no build wanted or placed on n2 requires route of p on n1 any more", At: now.Add(-time.Minute)}
	ask := retire.AskFor(key, p, retire.RemovesNothing, now.Add(-time.Minute), time.Hour)
	p.Ask = ask.ID
	take := func(bucket, k string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if tc := m.Take(bus.Change{Bucket: bucket, Key: k, Value: b}); tc.Odd != nil {
			t.Fatal(tc.Odd)
		}
	}
	take(mesh.ProvisionsBucket, key.String(), p)
	take(mesh.RecordsBucket, ask.ID, mesh.Record{State: mesh.RecordOpen, Ask: ask})
	noNeed := func(string) *compose.Need { return nil }

	// As the ask promises: nothing to do.
	if res := compose.Judge(m, []string{key.String()}, noNeed, now); len(res.Provisions)+len(res.Asks)+len(res.Withdrawn) != 0 {
		t.Fatalf("judged with its trunk known: provisions %v, asks %v, withdrawn %v; want the key left as it is", res.Provisions, res.Asks, res.Withdrawn)
	}
	// p's trunk names a manifest not taken yet.
	take(mesh.ModulesBucket, "p", map[string]string{"manifest": "sha256:" + "00000000000000000000000000000000000000000000000000000000000000aa"})
	if _, ok := m.Trunk("p"); !ok {
		t.Fatal("the mesh holds no trunk of p")
	}
	res := compose.Judge(m, []string{key.String()}, noNeed, now)
	if len(res.Provisions)+len(res.Asks)+len(res.Withdrawn) != 0 {
		t.Fatalf("judged with its trunk's manifest not known: provisions %v, asks %v, withdrawn %v; want the key left as it is, its ask %s open", res.Provisions, res.Asks, res.Withdrawn, ask.ID)
	}
}
