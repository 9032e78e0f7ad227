package client_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// aceKeys are the keys ace's client writes for the homelab's plans.
var (
	aceApplied = []string{"ace.gitea", "ace.node-tools", "ace.vaultwarden"}
	aceCollect = []string{"ace.environment.node-tools", "ace.shell=3Azsh=3Anormal.node-tools"}
)

// TestClientWritesItsKeysAgainWhenTheirBucketIsGone deletes the buckets the
// client writes (applied, then collect): the client makes each again and
// writes every key it applied, as at first start.
func TestClientWritesItsKeysAgainWhenTheirBucketIsGone(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, seat := bustest.Connect(t, s, "seat")
	plans := plansBucket(t, ctx, seat)
	for _, p := range homelabPlans() {
		if p.Node == "ace" {
			putPlan(t, ctx, plans, p)
		}
	}
	start(t, s, "ace", filepath.Join(t.TempDir(), "ace"))
	_, ojs := bustest.Connect(t, s, "operator")
	for _, c := range []struct {
		bucket string
		want   []string
	}{{mesh.AppliedBucket, aceApplied}, {mesh.CollectBucket, aceCollect}} {
		r := reader(t, ctx, s, c.bucket)
		bustest.WaitFor(t, 0, "ace's keys in "+c.bucket, func() bool { return fmt.Sprint(keys(r)) == fmt.Sprint(c.want) })
		if err := ojs.DeleteKeyValue(ctx, c.bucket); err != nil {
			t.Fatal(err)
		}
		bustest.WaitFor(t, 20*time.Second, "ace's keys written again in "+c.bucket, func() bool {
			kv, err := ojs.KeyValue(ctx, c.bucket)
			if err != nil {
				return false
			}
			lister, err := kv.ListKeys(ctx)
			if err != nil {
				return false
			}
			var got []string
			for k := range lister.Keys() {
				got = append(got, k)
			}
			return len(got) == len(c.want)
		})
	}
}

// TestClientAfterAServerBackOnAnEmptyStore restarts the server on a wiped
// store at the same address: the client makes its buckets again and keeps
// the plans it last read (a bucket gone is unknown, not empty: nothing of
// what it applied is removed), writing its applied records again; it
// applies the plans written anew. Before, it took its plans as deleted and
// removed every applied record.
func TestClientAfterAServerBackOnAnEmptyStore(t *testing.T) {
	dir := t.TempDir()
	s, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	ctx := bustest.Context(t)
	_, seat := bustest.Connect(t, s, "seat")
	plans := plansBucket(t, ctx, seat)
	for _, p := range homelabPlans() {
		if p.Node == "ace" {
			putPlan(t, ctx, plans, p)
		}
	}
	ace := start(t, s, "ace", filepath.Join(t.TempDir(), "ace"))
	app := reader(t, ctx, s, mesh.AppliedBucket)
	bustest.WaitFor(t, 0, "ace's applied records", func() bool { return fmt.Sprint(keys(app)) == fmt.Sprint(aceApplied) })

	s.Shutdown()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s2, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Shutdown)
	// The client makes the buckets it writes again; the plans are gone.
	_, ojs := bustest.Connect(t, s2, "operator")
	for _, b := range []string{mesh.AppliedBucket, mesh.CollectBucket} {
		bustest.WaitFor(t, 20*time.Second, b+" made again by the client", func() bool {
			_, err := ojs.KeyValue(ctx, b)
			return err == nil
		})
	}
	bustest.WaitFor(t, 20*time.Second, "ace's applied records written again on the empty store", func() bool {
		kv, err := ojs.KeyValue(ctx, mesh.AppliedBucket)
		if err != nil {
			return false
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return false
		}
		var got []string
		for k := range lister.Keys() {
			got = append(got, k)
		}
		slices.Sort(got)
		return fmt.Sprint(got) == fmt.Sprint(aceApplied)
	})
	if _, err := os.Stat(filepath.Join(ace.Root(), "gitea", "state")); err != nil {
		t.Errorf("gitea's state folder after the wipe: %v", err)
	}

	// The seat writes the plans again: the client applies them.
	plans = plansBucket(t, ctx, ojs)
	var gitea mesh.Plan
	for _, p := range homelabPlans() {
		if p.Node == "ace" {
			putPlan(t, ctx, plans, p)
		}
		if p.Module == "gitea" {
			gitea = p
		}
	}
	bustest.WaitFor(t, 20*time.Second, "ace's applied records written anew", func() bool {
		return fmt.Sprint(keys(app)) == fmt.Sprint(aceApplied)
	})
	a, _ := applied(t, app, "ace.gitea")
	if a.Fingerprint != gitea.Fingerprint || a.Dirs["state"] != filepath.Join(ace.Root(), "gitea", "state") {
		t.Errorf("applied ace.gitea after the wipe = %+v; want fp %s and its state folder", a, gitea.Fingerprint)
	}
}
