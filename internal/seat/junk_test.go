package seat_test

import (
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Values in the seat's own buckets that are not of their kind (forged, or
// left by a foreign writer) are said and deleted by the seat, which alone
// writes those buckets: never adopted as keys to retire and ask about.
func TestForgedWritesAreDeletedNotAdopted(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	records := len(h.keys(mesh.RecordsBucket, ""))
	forged := []struct{ bucket, key, value string }{
		{mesh.ProvisionsBucket, "ace.gitea.zzz", `{"state":"nonsense"}`},
		{mesh.ProvisionsBucket, "ace.gitea.yyy", `{"state":"retiring","why":"forged"}`},
		{mesh.ProvisionsBucket, "ace.gitea.xxx", `{"provision":"xxx","consumer":{"module":"gitea","node":"ace"},` +
			`"provider":{"module":"postgres","node":"control"},"state":"sleeping","why":"forged"}`},
		{mesh.ProvisionsBucket, "ace.gitea.www", `{"provision":"other","consumer":{"module":"gitea","node":"ace"},` +
			`"provider":{"module":"postgres","node":"control"},"state":"asked","why":"forged"}`},
		{mesh.ProvisionsBucket, "ace.gitea.vvv", `not json`},
		{mesh.ProvisionsBucket, "ace.gitea", `{"state":"asked"}`}, // out of shape
		{mesh.PlansBucket, "ace.zzz", `{"state":"nonsense"}`},
		{mesh.PlansBucket, "ace.yyy", `{"node":"g14","module":"yyy"}`},
		{mesh.RefusedBucket, "ace.zzz", `{}`},
		{mesh.RefusedBucket, "ace.yyy", `{"node":"ace","module":"yyy"}`},
	}
	for _, f := range forged {
		h.put(f.bucket, f.key, f.value)
	}
	for _, f := range forged {
		bustest.WaitFor(t, 0, f.bucket+" "+f.key+" deleted by the seat", func() bool {
			return !has(h.keys(f.bucket, f.key), f.key)
		})
	}
	h.settle()
	if n := len(h.keys(mesh.RecordsBucket, "")); n != records {
		t.Errorf("records = %d; want %d: a forged value raises no ask", n, records)
	}
	// A forged value at a key the seat keeps is written anew, not deleted.
	key := "control.keycloak.database"
	h.put(mesh.ProvisionsBucket, key, `{"state":"nonsense"}`)
	p := h.waitState(key, mesh.Waits, waitsFor+"control.keycloak.credential.postgres_database, which is asked")
	if p.Provider != pgControl {
		t.Errorf("%s rewritten as %+v; want keycloak's key of postgres", key, p)
	}
}

func has(keys []string, key string) bool {
	for _, k := range keys {
		if k == key {
			return true
		}
	}
	return false
}
