package web

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The page's index follows each change: a key's state moves between
// counts, a node comes with its first key and goes with its last, an ask
// counts while it is open.
func TestIndexFollowsChanges(t *testing.T) {
	p := newPage(context.Background(), Config{})
	put := func(bucket, key string, v any) {
		b, _ := json.Marshal(v)
		p.take(bus.Change{Bucket: bucket, Key: key, Value: b})
	}
	del := func(bucket, key string) { p.take(bus.Change{Bucket: bucket, Key: key, Deleted: true}) }
	prov := func(st mesh.State) mesh.Provision {
		return mesh.Provision{Provision: "database", Consumer: mesh.Ref{Module: "app", Node: "n1"},
			Provider: mesh.Ref{Module: "postgres", Node: "db"}, State: st, At: time.Now()}
	}
	const key = "n1.app.database"
	put(mesh.PlansBucket, "n1.app", map[string]string{})
	put(mesh.ProvisionsBucket, key, prov(mesh.Waits))
	put(mesh.ProvisionsBucket, key, prov(mesh.Asked))
	put(mesh.RefusedBucket, "db.postgres", mesh.Refusal{Node: "db", Module: "postgres", Why: "no build"})
	put(mesh.RecordsBucket, "ask-1", mesh.Record{State: mesh.RecordOpen, Ask: mesh.Ask{ID: "ask-1", About: "provision." + key}})

	n1, db := p.idx.nodes["n1"], p.idx.nodes["db"]
	if n1 == nil || db == nil {
		t.Fatalf("nodes = %v; want n1 (consumes) and db (only provides, held)", p.idx.nodeNames())
	}
	if n1.States[mesh.Asked] != 1 || n1.States[mesh.Waits] != 0 || n1.Plans != 1 || n1.Asks != 1 {
		t.Errorf("n1 = %+v; want asked 1 (not waits), 1 plan, 1 ask", *n1)
	}
	if db.Provides != 1 || db.Held != 1 || len(db.States) != 0 {
		t.Errorf("db = %+v; want it provides 1, holds 1, consumes nothing", *db)
	}
	if p.idx.openAsks != 1 || p.idx.states[mesh.Asked] != 1 || len(p.idx.states) != 1 {
		t.Errorf("mesh: asks %d, states %v; want 1 ask, asked 1", p.idx.openAsks, p.idx.states)
	}
	put(mesh.RecordsBucket, "ask-1", mesh.Record{State: mesh.RecordAnswered, Ask: mesh.Ask{ID: "ask-1", About: "provision." + key}})
	if n1.Asks != 0 || p.idx.openAsks != 0 {
		t.Errorf("an answered ask still counts: n1 %d, mesh %d", n1.Asks, p.idx.openAsks)
	}

	del(mesh.ProvisionsBucket, key)
	del(mesh.PlansBucket, "n1.app")
	del(mesh.RefusedBucket, "db.postgres")
	del(mesh.RecordsBucket, "ask-1")
	if len(p.idx.nodes) != 0 || len(p.idx.states) != 0 || len(p.idx.byModule) != 0 || len(p.idx.provides) != 0 ||
		len(p.idx.planned) != 0 || len(p.idx.heldOf) != 0 || len(p.idx.nodeNames()) != 0 {
		t.Errorf("after every key left the index holds nodes %v states %v modules %v", p.idx.nodeNames(), p.idx.states, p.idx.byModule)
	}
}

// A stream's delta carries only what changed in its view: a part whose
// rows are the same sends the changed row alone; a part whose rows changed
// is sent whole.
func TestDiffSendsOnlyWhatChanged(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := newPage(context.Background(), Config{Now: func() time.Time { return now }})
	put := func(key string, st mesh.State) {
		b, _ := json.Marshal(mesh.Provision{Provision: "x", Consumer: mesh.Ref{Module: "app", Node: "n1"}, State: st,
			At: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		p.take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: key, Value: b})
	}
	put("n1.app.a", mesh.Waits)
	put("n1.app.b", mesh.Waits)
	q := query{Node: "n1", Pages: map[string]int{}}
	view := func() *screen {
		sc, err := p.view(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	old := view()
	now = now.Add(time.Hour) // an unchanged row is not sent again for its age
	put("n1.app.b", mesh.Provided)
	d := diff(old, view())
	ids := map[string]bool{}
	for _, pt := range d.Parts {
		ids[pt.ID] = true
	}
	if d.Content != "" || !ids["consumes/n1.app.b"] || ids["consumes/n1.app.a"] || ids["consumes"] || !ids["node/n1"] || !ids["summary"] {
		t.Errorf("delta parts %v (content %d bytes); want the summary, n1's row and n1.app.b's row", ids, len(d.Content))
	}
	old = view()
	put("n1.app.c", mesh.Waits)
	d = diff(old, view())
	ids = map[string]bool{}
	for _, pt := range d.Parts {
		ids[pt.ID] = true
	}
	if !ids["consumes"] || ids["consumes/n1.app.a"] {
		t.Errorf("delta parts %v; want the consumes part whole (a row came), not its rows one by one", ids)
	}
}
