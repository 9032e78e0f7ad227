package seat_test

import (
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A credential retires only after every key that depends on it is gone:
// while its database key is kept (answered no), it is not asked about, so
// no yes can remove it under a role that still uses it.
func TestCredentialIsNotAskedWhileItsDatabaseIsKept(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	got := h.retired()
	db := "ace.vaultwarden.database"
	if _, err := asks.Answer(h.ctx, h.nc, "alice", got[db].ID, "no"); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the warrant no in "+db, func() bool {
		p, _ := h.provision(db)
		return p.Warrant != nil && p.Warrant.Option == "no"
	})
	h.put(mesh.WantsBucket, "want.ace.gitea", mesh.Want{Fingerprint: "b7c100"}) // composes ace again
	h.settle()
	p := h.waitState(vaultwardenCred, mesh.Retiring, whyCredWaits)
	if p.Ask != "" || p.Warrant != nil {
		t.Errorf("%s = ask %q warrant %+v; want no ask while %s is kept", vaultwardenCred, p.Ask, p.Warrant, db)
	}
	open, err := asks.List(h.ctx, h.nc, mesh.RecordOpen)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range open.Records {
		if r.Ask.About == "provision."+vaultwardenCred {
			t.Errorf("open ask %s about %s while %s depends on it", r.Ask.ID, vaultwardenCred, db)
		}
	}
}

// Once its database key is retired, the credential is asked about; a yes
// whose provider is no longer running says so in the key's why, and the key
// goes once the provider removed its entry.
func TestCredentialRetiresAfterItsDatabase(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	pg, vault := mesh.BoundBucket("postgres"), mesh.BoundBucket("mesh-vault")
	db := "ace.vaultwarden.database"
	h.put(vault, vaultwardenCred, mesh.Entry{State: mesh.Provided, VaultName: "v/vw-cred", Generation: 1})
	h.put(pg, db, mesh.Entry{State: mesh.Provided, VaultName: "v/vw", Generation: 1})
	h.waitState(db, mesh.Provided, "")
	got := h.retired()
	if _, err := asks.Answer(h.ctx, h.nc, "alice", got[db].ID, "yes"); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the warrant yes in "+db, func() bool {
		p, _ := h.provision(db)
		return p.Warrant != nil && p.Warrant.Option == "yes"
	})
	// The provider's removal fails: its failed entry's why is in the key's.
	approved, _ := h.provision(db)
	refused := "the removal approved with yes failed, and is tried again with backoff: postgres: drop role: ERROR: role cannot be dropped (SQLSTATE 2BP01)"
	h.put(pg, db, mesh.Entry{State: mesh.Failed, Why: refused})
	h.waitState(db, mesh.Retiring, approved.Why+"; approved with yes, but postgres on "+approved.Provider.Node+" has not removed it yet; its entry says: "+refused)
	h.del(pg, db)
	bustest.WaitFor(t, 0, db+" retired", func() bool { _, ok := h.provision(db); return !ok })

	// Now the credential is asked about, its why without the wait.
	var p mesh.Provision
	bustest.WaitFor(t, 0, vaultwardenCred+" asked about", func() bool {
		p, _ = h.provision(vaultwardenCred)
		if p.Ask == "" {
			return false
		}
		_, ok := h.record(p.Ask)
		return ok
	})
	want := "no build wanted or placed on ace requires credential of mesh-vault on control any more"
	if p.State != mesh.Retiring || p.Why != want {
		t.Errorf("%s = %s %q; want retiring %q", vaultwardenCred, p.State, p.Why, want)
	}
	// The vault stops before it removes the entry: said.
	h.put(mesh.HaveBucket, "control.mesh-vault", mesh.Have{Phase: mesh.PhaseStopped, Health: mesh.HealthUnknown, Fingerprint: "9c0d51"})
	if _, err := asks.Answer(h.ctx, h.nc, "alice", p.Ask, "yes"); err != nil {
		t.Fatal(err)
	}
	h.waitState(vaultwardenCred, mesh.Retiring, want+"; approved with yes, but mesh-vault on control is stopped, not running, "+
		"so it does not remove its entry in mesh-vault_bound yet")
	h.put(mesh.HaveBucket, "control.mesh-vault", mesh.Have{Phase: mesh.PhaseRunning, Health: mesh.HealthOK, Fingerprint: "9c0d51"})
	bustest.WaitFor(t, 0, vaultwardenCred+"'s why back", func() bool {
		q, _ := h.provision(vaultwardenCred)
		return q.Why == want
	})
	h.del(vault, vaultwardenCred)
	bustest.WaitFor(t, 0, vaultwardenCred+" retired", func() bool { _, ok := h.provision(vaultwardenCred); return !ok })
}
