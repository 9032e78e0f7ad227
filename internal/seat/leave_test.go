package seat_test

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The only vault unplaced while vaultwarden still needs its credential: the
// credential stays asked with the problem's why (spec 4), never retiring,
// and no key of the mesh turns retiring.
func TestCredentialStaysAskedWhenTheVaultIsUnplaced(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	h.credentialsProvided(vaultwardenCred)
	h.put(mesh.PlacementBucket, "control", mesh.Placement{Modules: []mesh.PlacedModule{
		{Module: "postgres"}, {Module: "redis"}, {Module: "keycloak"}, {Module: "route-proxy"}, {Module: "node-tools"}}})
	const problem = "no node runs mesh-vault, so the credential " + vaultwardenCred + " has no provider"
	p := h.waitState(vaultwardenCred, mesh.Asked, "asked of mesh-vault: "+problem)
	if p.Reference != nil || p.Ask != "" {
		t.Errorf("%s = %+v; want no reference and no ask", vaultwardenCred, p)
	}
	h.waitState("ace.vaultwarden.database", mesh.Asked, "waits for "+vaultwardenCred+", which has no provider: "+problem)
	h.settle()
	for _, k := range h.keys(mesh.ProvisionsBucket, "") {
		if q, _ := h.provision(k); q.State == mesh.Retiring {
			t.Errorf("%s turned retiring (%s) when the vault left", k, q.Why)
		}
	}
}

// leaveMesh is app on beta and on gamma, each needing its own credential of
// postgres's database; the one vault runs on gamma.
const leaveMesh = `
nodes: [alpha, beta, gamma]
modules:
  mesh-vault:
    builds:
      - fp: v1
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  postgres:
    builds:
      - fp: p1
        manifest: {module: postgres, provides: [{name: database, credential: own, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  app:
    builds:
      - fp: a1
        manifest: {module: app, requires: [{provision: database, from: postgres}]}
placement:
  alpha: [postgres]
  beta: [app]
  gamma: [mesh-vault, app]
wants:
  alpha: {postgres: p1}
  beta: {app: a1}
  gamma: {mesh-vault: v1, app: a1}
haves:
  alpha:
    postgres: {phase: running, health: ok, fp: p1}
  gamma:
    mesh-vault: {phase: running, health: ok, fp: v1}
`

// Node gamma leaves the mesh with its vault (its placement and haves
// deleted; the vault's entries stay in mesh-vault_bound). beta's credential
// stays asked; gamma's keys retire: its database key once postgres removes
// what it set up, then its credential, whose ask says that nothing running
// removes it and what to clean by hand; on yes the seat deletes it, and
// gamma leaves every bucket the summaries count.
func TestNodeThatLeftWithItsVaultLeavesOnYes(t *testing.T) {
	h := startWith(t, []byte(leaveMesh), options{router: true})
	const (
		betaCred  = "beta.app.credential.postgres_database"
		gammaCred = "gamma.app.credential.postgres_database"
		gammaDB   = "gamma.app.database"
	)
	h.credentialsProvided(betaCred, gammaCred)
	pg := mesh.BoundBucket("postgres")
	h.put(pg, "beta.app.database", mesh.Entry{State: mesh.Provided, VaultName: betaCred, Generation: 1})
	h.put(pg, gammaDB, mesh.Entry{State: mesh.Provided, VaultName: gammaCred, Generation: 1})
	h.waitState(gammaDB, mesh.Provided, "")

	h.del(mesh.PlacementBucket, "gamma")
	h.del(mesh.HaveBucket, "gamma.mesh-vault")
	h.waitState(betaCred, mesh.Asked, "asked of mesh-vault: no node runs mesh-vault, so the credential "+betaCred+" has no provider")
	h.waitState(gammaCred, mesh.Retiring, "it is asked about once the keys that depend on it are retired: "+gammaDB)
	answer := func(key string) mesh.Ask {
		t.Helper()
		var r mesh.Record
		bustest.WaitFor(t, 0, key+" asked, and its ask recorded", func() bool {
			p, ok := h.provision(key)
			if !ok || p.State != mesh.Retiring || p.Ask == "" {
				return false
			}
			r, ok = h.record(p.Ask)
			return ok
		})
		if _, err := asks.Answer(h.ctx, h.nc, "alice", r.Ask.ID, retire.Yes); err != nil {
			t.Fatal(err)
		}
		return r.Ask
	}
	answer(gammaDB)
	h.waitState(gammaDB, mesh.Retiring, "")
	h.del(pg, gammaDB) // postgres removed what it set up
	bustest.WaitFor(t, 0, gammaDB+" deleted", func() bool { _, ok := h.provision(gammaDB); return !ok })

	const clean = "clean by hand its entry " + gammaCred + " in mesh-vault_bound and the credential it keeps in its store"
	a := answer(gammaCred)
	if o, _ := a.Option(retire.Yes); !strings.Contains(a.Explanation, "mesh-vault is no longer placed on gamma, so nothing running can remove") ||
		o.Does != "The key is dropped; nothing removes what mesh-vault on gamma set up: "+clean+"." {
		t.Errorf("ask of %s promises what nothing running does: %q / Remove: %q", gammaCred, a.Explanation, o.Does)
	}
	bustest.WaitFor(t, 0, gammaCred+" deleted on yes", func() bool { _, ok := h.provision(gammaCred); return !ok })
	var e mesh.Entry
	if !h.get(mesh.BoundBucket(mesh.VaultModule), gammaCred, &e) {
		t.Errorf("the vault's entry %s went; want it left for the operator to clean", gammaCred)
	}
	h.settle()
	for _, b := range []string{mesh.ProvisionsBucket, mesh.PlansBucket, mesh.RefusedBucket} {
		if keys := h.keys(b, "gamma."); len(keys) != 0 {
			t.Errorf("%s keeps gamma's keys %v; want none (gamma left the mesh)", b, keys)
		}
	}
	h.waitState(betaCred, mesh.Asked, "no node runs mesh-vault")
}
