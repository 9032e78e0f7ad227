package seat_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

type want struct {
	provider mesh.Ref
	state    mesh.State
	why      string // a part the why must hold
}

var (
	pgControl    = mesh.Ref{Module: "postgres", Node: "control"}
	vaultControl = mesh.Ref{Module: "mesh-vault", Node: "control"}
	kcControl    = mesh.Ref{Module: "keycloak", Node: "control"}
	rpControl    = mesh.Ref{Module: "route-proxy", Node: "control"}
	redisControl = mesh.Ref{Module: "redis", Node: "control"}
	giteaAce     = mesh.Ref{Module: "gitea", Node: "ace"}
)

const (
	noEntry   = "waits for its entry in "
	waitsFor  = "waits for "
	redisCred = "control.redis.credential.redis_cache"
)

// onAskedCred is the why of a key that waits for its credential cred, which
// mesh-vault has not answered yet.
func onAskedCred(cred string) string {
	return waitsFor + cred + ", which is asked: asked of mesh-vault on control; " + noEntry + "mesh-vault_bound"
}

// checkHomelabKeys checks every provision key of ace and shanks against
// homelabKeys: no other key, none missing, each with its provider, state
// and the gist of its why.
func checkHomelabKeys(t *testing.T, h *harness) {
	t.Helper()
	for _, node := range []string{"ace.", "shanks."} {
		for _, key := range h.keys(mesh.ProvisionsBucket, node) {
			if _, ok := homelabKeys[key]; !ok {
				t.Errorf("unexpected provision key %s", key)
			}
		}
	}
	for key, w := range homelabKeys {
		p, ok := h.provision(key)
		if !ok {
			t.Errorf("provision %s is missing", key)
			continue
		}
		if p.Provider != w.provider || p.State != w.state || !strings.Contains(p.Why, w.why) {
			t.Errorf("provision %s = provider %v, %s, %q; want %v, %s, why with %q",
				key, p.Provider, p.State, p.Why, w.provider, w.state, w.why)
		}
	}
}

