package seat_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Each of a provider's entries re-judges its key without composing the
// consumer's node.
func TestEntriesRejudgeWithoutComposing(t *testing.T) {
	h := start(t, homelab(t))
	h.credentialsProvided("ace.gitea.credential.postgres_database_main", "ace.vaultwarden.credential.postgres_database",
		"g14.grafana.credential.postgres_database", "shanks.matrix-synapse.credential.postgres_database",
		"shanks.immich.credential.postgres_database", "shanks.woodpecker.credential.postgres_database",
		"g14.nextcloud.credential.postgres_database_main", "control.keycloak.credential.postgres_database")
	counts := map[string]int{}
	for _, n := range []string{"control", "ace", "g14", "shanks"} {
		counts[n] = h.seat.Compositions(n)
	}
	pg := mesh.BoundBucket("postgres")
	h.put(pg, "ace.gitea.database.main", mesh.Entry{State: mesh.Provided, VaultName: "vault/ace-gitea-main", Generation: 3})
	h.put(pg, "ace.vaultwarden.database", mesh.Entry{State: mesh.Failed, Why: `role "vw" exists`})
	h.put(pg, "g14.grafana.database", mesh.Entry{State: mesh.Waits, Why: "postgres is not reachable"})
	h.put(pg, "shanks.matrix-synapse.database", `{"refused":"disk full"}`)
	h.put(pg, "shanks.immich.database", mesh.Entry{State: "pending", Why: "working on it"})
	h.put(pg, "shanks.woodpecker.database", `{"state": provided`)
	h.put(pg, "g14.nextcloud.database.main", `{"waits":"an operator must approve the size"}`)
	h.put(pg, "control.keycloak.database", mesh.Entry{State: mesh.Provided, VaultName: "v/kc", Generation: -5})

	p := h.waitState("ace.gitea.database.main", mesh.Provided, "")
	if p.Reference == nil || *p.Reference != (mesh.Reference{ID: "vault/ace-gitea-main", Generation: 3}) || p.Why != "" {
		t.Errorf("provided key = %+v; want reference vault/ace-gitea-main generation 3 and no why", p)
	}
	h.waitState("ace.vaultwarden.database", mesh.Failed, `postgres on control says failed: role "vw" exists`)
	h.waitState("g14.grafana.database", mesh.Waits, "postgres on control says waits: postgres is not reachable")
	h.waitState("shanks.matrix-synapse.database", mesh.Failed, "says failed: disk full")
	h.waitState("g14.nextcloud.database.main", mesh.Waits, "says waits: an operator must approve the size")
	h.waitState("shanks.immich.database", mesh.Asked, `the entry of postgres says state "pending", which is not provided, failed or waits: working on it`)
	h.waitState("shanks.woodpecker.database", mesh.Asked, "the entry of postgres for this key cannot be decoded")
	h.waitState("control.keycloak.database", mesh.Asked, "the entry of postgres says provided, but its generation -5 is negative")
	for n, c := range counts {
		if got := h.seat.Compositions(n); got != c {
			t.Errorf("node %s composed %d times after entries; want %d (entries only re-judge keys)", n, got, c)
		}
	}

	// A provided key that later fails shows no reference: the reference is
	// the one the current entry names.
	h.put(pg, "ace.gitea.database.main", mesh.Entry{State: mesh.Failed, Why: "password rotation failed"})
	p = h.waitState("ace.gitea.database.main", mesh.Failed, "password rotation failed")
	if p.Reference != nil {
		t.Errorf("failed key keeps the reference %+v; want none", *p.Reference)
	}
}

