package web

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// searchPage is a page of nodes workers ("node-0001"...), each with app-a
// and app-b consuming database (postgres) and cache (redis) from
// "control"; every 10th node's app-a database is failed, every cache of
// app-b waits, the rest is provided; node-0003's app-b also consumes a
// credential with the local name "app-b_read".
func searchPage(t testing.TB, workers int) *Page {
	t.Helper()
	p := newPage(context.Background(), Config{})
	put := func(bucket, key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		p.take(bus.Change{Bucket: bucket, Key: key, Value: b})
	}
	put(mesh.PlansBucket, "control.postgres", map[string]string{})
	put(mesh.PlansBucket, "control.redis", map[string]string{})
	for i := 1; i <= workers; i++ {
		n := fmt.Sprintf("node-%04d", i)
		for _, mod := range []string{"app-a", "app-b"} {
			put(mesh.PlansBucket, n+"."+mod, map[string]string{})
			for prov, provider := range map[string]string{"database": "postgres", "cache": "redis"} {
				st := mesh.Provided
				switch {
				case mod == "app-a" && prov == "database" && i%10 == 0:
					st = mesh.Failed
				case mod == "app-b" && prov == "cache":
					st = mesh.Waits
				}
				put(mesh.ProvisionsBucket, n+"."+mod+"."+prov, mesh.Provision{Provision: prov,
					Consumer: mesh.Ref{Module: mod, Node: n}, Provider: mesh.Ref{Module: provider, Node: "control"}, State: st})
			}
		}
	}
	put(mesh.ProvisionsBucket, "node-0003.app-b.credential.app-b_read", mesh.Provision{Provision: "credential", Local: "app-b_read",
		Consumer: mesh.Ref{Module: "app-b", Node: "node-0003"}, Provider: mesh.Ref{Module: "mesh-vault", Node: "control"}, State: mesh.Asked})
	return p
}

// TestSearchFromTheIndex: each search finds the keys its words name (a
// word starts a name or a part of it after '-', '_' or '.'; a word with a
// '.' or key: starts the key; field terms are exact), the nodes and
// modules its plain words name, and reads no key its narrowest term does
// not hold: node-0042's search reads node-0042's keys, not the mesh's.
func TestSearchFromTheIndex(t *testing.T) {
	p := searchPage(t, 1000)
	keys := func(n int, mods ...string) []string {
		var out []string
		node := fmt.Sprintf("node-%04d", n)
		for _, m := range mods {
			out = append(out, node+"."+m)
		}
		return out
	}
	for _, c := range []struct {
		q         string
		want      []string // nil: check only the count
		count     int
		nodes     []string
		modules   []string
		mostReads int
	}{
		{q: "node-0042", want: keys(42, "app-a.cache", "app-a.database", "app-b.cache", "app-b.database"),
			nodes: []string{"node-0042"}, mostReads: 4},
		{q: "0042", want: keys(42, "app-a.cache", "app-a.database", "app-b.cache", "app-b.database"),
			nodes: []string{"node-0042"}, mostReads: 4},
		{q: "node-0042 app-a", want: keys(42, "app-a.cache", "app-a.database"), mostReads: 4},
		{q: "NODE-0042 cache", want: keys(42, "app-a.cache", "app-b.cache"), mostReads: 4},
		{q: "node-004", count: 40, nodes: []string{"node-0040", "node-0041", "node-0042", "node-0043", "node-0044",
			"node-0045", "node-0046", "node-0047", "node-0048", "node-0049"}, mostReads: 40},
		{q: "node-0042.app-b", want: keys(42, "app-b.cache", "app-b.database"), mostReads: 4},
		{q: "key:node-0042.app-b.c", want: keys(42, "app-b.cache"), mostReads: 4},
		{q: "key:node-010", count: 40, mostReads: 40},
		{q: "fail", count: 100, mostReads: 100},
		{q: "state:failed node-0050", want: keys(50, "app-a.database"), mostReads: 4},
		{q: "read", want: []string{"node-0003.app-b.credential.app-b_read"}, mostReads: 1},
		{q: "vault", want: []string{"node-0003.app-b.credential.app-b_read"}, mostReads: 1},
		// An answer of an eighth of the keys or more is read in the order
		// of every key (never sorted anew); one field's own set is counted
		// from the set and read up to the page only.
		{q: "app-b", count: 2001, modules: []string{"app-b"}, mostReads: 4001},
		{q: "b", count: 2001, modules: []string{"app-b"}, mostReads: 4001}, // app-b's keys, and app-b_read's
		{q: "postgres", count: 2000, modules: []string{"postgres"}, mostReads: 4001},
		{q: "node:control state:waits", count: 1000, mostReads: 4001},
		{q: "state:waits", count: 1000, mostReads: 4*PageSize + 1}, // a waiting cache in each node's 4 keys
		{q: "module:app-a", count: 2000, mostReads: 2*PageSize + 1},
		{q: "module:app-a state:failed", count: 100, mostReads: 100},
		{q: "nosuch", count: 0, mostReads: 0},
		{q: "key:nosuch.x", count: 0, mostReads: 0},
	} {
		before := p.searchRead
		terms := parseTerms(c.q)
		f := p.found(terms, 1)
		read := p.searchRead - before
		if c.want != nil && (!slices.Equal(f.Keys, c.want) || f.N != len(c.want)) {
			t.Errorf("%q found %d: %v; want %v", c.q, f.N, f.Keys, c.want)
		}
		if c.want == nil && f.N != c.count {
			t.Errorf("%q found %d keys; want %d", c.q, f.N, c.count)
		}
		if read > c.mostReads {
			t.Errorf("%q read %d keys; want at most %d (what its narrowest term holds), not the mesh's %d", c.q, read, c.mostReads, len(p.provs))
		}
		var words []string
		for _, t := range terms {
			words = append(words, t.value)
		}
		if c.nodes != nil || c.modules != nil {
			if got := p.idx.foundNames(nodeName, words); !slices.Equal(got, c.nodes) {
				t.Errorf("%q found nodes %v; want %v", c.q, got, c.nodes)
			}
			if got := p.idx.foundNames(moduleName, words); !slices.Equal(got, c.modules) {
				t.Errorf("%q found modules %v; want %v", c.q, got, c.modules)
			}
		}
	}
}

