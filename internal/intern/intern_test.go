package intern_test

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/mesh-provisioner/mesh-provisioner/internal/intern"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// same reports whether a and b share their bytes.
func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestProvisionSharesNames decodes the same names twice (separate strings,
// as JSON decoding makes them) and checks that after Provision both
// provisions hold one copy of each, and that a key's own fields are left.
func TestProvisionSharesNames(t *testing.T) {
	var tab intern.Table
	mk := func() mesh.Provision {
		return mesh.Provision{
			Provision: strings.Clone("credential"), Local: strings.Clone("postgres_database"),
			Consumer: mesh.Ref{Module: strings.Clone("mail-1"), Node: strings.Clone("node-0001")},
			Provider: mesh.Ref{Module: strings.Clone("mesh-vault"), Node: strings.Clone("control")},
			State:    mesh.State(strings.Clone("provided")), Why: strings.Clone("asked of postgres on control"),
			DependsOn: []string{strings.Clone("node-0001.mail-1.credential.x")},
		}
	}
	a, b := mk(), mk()
	tab.Provision(&a)
	tab.Provision(&b)
	for _, f := range []struct{ name, a, b string }{
		{"provision", a.Provision, b.Provision}, {"local", a.Local, b.Local},
		{"consumer module", a.Consumer.Module, b.Consumer.Module}, {"consumer node", a.Consumer.Node, b.Consumer.Node},
		{"provider module", a.Provider.Module, b.Provider.Module}, {"provider node", a.Provider.Node, b.Provider.Node},
		{"state", string(a.State), string(b.State)}, {"why", a.Why, b.Why},
	} {
		if f.a != f.b || !same(f.a, f.b) {
			t.Errorf("%s: %q and %q are not one copy", f.name, f.a, f.b)
		}
	}
	if same(a.DependsOn[0], b.DependsOn[0]) {
		t.Error("depends-on was interned; want each provision's own")
	}
	if a.Provision != "credential" || b.Consumer.Node != "node-0001" || a.Why != "asked of postgres on control" {
		t.Errorf("values changed: %+v", a)
	}
	if n := tab.Len(); n != 8 {
		t.Errorf("Len = %d; want 8 (credential, postgres_database, mail-1, node-0001, mesh-vault, control, provided, the why)", n)
	}
}

// TestTableStartsAnewAtMax checks that the table never holds more than Max
// strings, and that strings handed out before it started anew keep their
// text.
func TestTableStartsAnewAtMax(t *testing.T) {
	var tab intern.Table
	first := tab.String(strings.Clone("first"))
	for i := range intern.Max + 10 {
		tab.String(strconv.Itoa(i))
		if tab.Len() > intern.Max {
			t.Fatalf("Len = %d > Max %d", tab.Len(), intern.Max)
		}
	}
	if first != "first" {
		t.Errorf("a string handed out earlier reads %q", first)
	}
	if tab.String("") != "" || tab.Len() > intern.Max {
		t.Error("the empty string was kept")
	}
}

// TestSharedRefIsOneCopy gives SharedRef equal refs decoded apart and
// checks they come back as one pointer whose names the table holds, that
// another ref gets its own, and that past Max distinct refs the copies
// start anew while those handed out keep their values.
func TestSharedRefIsOneCopy(t *testing.T) {
	var tab intern.Table
	a := tab.SharedRef(mesh.Ref{Module: strings.Clone("mesh-vault"), Node: strings.Clone("control")})
	b := tab.SharedRef(mesh.Ref{Module: strings.Clone("mesh-vault"), Node: strings.Clone("control")})
	if a != b {
		t.Fatalf("equal refs: two copies %p and %p, want one", a, b)
	}
	if !same(a.Module, tab.String("mesh-vault")) || !same(a.Node, tab.String("control")) {
		t.Errorf("the shared ref's names are not the table's")
	}
	if c := tab.SharedRef(mesh.Ref{Module: "postgres", Node: "control"}); c == a || *c != (mesh.Ref{Module: "postgres", Node: "control"}) {
		t.Errorf("another ref = %p %v; want a copy of its own", c, *c)
	}
	for i := range intern.Max {
		tab.SharedRef(mesh.Ref{Module: "m", Node: "n" + strconv.Itoa(i)})
	}
	if c := tab.SharedRef(mesh.Ref{Module: "mesh-vault", Node: "control"}); c == a {
		t.Errorf("past Max refs the copy handed out before is still shared; want the refs started anew")
	}
	if *a != (mesh.Ref{Module: "mesh-vault", Node: "control"}) {
		t.Errorf("a ref handed out before the new start changed: %v", *a)
	}
}
