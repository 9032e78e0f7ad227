package seat_test

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func withoutVaultwarden(t *testing.T) []byte {
	return []byte(strings.NewReplacer(
		"ace: [gitea, vaultwarden, node-tools]", "ace: [gitea, node-tools]",
		"vaultwarden: 4a4a4a, ", "",
	).Replace(string(homelab(t))))
}

func TestRemovedModuleRetiresAndComesBack(t *testing.T) {
	h := start(t, homelab(t))
	pg := mesh.BoundBucket("postgres")
	h.credentialsProvided("ace.vaultwarden.credential.postgres_database")
	h.put(pg, "ace.vaultwarden.database", mesh.Entry{State: mesh.Provided, VaultName: "v/vw", Generation: 1})
	h.waitState("ace.vaultwarden.database", mesh.Provided, "")

	h.apply(withoutVaultwarden(t))
	for key, w := range map[string]string{
		"ace.vaultwarden.database":                     "no build wanted or placed on ace requires database of postgres on control any more",
		"ace.vaultwarden.credential.postgres_database": "no build wanted or placed on ace requires credential of mesh-vault on control any more",
		"ace.vaultwarden.route":                        "no build wanted or placed on ace requires route of route-proxy on control any more",
	} {
		p := h.waitState(key, mesh.Retiring, w)
		if key == "ace.vaultwarden.database" && (p.Reference == nil || p.Reference.ID != "v/vw") {
			t.Errorf("retiring %s lost its reference: %+v", key, p)
		}
	}
	var plan mesh.Plan
	if h.get(mesh.PlansBucket, "ace.vaultwarden", &plan) {
		t.Error("plan ace.vaultwarden still there after vaultwarden left ace")
	}
	if p, _ := h.provision("ace.gitea.database.main"); p.State == mesh.Retiring {
		t.Error("gitea's key turned retiring too")
	}

	h.apply(homelab(t))
	h.waitState("ace.vaultwarden.database", mesh.Provided, "")
	h.waitState("ace.vaultwarden.route", mesh.Asked, noEntry)
	if !h.get(mesh.PlansBucket, "ace.vaultwarden", &plan) {
		t.Error("plan ace.vaultwarden not back")
	}
}

func TestIdempotentApplyWritesNothing(t *testing.T) {
	h := start(t, homelab(t))
	plans, provs := h.lastSeq(mesh.PlansBucket), h.lastSeq(mesh.ProvisionsBucket)
	st := h.apply(homelab(t))
	if st.Written != 0 || st.Removed != 0 {
		t.Errorf("second apply = %+v; want nothing written or removed", st)
	}
	if a, b := h.lastSeq(mesh.PlansBucket), h.lastSeq(mesh.ProvisionsBucket); a != plans || b != provs {
		t.Errorf("the seat wrote after an unchanged apply: plans %d -> %d, provisions %d -> %d", plans, a, provs, b)
	}
}

// A burst of changes to one node composes it a handful of times.
func TestBurstCoalesces(t *testing.T) {
	h := start(t, homelab(t))
	h.module("home-assistant", "aa2027", `{"module":"home-assistant","ports":[{"name":"http"}]}`)
	h.settle()
	before := h.seat.Compositions("shanks")
	h.kv(mesh.HaveBucket)
	for i := 0; i < 100; i++ {
		// home-assistant has no want: each have with another fp composes
		// shanks. The last names aa2027.
		fp := "aa2027"
		if i%2 == 0 {
			fp = "aa2026"
		}
		// Published without waiting for each ack: a burst, as a busy
		// engine would send.
		if _, err := h.js.PublishAsync("$KV."+mesh.HaveBucket+".shanks.home-assistant",
			[]byte(`{"phase":"running","health":"ok","fp":"`+fp+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-h.js.PublishAsyncComplete():
	case <-h.ctx.Done():
	}
	h.settle()
	var plan mesh.Plan
	if !h.get(mesh.PlansBucket, "shanks.home-assistant", &plan) || plan.Fingerprint != "aa2027" {
		t.Errorf("plan shanks.home-assistant fp = %q; want aa2027 (the last have's)", plan.Fingerprint)
	}
	n := h.seat.Compositions("shanks") - before
	if n < 1 || n > 20 {
		t.Errorf("100 changes composed shanks %d times; want a handful (1 to 20)", n)
	}
	t.Logf("100 changes composed shanks %d times", n)
}

// TestPlanRemovedBeforeARestartComesBack removes a module, starts the seat
// again (its watch finds the plan's delete, a key it never held) and places
// the module back: the plan is written again. The seat used to put it
// expecting no earlier write of the key, be refused (wrong last sequence:
// the delete's), and wait for a change of the key that never came: `up`
// restarted between removing vaultwarden and putting it back never wrote
// ace.vaultwarden again.
func TestPlanRemovedBeforeARestartComesBack(t *testing.T) {
	h := start(t, homelab(t))
	h.apply(withoutVaultwarden(t))
	var plan mesh.Plan
	if h.get(mesh.PlansBucket, "ace.vaultwarden", &plan) {
		t.Fatal("plan ace.vaultwarden still there after vaultwarden left ace")
	}
	h.stopSeat()
	h.startSeat()
	h.apply(homelab(t))
	bustest.WaitFor(t, 0, "plan ace.vaultwarden back", func() bool {
		return h.get(mesh.PlansBucket, "ace.vaultwarden", &plan)
	})
	h.waitState("ace.vaultwarden.route", mesh.Asked, noEntry)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.writeErrs {
		t.Errorf("write refused: %s", e)
	}
}
