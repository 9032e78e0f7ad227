package seat_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

const labMesh = `
nodes: [lab, other, third]
modules:
  mesh-vault:
    builds:
      - fp: v1
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  db:
    builds:
      - fp: d1
        manifest: {module: db, provides: [{name: database, credential: own, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  db2:
    builds:
      - fp: e1
        manifest: {module: db2, provides: [{name: database}]}
  web:
    builds:
      - fp: w1
        manifest: {module: web, requires: [{provision: database, from: db}], dirs: [{name: state}]}
placement:
  lab: [mesh-vault, db, web]
  other: [db2]
  third: [db2]
wants:
  lab: {mesh-vault: v1, db: d1, web: w1}
`

// module writes a module's manifest, one build and its record straight to
// the buckets, as an indexer and a builder would.
func (h *harness) module(name, fp, manifestJSON string) {
	h.t.Helper()
	d := mesh.Digest([]byte(manifestJSON))
	h.put(mesh.ManifestsBucket, mesh.ManifestKey(d), mesh.ManifestRecord{JSON: manifestJSON})
	h.put(mesh.BuildsBucket, name+"."+fp, mesh.Build{Module: name, Fingerprint: fp, Manifest: d, At: time.Now().UTC()})
	h.put(mesh.ModulesBucket, name, mesh.ModuleRecord{Manifest: d})
}

func TestHeldModulesKeepTheirNodeComposed(t *testing.T) {
	h := start(t, []byte(labMesh))
	h.module("web2", "w1", `{"module":"web2"}`)
	h.put(mesh.WantsBucket, "want.lab.web2", mesh.Want{Fingerprint: "nope"})
	h.put(mesh.BuildsBucket, "lost.l1", mesh.Build{Module: "lost", Fingerprint: "l1", Manifest: "sha256:00", At: time.Now()})
	h.module("bad", "b1", `{"module":"bad","ports":"http"}`)
	h.module("nocache", "n1", `{"module":"nocache","provides":[{"name":"cache"}]}`)
	h.module("lonely", "o1", `{"module":"lonely","requires":[{"provision":"cache","from":"nocache"}]}`)
	h.module("multi", "m1", `{"module":"multi","requires":[{"provision":"database","from":"db2"}]}`)
	h.module("asker", "a1", `{"module":"asker","requires":[{"provision":"queue","from":"db"}]}`)
	h.module("pinned", "p1", `{"module":"pinned","requires":[{"provision":"database","from":"db","on":"third"}]}`)
	h.module("renamed", "r1", `{"module":"other-name"}`)
	h.put(mesh.PlacementBucket, "lab", mesh.Placement{Modules: []mesh.PlacedModule{
		{Module: "mesh-vault"}, {Module: "db"}, {Module: "web"}, {Module: "ghost"}, {Module: "web2"}, {Module: "lost"},
		{Module: "bad"}, {Module: "lonely"}, {Module: "multi"}, {Module: "asker"}, {Module: "pinned"},
		{Module: "Bad_Name"}, {Module: "renamed"},
	}})
	h.settle()

	for _, c := range []struct{ module, why string }{
		{"ghost", "no build of ghost is known"},
		{"web2", "its want names build nope of web2, which is not known"},
		{"lost", "the manifest sha256:00 of lost build l1 is missing"},
		{"bad", "of bad build b1 is not valid: manifest: json: cannot unmarshal string"},
		{"lonely", "lab.lonely.cache: it requires cache from nocache, which is placed on no node"},
		{"multi", "lab.multi.database: it requires database from db2, which is placed on several nodes (other, third) and none is chosen"},
		{"asker", "lab.asker.queue: it requires queue from db, which offers database, not queue"},
		{"pinned", "lab.pinned.database: it requires database from db on third, which is not placed on third"},
		{"Bad_Name", `module name "Bad_Name" is not a valid token`},
		{"renamed", `the manifest of renamed build r1 names module "other-name"`},
	} {
		t.Run(c.module, func(t *testing.T) {
			var r mesh.Refusal
			if !h.get(mesh.RefusedBucket, "lab."+c.module, &r) {
				t.Fatalf("no refusal lab.%s", c.module)
			}
			if r.Node != "lab" || r.Module != c.module || !strings.Contains(r.Why, c.why) || r.Since.IsZero() {
				t.Errorf("refusal lab.%s = %+v; want why with %q", c.module, r, c.why)
			}
			var p mesh.Plan
			if h.get(mesh.PlansBucket, "lab."+c.module, &p) {
				t.Errorf("held module %s has a plan", c.module)
			}
		})
	}
	// The rest of the node is composed.
	var p mesh.Plan
	if !h.get(mesh.PlansBucket, "lab.web", &p) || p.Fingerprint != "w1" {
		t.Errorf("plan lab.web = %+v; want composed at w1 beside the held modules", p)
	}
	h.waitState("lab.web.database", mesh.Waits, "waits for lab.web.credential.db_database, which is asked: ")

	// A refusal is written only when its why changes.
	refused := h.lastSeq(mesh.RefusedBucket)
	h.put(mesh.WantsBucket, "want.lab.web", mesh.Want{Fingerprint: "w1"})
	h.settle()
	if got := h.lastSeq(mesh.RefusedBucket); got != refused {
		t.Errorf("refusals rewritten with the same whys: last sequence %d -> %d", refused, got)
	}

	// A held module composes again once fixed: its refusal goes.
	h.module("ghost", "g1", `{"module":"ghost","dirs":[{"name":"state"}]}`)
	h.settle()
	var r mesh.Refusal
	if h.get(mesh.RefusedBucket, "lab.ghost", &r) {
		t.Errorf("refusal lab.ghost still there: %+v", r)
	}
	if !h.get(mesh.PlansBucket, "lab.ghost", &p) || p.Fingerprint != "g1" {
		t.Errorf("plan lab.ghost = %+v; want g1", p)
	}
}

