package dryrun_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/dryrun"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// movedMesh is a mesh whose consumer c left n2 while p, its provider of
// route, ran on n1: n2.c.route is retiring, asked of the operator (the
// ask still open). n2 has nothing placed, so no composition reads it.
const movedMesh = `nodes: [n1, n2, n3]
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
  n3: []
`

// TestMovingAProviderReadsItsAskedKeysOnNodesNotComposed moves p from n1
// to n3. The seat takes the placement and re-judges the retiring keys
// asked of p on n1, whatever their node: n2.c.route follows p to n3, and
// its open ask, whose Remove no longer says what p can do, is withdrawn
// and asked anew. A dry run that reads the seat's keys by node
// (RunLoaded) must find that key although it composes neither n2 nor any
// node requiring p: its first run says it needs every key of route (the
// provision p offers), a later one n2, and then it says what the run over
// every key says.
// Before, it read n1 and n3 only, and left n2.c.route out (seed 1 of
// TestDryRunPredictsWhatTheSeatWrites, at step 50).
func TestMovingAProviderReadsItsAskedKeysOnNodesNotComposed(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f, err := meshfile.Parse("moved.yaml", []byte(movedMesh))
	if err != nil {
		t.Fatal(err)
	}
	file := f.Diff(map[string]map[string][]byte{}, now.Add(-time.Hour))

	key := mesh.ProvisionKey{Node: "n2", Consumer: "c", Provision: "route"}
	p := mesh.Provision{Provision: "route", Consumer: mesh.Ref{Module: "c", Node: "n2"}, Provider: mesh.Ref{Module: "p", Node: "n1"},
		State: mesh.Retiring, Why: "no build wanted or placed on n2 requires route of p on n1 any more", At: now.Add(-time.Minute)}
	ask := retire.AskFor(key, p, retire.RemovesNothing, now.Add(-time.Minute), time.Hour)
	p.Ask = ask.ID
	seat := map[string]map[string][]byte{
		mesh.ProvisionsBucket: {key.String(): mustJSON(t, p)},
		mesh.RecordsBucket:    {ask.ID: mustJSON(t, mesh.Record{State: mesh.RecordOpen, Ask: ask})},
	}
	changes := []bus.Change{
		{Bucket: mesh.PlacementBucket, Key: "n1", Value: []byte(`{"modules":[]}`)},
		{Bucket: mesh.PlacementBucket, Key: "n3", Value: []byte(`{"modules":[{"module":"p"}]}`)},
	}
	// The mesh as a dry run makes it: the file's buckets and the records
	// whole, and of the seat's provisions the keys take says.
	meshOf := func(take func(key string) bool) *state.Mesh {
		m := state.New()
		for _, put := range file.Puts {
			m.Take(bus.Change{Bucket: put.Bucket, Key: put.Key, Value: put.Value})
		}
		for id, v := range seat[mesh.RecordsBucket] {
			m.Take(bus.Change{Bucket: mesh.RecordsBucket, Key: id, Value: v})
		}
		for k, v := range seat[mesh.ProvisionsBucket] {
			if take(k) {
				m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: k, Value: v})
			}
		}
		return m
	}

	whole := dryrun.Run(meshOf(func(string) bool { return true }), changes, now)
	want := "change " + key.String() + " retiring (no build wanted or placed on n2 requires route of p on n3 any more) ask"
	if got := lines(whole); !slices.Contains(got, want) {
		t.Fatalf("the run over every key said\n  %s\nwant among them %q", strings.Join(got, "\n  "), want)
	}

	loaded := &dryrun.Loaded{Nodes: map[string]bool{}, Dependents: map[string]bool{}, Provisions: map[string]bool{}}
	holds := func(k string) bool {
		pk, err := mesh.ParseProvisionKey(k)
		return err == nil && (loaded.Nodes[pk.Node] || loaded.Provisions[pk.Provision])
	}
	m := meshOf(holds)
	var asked [][]string // what each run said it missed: provisions, then nodes
	for run := 0; ; run++ {
		if run == 5 {
			t.Fatalf("the loaded run still misses something after 5 runs: %v", asked)
		}
		rep, missing := dryrun.RunLoaded(m, loaded, changes, now)
		if missing.None() {
			if got, want := lines(rep), lines(whole); !slices.Equal(got, want) {
				t.Fatalf("the run reading by node (it asked for %v) said\n  %s\nthe run over every key said\n  %s",
					asked, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			break
		}
		asked = append(asked, append(append([]string(nil), missing.Provisions...), missing.Nodes...))
		for _, n := range missing.Nodes {
			loaded.Nodes[n] = true
		}
		for _, prov := range missing.Provisions {
			loaded.Provisions[prov] = true
		}
		m = meshOf(holds)
	}
	if len(asked) == 0 || !slices.Contains(asked[0], "route") || !slices.ContainsFunc(asked, func(a []string) bool { return slices.Contains(a, "n2") }) {
		t.Errorf("the loaded run asked for %v; want every key of route first, and n2 later", asked)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lines says a report's changes one line each, as
// TestDryRunPredictsWhatTheSeatWrites compares them.
func lines(rep *dryrun.Report) []string {
	var out []string
	for _, c := range rep.Changes {
		s := string(c.Op) + " " + c.Key
		if c.State != "" {
			s += " " + string(c.State)
		}
		if c.Why != "" {
			s += " (" + c.Why + ")"
		}
		if c.Ask {
			s += " ask"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