// An entry deleted or purged leaves its key asked with a why that says the
// entry is gone, since when, and what it said last: not the why of an entry
// never given. A seat that starts after the loss keeps that why.
func TestLostEntryIsSaid(t *testing.T) {
	h := start(t, homelab(t))
	h.credentialsProvided("ace.gitea.credential.postgres_database_main", "ace.vaultwarden.credential.postgres_database")
	pg := mesh.BoundBucket("postgres")
	h.put(pg, "ace.gitea.database.main", mesh.Entry{State: mesh.Provided, VaultName: "vault/ace-gitea-main", Generation: 3})
	h.put(pg, "ace.vaultwarden.database", mesh.Entry{State: mesh.Failed, Why: `role "vw" exists`})
	h.waitState("ace.gitea.database.main", mesh.Provided, "")
	h.waitState("ace.vaultwarden.database", mesh.Failed, `role "vw" exists`)

	const gone = "asked of postgres on control; its entry in postgres_bound is gone since "
	h.del(pg, "ace.vaultwarden.database")
	if err := h.kv(pg).Delete(h.ctx, "ace.gitea.database.main"); err != nil {
		t.Fatal(err)
	}
	lost := map[string]string{
		"ace.vaultwarden.database": `(it said last: failed: role "vw" exists)`,
		"ace.gitea.database.main":  "(it said last: provided, vault name vault/ace-gitea-main, generation 3)",
	}
	whys := map[string]string{}
	for key, said := range lost {
		p := h.waitState(key, mesh.Asked, gone)
		since, ok := strings.CutPrefix(p.Why, gone)
		if !ok || !strings.HasSuffix(since, " "+said) {
			t.Errorf("%s why = %q; want %q<time> %s", key, p.Why, gone, said)
			continue
		}
		at, err := time.Parse(time.RFC3339, strings.TrimSuffix(since, " "+said))
		if err != nil || at.Before(p.At.Add(-time.Second)) || at.After(p.At) {
			t.Errorf("%s gone since %q (%v); want the time it was judged gone, %s", key, since, err, p.At)
		}
		if p.Reference != nil {
			t.Errorf("%s reference = %+v; want none", key, *p.Reference)
		}
		whys[key] = p.Why
	}
	// A seat that starts anew knows only the delete markers: the whys stand.
	h.stopSeat()
	h.startSeat()
	h.put(mesh.WantsBucket, "want.ace.gitea", mesh.Want{Fingerprint: "b7c100"}) // composes ace again
	h.settle()
	for key, why := range whys {
		if p, _ := h.provision(key); p.State != mesh.Asked || p.Why != why {
			t.Errorf("%s after a restart = %s %q; want asked %q", key, p.State, p.Why, why)
		}
	}

	// An entry lost while no seat runs: the key still says what it said.
	const key = "ace.gitea.database.main"
	h.put(pg, key, mesh.Entry{State: mesh.Provided, VaultName: "vault/ace-gitea-main", Generation: 4})
	h.waitState(key, mesh.Provided, "")
	h.stopSeat()
	h.del(pg, key)
	h.startSeat()
	p := h.waitState(key, mesh.Asked, gone)
	if !strings.HasSuffix(p.Why, " (it said last: provided, vault name vault/ace-gitea-main, generation 4)") {
		t.Errorf("%s, its entry lost while no seat ran = %q; want it gone, saying what it said last", key, p.Why)
	}
}

// A provider whose manifest does not read the plans never answers: said.
func TestEntryOfProviderThatReadsNoPlans(t *testing.T) {
	file := strings.Replace(string(homelab(t)), "          reads: [mesh-provisioner.plans]\n          ports: [{name: http}, {name: https}]",
		"          ports: [{name: http}, {name: https}]", 1)
	h := start(t, []byte(file))
	h.waitState("ace.gitea.route", mesh.Asked, "route-proxy does not read mesh-provisioner.plans, so its helper will never answer this key")
}

