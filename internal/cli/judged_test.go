package cli

import (
	"bytes"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A key that one judging turned retiring and then retired is said once, as
// retired (the fresh-user review saw "X retired, X retiring").
func TestPrintResultSaysARetiredKeyOnce(t *testing.T) {
	t.Parallel()
	r := &compose.Result{
		Provisions: map[string]mesh.Provision{
			"ace.vaultwarden.database": {State: mesh.Retiring},
			"ace.gitea.database":       {State: mesh.Provided},
		},
		Retired: []string{"ace.vaultwarden.database"},
	}
	var out bytes.Buffer
	printResult(&out, r)
	want := "judged     ace.gitea.database provided, ace.vaultwarden.database retired\n"
	if out.String() != want {
		t.Errorf("printResult wrote %q, want %q", out.String(), want)
	}
}

// A judging of more than three keys names three and says how many more.
func TestPrintResultNamesThreeKeys(t *testing.T) {
	t.Parallel()
	r := &compose.Result{Provisions: map[string]mesh.Provision{
		"a.m.x": {State: mesh.Provided}, "b.m.x": {State: mesh.Provided},
		"c.m.x": {State: mesh.Asked}, "d.m.x": {State: mesh.Asked}, "e.m.x": {State: mesh.Asked},
	}}
	var out bytes.Buffer
	printResult(&out, r)
	want := "judged     a.m.x provided, b.m.x provided, c.m.x asked and 2 more\n"
	if out.String() != want {
		t.Errorf("printResult wrote %q, want %q", out.String(), want)
	}
}