// A module held after it had a plan keeps its plan and its keys as they
// were.
func TestHeldModuleKeepsPlanAndKeys(t *testing.T) {
	h := start(t, []byte(labMesh))
	h.waitState("lab.web.database", mesh.Waits, "waits for lab.web.credential.db_database, which is asked: ")
	h.put(mesh.WantsBucket, "want.lab.web", mesh.Want{Fingerprint: "w9"})
	h.settle()
	var r mesh.Refusal
	if !h.get(mesh.RefusedBucket, "lab.web", &r) || !strings.Contains(r.Why, "w9") {
		t.Fatalf("refusal lab.web = %+v; want one naming w9", r)
	}
	var p mesh.Plan
	if !h.get(mesh.PlansBucket, "lab.web", &p) || p.Fingerprint != "w1" {
		t.Errorf("held web lost its plan: %+v", p)
	}
	if pr, _ := h.provision("lab.web.database"); pr.State != mesh.Waits {
		t.Errorf("held web's key = %s; want left waiting for its credential", pr.State)
	}
}

// No node runs the vault: a problem, and the key stays asked, as does the
// credential it depends on.
func TestNoVaultIsAProblem(t *testing.T) {
	// A mesh file that places no vault for a credential is refused at
	// apply: the mesh is written as another writer (a controller) would,
	// the file's keys with lab's placement and want of the vault taken out,
	// before the seat starts.
	h := startWith(t, nil, options{})
	h.stopSeat()
	h.seat = nil
	h.apply([]byte(labMesh))
	h.put(mesh.PlacementBucket, "lab", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "db"}, {Module: "web"}}})
	h.del(mesh.WantsBucket, mesh.WantKey{Node: "lab", Module: mesh.VaultModule}.String())
	h.startSeat()
	p := h.waitState("lab.web.database", mesh.Asked, "waits for lab.web.credential.db_database, which has no provider: no node runs mesh-vault, so the credential lab.web.credential.db_database has no provider")
	if len(p.DependsOn) != 1 {
		t.Errorf("depends-on = %v", p.DependsOn)
	}
	// The credential itself stays needed, asked and saying it has none,
	// as when a running vault leaves: never left unwritten.
	c := h.waitState("lab.web.credential.db_database", mesh.Asked, "asked of mesh-vault: no node runs mesh-vault, so the credential lab.web.credential.db_database has no provider")
	if c.Provider != (mesh.Ref{Module: mesh.VaultModule, Node: "lab"}) {
		t.Errorf("the credential is of %+v; want mesh-vault on lab, its own node", c.Provider)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	found := false
	for _, r := range h.results {
		for _, pr := range r.Problems {
			found = found || strings.Contains(pr, "no node runs mesh-vault")
		}
	}
	if !found {
		t.Error("no result said that no node runs mesh-vault")
	}
}

// A placement item with no module name ({"MODULE":"x"} read with the
// spec's exact names, or "module":"") is said as odd and left out; the
// node's other modules are composed. It was held under the refusal key
// "lab.", which the bus refuses: the seat's write failed, and it backed
// off and composed the node again without end, the why never stored.
func TestPlacementItemWithNoNameIsSaidAndLeftOut(t *testing.T) {
	var l logs
	h := startWith(t, []byte(labMesh), options{log: slog.New(slog.NewTextHandler(&l, nil))})
	h.module("ghost2", "g2", `{"module":"ghost2","dirs":[{"name":"state"}]}`)
	h.put(mesh.PlacementBucket, "lab",
		`{"modules":[{"module":"mesh-vault"},{"MODULE":"x"},{"module":"db"},{"module":""},{"module":"web"},{"module":"ghost2"}]}`)
	h.settle()
	var p mesh.Plan
	if !h.get(mesh.PlansBucket, "lab.ghost2", &p) || p.Fingerprint != "g2" {
		t.Errorf("plan lab.ghost2 = %+v; want composed at g2 beside the items with no name", p)
	}
	if errs := h.errs(); len(errs) > 0 {
		t.Errorf("the bus refused the seat's writes: %q", errs)
	}
	for _, key := range h.keys(mesh.RefusedBucket, "lab") {
		t.Errorf("refusal %s written; want none", key)
	}
	oddLogged(t, &l, "lab", "item 1 has no module name: left out")
}
