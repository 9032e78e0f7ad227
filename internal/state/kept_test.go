package state

import (
	"testing"
	"unsafe"
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
