package client_test

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestClientAppliesAgainAfterAFailedWrite checks that a module whose
// applied record the bus did not take (here a full bucket; on a cluster, a
// server that stopped with the write in flight) is applied again after a
// backoff, with no other change to bring it back.
func TestClientAppliesAgainAfterAFailedWrite(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, seat := bustest.Connect(t, s, "seat")
	full := jetstream.KeyValueConfig{Bucket: mesh.AppliedBucket, History: 1, MaxBytes: 1}
	if _, err := seat.CreateKeyValue(ctx, full); err != nil {
		t.Fatal(err)
	}
	plans := plansBucket(t, ctx, seat)
	var tools mesh.Plan
	for _, p := range homelabPlans() {
		if p.Node == "ace" && p.Module == "node-tools" {
			tools = p
		}
	}
	putPlan(t, ctx, plans, tools)
	start(t, s, "ace", filepath.Join(t.TempDir(), "ace"))
	app := reader(t, ctx, s, mesh.AppliedBucket)
	if _, ok := app.Get("ace.node-tools"); ok {
		t.Fatal("a full bucket took the applied record")
	}
	full.MaxBytes = -1
	if _, err := seat.UpdateKeyValue(ctx, full); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the applied record of ace.node-tools", func() bool {
		_, ok := app.Get("ace.node-tools")
		return ok
	})
	if a, _ := applied(t, app, "ace.node-tools"); a.Fingerprint != tools.Fingerprint {
		t.Errorf("applied ace.node-tools fp = %q; want %q", a.Fingerprint, tools.Fingerprint)
	}
}