// A seat whose window holds two puts, so that every node's flight fills it
// (the newest flight waiting for its own first acks) and the flights before
// it land while it fills, writes the homelab's keys as the seat with its
// own window does.
func TestHomelabComposesThroughASmallWindow(t *testing.T) {
	h := startWith(t, homelab(t), options{window: 2})
	checkHomelabKeys(t, h)
	var plan mesh.Plan
	if !h.get(mesh.PlansBucket, "ace.gitea", &plan) || plan.Fingerprint != "b7c100" {
		t.Errorf("plan ace.gitea fp = %q; want b7c100 (its want)", plan.Fingerprint)
	}
	if n := h.seat.RoomWaits(); n == 0 {
		t.Errorf("the seat found its window of 2 puts full %d times; want some", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.writeErrs) > 0 {
		t.Errorf("write errors: %v", h.writeErrs)
	}
}

// The homelab mesh with no provider running: every key of ace and shanks,
// with its provider, state and the gist of its why.
var homelabKeys = map[string]want{
	"ace.gitea.database.main":                               {pgControl, mesh.Waits, onAskedCred("ace.gitea.credential.postgres_database_main")},
	"ace.gitea.credential.postgres_database_main":           {vaultControl, mesh.Asked, noEntry + "mesh-vault_bound"},
	"ace.gitea.oidc-client":                                 {kcControl, mesh.Waits, onAskedCred("ace.gitea.credential.keycloak_oidc-client")},
	"ace.gitea.credential.keycloak_oidc-client":             {vaultControl, mesh.Asked, noEntry + "mesh-vault_bound"},
	"ace.gitea.route":                                       {rpControl, mesh.Asked, noEntry + "route-proxy_bound"},
	"ace.gitea.cache":                                       {redisControl, mesh.Waits, onAskedCred(redisCred)},
	"ace.vaultwarden.database":                              {pgControl, mesh.Waits, onAskedCred("ace.vaultwarden.credential.postgres_database")},
	"ace.vaultwarden.credential.postgres_database":          {vaultControl, mesh.Asked, noEntry + "mesh-vault_bound"},
	"ace.vaultwarden.route":                                 {rpControl, mesh.Asked, noEntry + "route-proxy_bound"},
	"ace.gitea.credential.gitea_gitea-read":                 {vaultControl, mesh.Asked, noEntry + "mesh-vault_bound"},
	"shanks.matrix-synapse.database":                        {pgControl, mesh.Waits, onAskedCred("shanks.matrix-synapse.credential.postgres_database")},
	"shanks.matrix-synapse.credential.postgres_database":    {vaultControl, mesh.Asked, noEntry},
	"shanks.matrix-synapse.oidc-client":                     {kcControl, mesh.Waits, onAskedCred("shanks.matrix-synapse.credential.keycloak_oidc-client")},
	"shanks.matrix-synapse.credential.keycloak_oidc-client": {vaultControl, mesh.Asked, noEntry},
	"shanks.matrix-synapse.route":                           {rpControl, mesh.Asked, noEntry},
	"shanks.woodpecker.forge-account":                       {giteaAce, mesh.Waits, onAskedCred("shanks.woodpecker.credential.gitea_forge-account")},
	"shanks.woodpecker.credential.gitea_forge-account":      {vaultControl, mesh.Asked, noEntry},
	"shanks.woodpecker.gitea-read":                          {giteaAce, mesh.Waits, onAskedCred("ace.gitea.credential.gitea_gitea-read")},
	"shanks.woodpecker.database":                            {pgControl, mesh.Waits, onAskedCred("shanks.woodpecker.credential.postgres_database")},
	"shanks.woodpecker.credential.postgres_database":        {vaultControl, mesh.Asked, noEntry},
	"shanks.woodpecker.route":                               {rpControl, mesh.Asked, noEntry},
	"shanks.immich.database":                                {pgControl, mesh.Waits, onAskedCred("shanks.immich.credential.postgres_database")},
	"shanks.immich.credential.postgres_database":            {vaultControl, mesh.Asked, noEntry},
	"shanks.immich.cache":                                   {redisControl, mesh.Waits, onAskedCred(redisCred)},
	"shanks.immich.route":                                   {rpControl, mesh.Asked, noEntry},
	"shanks.home-assistant.route":                           {rpControl, mesh.Asked, noEntry},
}

func TestHomelabComposes(t *testing.T) {
	h := start(t, homelab(t))
	checkHomelabKeys(t, h)

	// gitea's newest build asks its cache before its want names it; the
	// plan stays at the want.
	var plan mesh.Plan
	if !h.get(mesh.PlansBucket, "ace.gitea", &plan) || plan.Fingerprint != "b7c100" {
		t.Errorf("plan ace.gitea fp = %q; want b7c100 (its want)", plan.Fingerprint)
	}
	for _, pp := range plan.Provisions {
		if pp.Provision == "cache" {
			t.Errorf("plan ace.gitea at its want holds the cache of its newest build")
		}
	}
	cache, _ := h.provision("ace.gitea.cache")
	if !slices.Equal(cache.DependsOn, []string{redisCred}) || cache.Consumer != (mesh.Ref{Module: "gitea", Node: "ace"}) {
		t.Errorf("ace.gitea.cache = %+v; want consumer gitea on ace, depends-on %s", cache, redisCred)
	}
	// The shared credential of redis' cache is a key of control, held by
	// redis, from the vault.
	cred, ok := h.provision(redisCred)
	if !ok || cred.Consumer != redisControl || cred.Provider != vaultControl || cred.State != mesh.Asked {
		t.Errorf("%s = %+v, %v; want consumer redis on control, provider mesh-vault on control, asked", redisCred, cred, ok)
	}
	// home-assistant has no want: composed at the build its have runs.
	if !h.get(mesh.PlansBucket, "shanks.home-assistant", &plan) || plan.Fingerprint != "aa2026" {
		t.Errorf("plan shanks.home-assistant fp = %q; want aa2026", plan.Fingerprint)
	}
	// Plans carry everything of the manifest, resolved.
	if !h.get(mesh.PlansBucket, "ace.gitea", &plan) {
		t.Fatal("no plan ace.gitea")
	}
	if len(plan.Dirs) != 3 || plan.Dirs[2] != (mesh.Dir{Name: "tmp", Unknown: "sweep"}) || plan.Dirs[0].Unknown != "program" ||
		len(plan.Ports) != 2 || !slices.Equal(plan.Secrets, []string{"secret-key"}) {
		t.Errorf("plan ace.gitea = %+v; want 3 dirs (tmp swept), 2 ports, secret-key", plan)
	}
	wantProv := mesh.PlanProvision{Provision: "database", Local: "main", Provider: "control", ProviderModule: "postgres", Credential: "own"}
	if len(plan.Provisions) != 3 || plan.Provisions[0] != wantProv {
		t.Errorf("plan ace.gitea provisions = %+v; want 3, first %+v", plan.Provisions, wantProv)
	}
	if n := len(h.keys(mesh.PlansBucket, "")); n != 18 {
		t.Errorf("%d plans; want 18 (one per placed module)", n)
	}
	if n := len(h.keys(mesh.RefusedBucket, "")); n != 0 {
		t.Errorf("%d refusals; want none", n)
	}
}

func TestSharedCredentialKeptWhileDependedOn(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	before := h.seat.Compositions("control")
	// Compose control again: its redis credential is needed by other nodes.
	h.put(mesh.WantsBucket, "want.control.redis", mesh.Want{Fingerprint: "71be02"})
	h.settle()
	if h.seat.Compositions("control") == before {
		t.Fatal("control was not composed again")
	}
	if p, _ := h.provision(redisCred); p.State != mesh.Asked {
		t.Fatalf("%s = %s (%s); want asked: others depend on it", redisCred, p.State, p.Why)
	}
	// Take every consumer of the cache away: gitea (its newest build needs
	// the cache), nextcloud and immich.
	file := strings.NewReplacer(
		"ace: [gitea, vaultwarden, node-tools]", "ace: [vaultwarden, node-tools]",
		"ace: {gitea: b7c100, vaultwarden: 4a4a4a, node-tools: 0d0d01}", "ace: {vaultwarden: 4a4a4a, node-tools: 0d0d01}",
		"g14: [grafana, prometheus, nextcloud, node-tools]", "g14: [grafana, prometheus, node-tools]",
		"nextcloud: 0cd001, ", "",
		"shanks: [matrix-synapse, woodpecker, immich, home-assistant, node-tools]", "shanks: [matrix-synapse, home-assistant, node-tools]",
		"woodpecker: 3c3c3c, immich: e1e1c0, ", "",
		"    gitea: {phase: starting, health: unknown, fp: b7c100}\n", "",
	).Replace(string(homelab(t)))
	h.apply([]byte(file))
	caches := []string{"ace.gitea.cache", "g14.nextcloud.cache", "shanks.immich.cache"}
	for _, k := range caches {
		n, _, _ := strings.Cut(k, ".")
		h.waitState(k, mesh.Retiring, "no build wanted or placed on "+n+" requires cache of redis on control any more")
	}
	// While the retiring caches are not retired, the credential stays: the
	// operator may keep them.
	h.settle()
	if p, _ := h.provision(redisCred); p.State != mesh.Asked {
		t.Fatalf("%s = %s (%s) while its dependents are only retiring; want asked", redisCred, p.State, p.Why)
	}
	// Yes to each: redis answers by its have, keeps no entries, so each is
	// retired at once; then the credential has no dependent left.
	for i, k := range caches {
		var p mesh.Provision
		bustest.WaitFor(t, 0, k+" asked", func() bool { p, _ = h.provision(k); return p.Ask != "" })
		bustest.WaitFor(t, 0, p.Ask+" recorded", func() bool { _, ok := h.record(p.Ask); return ok })
		if _, err := asks.Answer(h.ctx, h.nc, "operator", p.Ask, "yes"); err != nil {
			t.Fatal(err)
		}
		bustest.WaitFor(t, 0, k+" retired", func() bool { _, ok := h.provision(k); return !ok })
		if i < len(caches)-1 {
			h.settle()
			if p, _ := h.provision(redisCred); p.State != mesh.Asked {
				t.Fatalf("%s = %s after %d of 3 dependents retired; want asked", redisCred, p.State, i+1)
			}
		}
	}
	p := h.waitState(redisCred, mesh.Retiring, "no build wanted or placed on control requires credential of mesh-vault on control any more")
	if p.Consumer != redisControl {
		t.Errorf("retiring %s consumer = %v", redisCred, p.Consumer)
	}
}