// TestSearchFollowsNamesAsTheyComeAndGo: a node found by a word is no
// longer found once its last key left, and a new one is found at once.
func TestSearchFollowsNamesAsTheyComeAndGo(t *testing.T) {
	p := searchPage(t, 3)
	if got := p.idx.foundNames(nodeName, []string{"node-0002"}); !slices.Equal(got, []string{"node-0002"}) {
		t.Fatalf("node-0002 found nodes %v; want node-0002", got)
	}
	for _, k := range []string{"app-a.database", "app-a.cache", "app-b.database", "app-b.cache"} {
		p.take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: "node-0002." + k, Deleted: true})
	}
	for _, k := range []string{"app-a", "app-b"} {
		p.take(bus.Change{Bucket: mesh.PlansBucket, Key: "node-0002." + k, Deleted: true})
	}
	if got := p.idx.foundNames(nodeName, []string{"node-0002"}); len(got) != 0 {
		t.Errorf("node-0002 found nodes %v after every key of it left; want none", got)
	}
	if got := p.found(parseTerms("node-0002"), 1); got.N != 0 {
		t.Errorf("node-0002 found keys %v after they left; want none", got)
	}
	b, _ := json.Marshal(mesh.Provision{Provision: "queue", Consumer: mesh.Ref{Module: "app-c", Node: "node-0009"},
		Provider: mesh.Ref{Module: "nats", Node: "control"}, State: mesh.Waits})
	p.take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: "node-0009.app-c.queue", Value: b})
	if got := p.found(parseTerms("queue"), 1).Keys; !slices.Equal(got, []string{"node-0009.app-c.queue"}) {
		t.Errorf("queue found %v; want the new key node-0009.app-c.queue", got)
	}
	if got := p.idx.foundNames(moduleName, []string{"app-c"}); !slices.Equal(got, []string{"app-c"}) {
		t.Errorf("app-c found modules %v; want the new module", got)
	}
	// A change that brings or takes no name keeps the index of names: an
	// ask opened, a key of names other keys have too turning waits.
	rec, _ := json.Marshal(mesh.Record{State: mesh.RecordOpen, Ask: mesh.Ask{ID: "ask-1", About: "provision.node-0001.app-a.database"}})
	p.take(bus.Change{Bucket: mesh.RecordsBucket, Key: "ask-1", Value: rec})
	b, _ = json.Marshal(mesh.Provision{Provision: "database", Consumer: mesh.Ref{Module: "app-a", Node: "node-0001"},
		Provider: mesh.Ref{Module: "postgres", Node: "control"}, State: mesh.Waits})
	p.take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: "node-0001.app-a.database", Value: b})
	if p.idx.terms == nil {
		t.Errorf("an open ask and a key changing state made the search's index of names again; want it kept")
	}
}

// TestSearchPagesAsEveryKeyRead: whichever way a search reads its keys
// (sorted from its sets, or in the order of every key, counted from a set
// or not), each page holds the rows every key's read, sorted, gives there,
// and a page past the last is the last.
func TestSearchPagesAsEveryKeyRead(t *testing.T) {
	p := searchPage(t, 300)
	for _, q := range []string{"state:waits", "module:app-a", "app-b", "node:control state:waits", "node-01", "fail", "cache app-a", "key:node-02"} {
		terms := parseTerms(q)
		var want []string
		for key, pv := range p.provs {
			if matches(terms, key, pv) {
				want = append(want, key)
			}
		}
		slices.Sort(want)
		pages := max(1, (len(want)+PageSize-1)/PageSize)
		for _, page := range []int{1, 2, pages, pages + 3} {
			f := p.found(terms, page)
			from, to, _, _ := window(len(want), page)
			if f.N != len(want) || f.From != from || !slices.Equal(f.Keys, want[from:to]) {
				t.Errorf("%q page %d: %d found, rows from %d: %v; want %d, from %d: %v", q, page, f.N, f.From, f.Keys, len(want), from, want[from:to])
			}
		}
	}
}