// By have: the key waits for the credential it depends on, then follows the
// provider's have.
func TestHaveOutcomes(t *testing.T) {
	h := start(t, homelab(t))
	h.waitState("ace.gitea.cache", mesh.Waits, waitsFor+redisCred+", which is asked: asked of mesh-vault on control; "+noEntry+"mesh-vault_bound")
	counts := h.seat.Compositions("ace")

	h.put(mesh.BoundBucket("mesh-vault"), redisCred, mesh.Entry{State: mesh.Provided, VaultName: "v/redis", Generation: 1})
	h.waitState(redisCred, mesh.Provided, "")
	p := h.waitState("ace.gitea.cache", mesh.Provided, "")
	h.waitState("shanks.immich.cache", mesh.Provided, "")
	if p.Provider != redisControl {
		t.Errorf("ace.gitea.cache provider = %v", p.Provider)
	}

	h.put(mesh.HaveBucket, "control.redis", mesh.Have{Phase: mesh.PhaseRunning, Health: mesh.HealthFailed, Fingerprint: "71be02", Detail: "out of memory"})
	h.waitState("ace.gitea.cache", mesh.Failed, "redis on control is running with health failed: out of memory")
	h.put(mesh.HaveBucket, "control.redis", mesh.Have{Phase: mesh.PhaseStarting, Health: mesh.HealthUnknown, Fingerprint: "71be02"})
	h.waitState("ace.gitea.cache", mesh.Asked, "redis on control is starting with health unknown")
	h.put(mesh.HaveBucket, "control.redis", mesh.Have{Phase: mesh.PhaseRunning, Health: mesh.HealthOK, Fingerprint: "71aaaa"})
	h.waitState("ace.gitea.cache", mesh.Asked, "running build 71aaaa where its want names 71be02")
	h.del(mesh.HaveBucket, "control.redis")
	h.waitState("ace.gitea.cache", mesh.Asked, "waits for redis on control to run")
	h.put(mesh.HaveBucket, "control.redis", `not json`)
	h.waitState("ace.gitea.cache", mesh.Asked, "the have of redis on control cannot be decoded")
	h.put(mesh.HaveBucket, "control.redis", mesh.Have{Phase: mesh.PhaseRunning, Health: mesh.HealthOK, Fingerprint: "71be02"})
	h.waitState("ace.gitea.cache", mesh.Provided, "")

	// The credential going back to waits, then failed, takes its
	// dependents with it, each quoting its why.
	h.put(mesh.BoundBucket("mesh-vault"), redisCred, mesh.Entry{State: mesh.Waits, Why: "sealed"})
	h.waitState("ace.gitea.cache", mesh.Waits, waitsFor+redisCred+", which is waits: mesh-vault on control says waits: sealed")
	h.put(mesh.BoundBucket("mesh-vault"), redisCred, mesh.Entry{State: mesh.Failed, Why: "the key file is gone"})
	h.waitState("ace.gitea.cache", mesh.Waits, waitsFor+redisCred+", which is failed: mesh-vault on control says failed: the key file is gone")
	h.waitState("shanks.immich.cache", mesh.Waits, waitsFor+redisCred+", which is failed: mesh-vault on control says failed: the key file is gone")
	h.settle()
	if got := h.seat.Compositions("ace"); got != counts {
		t.Errorf("ace composed %d times; want %d (haves and entries re-judge keys only)", got, counts)
	}
}

// Another writer's change to the seat's own provisions is undone by
// composing the key's node again.
func TestForeignProvisionWriteIsUndone(t *testing.T) {
	h := start(t, homelab(t))
	key := "control.keycloak.database"
	h.put(mesh.ProvisionsBucket, key, `{"state":"provided"}`)
	p := h.waitState(key, mesh.Waits, waitsFor+"control.keycloak.credential.postgres_database, which is asked")
	if p.Provider != pgControl || p.Consumer != (mesh.Ref{Module: "keycloak", Node: "control"}) {
		t.Errorf("%s rewritten as %+v; want keycloak's key of postgres", key, p)
	}
	h.put(mesh.ProvisionsBucket, key, `not json`)
	h.waitState(key, mesh.Waits, waitsFor+"control.keycloak.credential.postgres_database, which is asked")
	h.del(mesh.ProvisionsBucket, key)
	h.waitState(key, mesh.Waits, waitsFor+"control.keycloak.credential.postgres_database, which is asked")
}
