package kit

import (
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestInputs checks the text of what a provide is made from: one NUL byte
// for the names a key says itself, the names spelled out otherwise, and the
// reference of each key depended on.
func TestInputs(t *testing.T) {
	k := &Kit{owns: map[string]own{}, provs: map[string]mesh.Provision{}, others: map[string]other{}}
	vault := &mesh.Ref{Module: mesh.VaultModule, Node: "control"}
	k.others["control.keycloak.credential.postgres_database"] = other{provider: vault, state: mesh.Provided, reference: &mesh.Reference{ID: "v", Generation: 2}}
	k.others["control.keycloak.credential.none"] = other{provider: vault, state: mesh.Provided}
	k.others["control.keycloak.credential.asked"] = other{provider: vault, state: mesh.Asked}
	cred := mesh.Provision{Provision: mesh.CredentialProvision, Local: "postgres_database", Consumer: mesh.Ref{Module: "keycloak", Node: "control"}}
	db := mesh.Provision{Provision: "database", Consumer: mesh.Ref{Module: "keycloak", Node: "control"}}
	withDeps := func(p mesh.Provision, deps ...string) mesh.Provision { p.DependsOn = deps; return p }
	for _, c := range []struct {
		name, key    string
		p            mesh.Provision
		want, waited string
	}{
		{"the key's names", "control.keycloak.credential.postgres_database", cred, "\x00", ""},
		{"no local", "control.keycloak.database", db, "\x00", ""},
		{"another local", "control.keycloak.credential.other", cred, "\x01credential\x00postgres_database\x00keycloak\x00control\x00", ""},
		{"a local the key lacks", "control.keycloak.credential", cred, "\x01credential\x00postgres_database\x00keycloak\x00control\x00", ""},
		{"another node", "node-1.keycloak.database", db, "\x01database\x00\x00keycloak\x00control\x00", ""},
		{"a name with a dot", "control.keycloak.database.x", mesh.Provision{Provision: "database.x", Consumer: db.Consumer}, "\x01database.x\x00\x00keycloak\x00control\x00", ""},
		{"an empty name", "control..database", mesh.Provision{Provision: "database", Consumer: mesh.Ref{Node: "control"}}, "\x01database\x00\x00\x00control\x00", ""},
		{"depends on a reference", "control.keycloak.database", withDeps(db, "control.keycloak.credential.postgres_database"), "\x00control.keycloak.credential.postgres_database\x00v\x002\x00", ""},
		{"depends on no reference", "control.keycloak.database", withDeps(db, "control.keycloak.credential.none"), "\x00control.keycloak.credential.none\x00\x00-\x00", ""},
		{"waits for a key not provided", "control.keycloak.database", withDeps(db, "control.keycloak.credential.asked"), "", "control.keycloak.credential.asked"},
		{"waits for a key not held", "control.keycloak.database", withDeps(db, "control.keycloak.credential.gone"), "", "control.keycloak.credential.gone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, waited := k.inputs(c.key, c.p)
			if got != c.want || waited != c.waited {
				t.Errorf("inputs(%q, %+v) = %q, %q; want %q, %q", c.key, c.p, got, waited, c.want, c.waited)
			}
		})
	}
}

// TestInputsAllocations holds what a provide of a credential is made from
// to no allocation when the key says its names (as the seat writes every
// provision), and one when not.
func TestInputsAllocations(t *testing.T) {
	k := &Kit{owns: map[string]own{}, provs: map[string]mesh.Provision{}, others: map[string]other{}}
	p := mesh.Provision{Provision: mesh.CredentialProvision, Local: "postgres_database", Consumer: mesh.Ref{Module: "keycloak", Node: "control"}}
	if n := testing.AllocsPerRun(100, func() { k.inputs("control.keycloak.credential.postgres_database", p) }); n != 0 {
		t.Errorf("inputs of a credential at its own key: %v allocations; want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { k.inputs("control.keycloak.credential.x", p) }); n != 1 {
		t.Errorf("inputs of a credential at another key: %v allocations; want 1", n)
	}
}
