package state

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestKeptFitsAMapSlot checks that a kept provision is small enough for a
// Go map to hold it in its own slots: a value over 128 bytes is put in an
// object of its own per key, one more object for the collector per
// provision (hundreds of thousands at 10 000 nodes).
func TestKeptFitsAMapSlot(t *testing.T) {
	if size := unsafe.Sizeof(kept{}); size > 128 {
		t.Errorf("unsafe.Sizeof(kept{}) = %d; want at most 128", size)
	}
}

// TestKeptProvisionCutsTheKey checks that a provision read back takes its
// provision, local and consumer from its key, with and without a local.
func TestKeptProvisionCutsTheKey(t *testing.T) {
	m := New()
	for _, tc := range []struct{ key, provision, local, consumer, node string }{
		{"web1.app.database", "database", "", "app", "web1"},
		{"web1.app.credential.pg_database_main", "credential", "pg_database_main", "app", "web1"},
	} {
		k := m.keep(prov(tc.node, tc.consumer, tc.provision, tc.local, "asked", "why"))
		p := k.provision(tc.key)
		if p.Provision != tc.provision || p.Local != tc.local || p.Consumer.Module != tc.consumer || p.Consumer.Node != tc.node {
			t.Errorf("provision(%q) = %q %q %+v; want %q %q {%s %s}", tc.key, p.Provision, p.Local, p.Consumer,
				tc.provision, tc.local, tc.consumer, tc.node)
		}
		if p.Provider.Module != "pg" || p.State != "asked" || p.Why != "why" {
			t.Errorf("provision(%q) = %+v; want provider pg, state asked, why %q", tc.key, p, "why")
		}
	}
}

// Names that repeat across keys of the buckets the seat reads are kept
// once, not once per decoded value: two entries' states, two haves'
// phases, healths and fingerprints, two wants' fingerprints and two
// placements' modules share their bytes.
func TestTakenNamesAreShared(t *testing.T) {
	m := New()
	rev := uint64(0)
	take := func(bucket, key, value string) {
		t.Helper()
		rev++
		if tc := m.Take(bus.Change{Bucket: bucket, Key: key, Value: []byte(value), Revision: rev}); tc.Odd != nil {
			t.Fatal(tc.Odd)
		}
	}
	entry := `{"state":"waits","why":"the database is made","vault-name":"v"}`
	have := `{"phase":"running","health":"ok","fp":"f1"}`
	for _, node := range []string{"web1", "web2"} {
		take("pg_bound", node+".app.database", entry)
		take(mesh.HaveBucket, node+".app", have)
		take(mesh.WantsBucket, "want."+node+".app", `{"fp":"f1"}`)
		take(mesh.PlacementBucket, node, `{"modules":[{"module":"app"}]}`)
	}
	e1, _, _ := m.Entry("pg", "web1.app.database")
	e2, _, _ := m.Entry("pg", "web2.app.database")
	h1, _, _ := m.Have("web1", "app")
	h2, _, _ := m.Have("web2", "app")
	w1, _, _ := m.Want("web1", "app")
	w2, _, _ := m.Want("web2", "app")
	p1, _ := m.Placed("web1")
	p2, _ := m.Placed("web2")
	for _, f := range []struct{ name, a, b string }{
		{"entry state", string(e1.State), string(e2.State)},
		{"have phase", h1.Phase, h2.Phase}, {"have health", h1.Health, h2.Health},
		{"have fingerprint", h1.Fingerprint, h2.Fingerprint}, {"want fingerprint", w1, w2},
		{"placed module", p1[0], p2[0]},
	} {
		if f.a == "" || f.a != f.b || unsafe.StringData(f.a) != unsafe.StringData(f.b) {
			t.Errorf("%s: %q and %q are not one string", f.name, f.a, f.b)
		}
	}
}

// Free text of other writers' values (a have's detail, an entry's why,
// refused and waits), most often each value's own, is kept as decoded,
// not interned: the mesh's table of names holds the closed sets only
// (states, phases, healths, fingerprints, module names), however many
// texts come. Each text interned cost a table entry and was rarely shared.
func TestFreeTextIsNotInterned(t *testing.T) {
	m := New()
	for i := range 200 {
		rev := uint64(2*i + 1)
		for _, ch := range []bus.Change{
			{Bucket: mesh.HaveBucket, Key: fmt.Sprintf("web%d.app", i), Revision: rev,
				Value: fmt.Appendf(nil, `{"phase":"failed","health":"failed","fp":"f1","detail":"exit %d at %d"}`, i, i)},
			{Bucket: "pg_bound", Key: fmt.Sprintf("web%d.app.database", i), Revision: rev + 1,
				Value: fmt.Appendf(nil, `{"state":"failed","why":"role app%d: %d","refused":"r%d","waits":"w%d"}`, i, i, i, i)},
		} {
			if tc := m.Take(ch); tc.Odd != nil {
				t.Fatal(tc.Odd)
			}
		}
	}
	h, _, _ := m.Have("web7", "app")
	e, _, _ := m.Entry("pg", "web7.app.database")
	if h.Detail != "exit 7 at 7" || e.Why != "role app7: 7" || e.Refused != "r7" || e.Waiting != "w7" {
		t.Errorf("have %+v, entry %+v; want their texts as written", h, e)
	}
	// failed, f1 (and nothing per value).
	if n := m.names.Len(); n > 4 {
		t.Errorf("the mesh interned %d strings for 200 haves and entries; want the closed sets only (at most 4)", n)
	}
}

// A key stays routed to its provider (a change of the provider's have
// touches it) and NeedOf finds it while any node's last composition needs
// it, its own node's or another's (a shared credential), and no longer
// once none does.
func TestNeededKeyRoutedWhileAnyNodeNeedsIt(t *testing.T) {
	const cred = "db1.pg.credential.pg_database"
	vault := mesh.Ref{Module: mesh.VaultModule, Node: "lab"}
	m := New()
	composeNode := func(node string, needs bool) {
		res := &compose.Result{Node: node, Needed: map[string]*compose.Need{}}
		if needs {
			res.Needed[cred] = &compose.Need{Key: cred, Provision: mesh.CredentialProvision, Local: "pg_database",
				Consumer: mesh.Ref{Module: "pg", Node: "db1"}, Provider: vault}
		}
		m.Composed(res)
	}
	rev := uint64(0)
	touched := func() []string {
		rev++
		return m.Take(bus.Change{Bucket: mesh.HaveBucket, Key: "lab." + mesh.VaultModule, Revision: rev,
			Value: []byte(`{"phase":"running","health":"ok","fp":"f1"}`)}).Keys
	}
	for i, step := range []struct {
		node   string
		needs  bool
		routed bool
	}{
		{"web1", true, true},  // another node's composition needs it
		{"db1", true, true},   // and its own node's
		{"web1", false, true}, // its own node's still does
		{"web2", true, true},
		{"db1", false, true}, // web2's still does
		{"web2", false, false},
		{"db1", true, true},
		{"db1", false, false},
	} {
		composeNode(step.node, step.needs)
		keys := touched()
		if got := len(keys) == 1 && keys[0] == cred; got != step.routed || len(keys) > 1 {
			t.Errorf("step %d (%s needs it: %v): the provider's have touches %v; want it routed: %v", i, step.node, step.needs, keys, step.routed)
		}
		if n := m.NeedOf(cred); (n != nil) != step.routed || n != nil && (n.Key != cred || n.Provider != vault) {
			t.Errorf("step %d: NeedOf = %+v; want a need: %v", i, n, step.routed)
		}
	}
}
