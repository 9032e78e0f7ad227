package kit

import (
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestInputsAllocations holds what a provide of a credential is made from
// (its names, as text) to one allocation, and checks the text.
func TestInputsAllocations(t *testing.T) {
	k := &Kit{provs: map[string]mesh.Provision{}, others: map[string]other{}}
	p := mesh.Provision{Provision: mesh.CredentialProvision, Local: "postgres_database", Consumer: mesh.Ref{Module: "keycloak", Node: "control"}}
	if got, waiting := k.inputs(p); got != "credential\x00postgres_database\x00keycloak\x00control\x00" || waiting != "" {
		t.Fatalf("inputs(%+v) = %q, %q; want the four names, each ended by NUL, and nothing waited for", p, got, waiting)
	}
	if n := testing.AllocsPerRun(100, func() { k.inputs(p) }); n != 1 {
		t.Errorf("inputs of a credential: %v allocations; want 1", n)
	}
}
