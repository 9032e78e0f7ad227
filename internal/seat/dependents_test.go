package seat_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// sharedMesh has one credential shared by the consumers of db on two other
// nodes: their keys depend on a key of another node than their own.
const sharedMesh = `
nodes: [lab, other, third]
modules:
  mesh-vault:
    builds:
      - fp: v1
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  db:
    builds:
      - fp: d1
        manifest: {module: db, provides: [{name: database, credential: shared, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  web:
    builds:
      - fp: w1
        manifest: {module: web, requires: [{provision: database, from: db}], dirs: [{name: state}]}
placement:
  lab: [mesh-vault, web]
  other: [db]
  third: [web]
wants:
  lab: {mesh-vault: v1, web: w1}
  other: {db: d1}
  third: {web: w1}
`

const sharedCred = "other.db.credential.db_database"

var sharedDependents = []string{"lab.web.database", "third.web.database"}

// A credential whose value the seat's mesh took from the bus (a write of
// its own that landed after the seat had taken it back, as when its
// acknowledgement was lost with a server) says another state than the one
// its dependents were judged on: every key that depends on it, on every
// node, is judged again, though composing the credential's node writes
// nothing new.
func TestDependentsJudgedAgainOnATakenChange(t *testing.T) {
	h := start(t, []byte(sharedMesh))
	for _, k := range sharedDependents {
		h.waitState(k, mesh.Waits, "waits for "+sharedCred+", which is asked")
	}
	vault := mesh.BoundBucket(mesh.VaultModule)
	provided := mesh.Entry{State: mesh.Provided, VaultName: sharedCred, Generation: 1}
	h.put(vault, sharedCred, provided)
	cred := h.waitState(sharedCred, mesh.Provided, "")
	for _, k := range sharedDependents {
		h.waitState(k, mesh.Asked, "")
	}
	h.put(vault, sharedCred, mesh.Entry{State: mesh.Failed, Why: "the vault is sealed"})
	h.waitState(sharedCred, mesh.Failed, "the vault is sealed")
	for _, k := range sharedDependents {
		h.waitState(k, mesh.Waits, "waits for "+sharedCred+", which is failed")
	}

	// While the seat is held still, the vault says provided again and the
	// credential's key comes back from the bus as the seat itself would
	// write it: the seat's judgement finds nothing new to write for it.
	h.seat.Pause()
	h.put(vault, sharedCred, provided)
	b, _ := json.Marshal(cred)
	h.put(mesh.ProvisionsBucket, sharedCred, string(b))
	release := h.seat.Resume(func(bus.Change) bool { return true })
	release()
	h.settle()
	for _, k := range sharedDependents {
		p := h.waitState(k, mesh.Asked, "")
		if strings.Contains(p.Why, sharedCred) {
			t.Errorf("%s = %s: %s; want judged again on the credential provided", k, p.State, p.Why)
		}
	}
	if p, _ := h.provision(sharedCred); p.State != mesh.Provided {
		t.Errorf("%s = %s: %s; want provided", sharedCred, p.State, p.Why)
	}
}

// A write to the seat's own buckets that its watch has not brought back yet
// (a write of its own whose acknowledgement was lost with a server, and
// which landed after all) keeps the seat from being settled: once it is,
// the bus holds the seat's word.
func TestNotSettledBeforeItsOwnBucketsCaughtUp(t *testing.T) {
	h := start(t, []byte(labMesh))
	const key = "lab.web.database"
	h.waitState(key, mesh.Waits, "waits for lab.web.credential.db_database, which is asked")
	release := h.seat.HoldCopy(mesh.ProvisionsBucket)
	h.put(mesh.ProvisionsBucket, key, `{"state":"provided"}`)
	if marks := seat.Marks(h.ctx, h.js); h.seat.Settled(marks) {
		t.Errorf("settled on marks %v while its copy of %s had not brought back the write of %s", marks, mesh.ProvisionsBucket, key)
	}
	release()
	h.settle()
	if p, _ := h.provision(key); p.State != mesh.Waits || !strings.Contains(p.Why, "lab.web.credential.db_database") {
		t.Errorf("settled with %s = %s: %q; want the seat's word (waits for its credential)", key, p.State, p.Why)
	}
}
