package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/registry"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func TestCompiledTable(t *testing.T) {
	want := map[string]string{ // kind -> bucket or verb
		"config": "mesh-config_resolved", "secret": "verb mesh-vault.secret", "bound": "<provider>_bound",
		"consumers": "verb mesh-vault.consumers",
		"collected": "mesh-provisioner_collect", "shell": "mesh-provisioner_collect",
		"environment": "mesh-provisioner_collect", "contribution": "mesh-provisioner_collect",
		"dir": "mesh-provisioner_applied", "access": "mesh-provisioner_applied", "port": "mesh-provisioner_applied",
		"seat": "mesh-provisioner_applied", "machine": "mesh-provisioner_applied",
	}
	got := map[string]string{}
	for _, a := range registry.Compiled() {
		if err := a.Check(); err != nil {
			t.Errorf("Check(%s) = %v; want nil", a.Kind, err)
		}
		if a.Verb != "" {
			got[a.Kind] = "verb " + a.Verb
		} else {
			got[a.Kind] = a.Bucket
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Compiled() = %v; want %v", got, want)
	}
}

func TestCheckRefusesASecretInABucket(t *testing.T) {
	a := mesh.RegistryAnswer{Kind: "secret", Module: "mesh-vault", Bucket: "mesh-vault_secrets", About: "x"}
	if err := a.Check(); err == nil {
		t.Error("Check(secret in a bucket) = nil; want an error")
	}
	if _, err := registry.Sync(context.Background(), nil, []mesh.RegistryAnswer{a}); err == nil {
		t.Error("Sync(table with a secret in a bucket) = nil error; want an error")
	}
}

func revisions(c *bus.Copy) map[string]uint64 {
	revs := map[string]uint64{}
	c.Range(func(k string, it bus.Item) bool { revs[k] = it.Revision; return true })
	return revs
}

func TestKeepWritesOnceAndDeletesRemovedKinds(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	kctx, stop := context.WithCancel(ctx)
	synced := make(chan registry.Changes, 4)
	done := make(chan error, 1)
	go func() {
		done <- registry.Keep(kctx, js, registry.KeepOptions{Synced: func(c registry.Changes) { synced <- c }})
	}()
	first := <-synced
	var kinds []string
	for _, a := range registry.Compiled() {
		kinds = append(kinds, a.Kind)
	}
	sort.Strings(kinds)
	if fmt.Sprint(first.Written) != fmt.Sprint(kinds) || len(first.Deleted) != 0 {
		t.Fatalf("first sync = %+v; want every kind written %v, none deleted", first, kinds)
	}
	stop()
	if err := <-done; err != context.Canceled {
		t.Errorf("Keep after cancel = %v; want context.Canceled", err)
	}

	// A reader's view: the values are the table's answers.
	_, rjs := bustest.Connect(t, s, "reader")
	c := bus.Follow(ctx, rjs, mesh.RegistryBucket, bus.Options{})
	<-c.Ready()
	it, ok := c.Get("port")
	if !ok {
		t.Fatal("registry has no key port")
	}
	var port mesh.RegistryAnswer
	if err := json.Unmarshal(it.Value, &port); err != nil {
		t.Fatal(err)
	}
	if port.Bucket != mesh.AppliedBucket || port.Field != "ports" || port.Key != "<node>.<module>" || port.Module != mesh.Module {
		t.Errorf("registry port = %+v; want applied bucket, field ports, key <node>.<module>", port)
	}
	before := revisions(c)

	// A restart with the same table writes nothing.
	kctx2, stop2 := context.WithCancel(ctx)
	go func() {
		done <- registry.Keep(kctx2, js, registry.KeepOptions{Synced: func(c registry.Changes) { synced <- c }})
	}()
	second := <-synced
	stop2()
	<-done
	if len(second.Written)+len(second.Deleted) != 0 {
		t.Errorf("second sync = %+v; want nothing written or deleted", second)
	}
	if after := revisions(c); !reflect.DeepEqual(after, before) {
		t.Errorf("revisions after a second start = %v; want unchanged %v", after, before)
	}

	// A table without "machine" deletes that kind and leaves the others.
	var less []mesh.RegistryAnswer
	for _, a := range registry.Compiled() {
		if a.Kind != "machine" {
			less = append(less, a)
		}
	}
	go func() {
		done <- registry.Keep(ctx, js, registry.KeepOptions{Table: less, Synced: func(c registry.Changes) { synced <- c }})
	}()
	third := <-synced
	if len(third.Written) != 0 || fmt.Sprint(third.Deleted) != "[machine]" {
		t.Errorf("sync without machine = %+v; want only machine deleted", third)
	}
	bustest.WaitFor(t, 0, "the reader's copy to lose machine", func() bool { _, ok := c.Get("machine"); return !ok })
	delete(before, "machine")
	if after := revisions(c); !reflect.DeepEqual(after, before) {
		t.Errorf("revisions after deleting machine = %v; want %v", after, before)
	}
}

// TestKeepWritesTheRegistryAgainWhenItIsGone deletes a kind, then the whole
// bucket, under a running Keep: each time every kind is written again at
// once, not at the next hour.
func TestKeepWritesTheRegistryAgainWhenItIsGone(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	go registry.Keep(ctx, js, registry.KeepOptions{})
	_, rjs := bustest.Connect(t, s, "reader")
	n := len(registry.Compiled())
	all := func() bool {
		kv, err := rjs.KeyValue(ctx, mesh.RegistryBucket)
		if err != nil {
			return false
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return false
		}
		got := 0
		for range lister.Keys() {
			got++
		}
		return got == n
	}
	bustest.WaitFor(t, 0, "every kind in the registry", all)
	kv, err := rjs.KeyValue(ctx, mesh.RegistryBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "port"); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the kind port written again", func() bool {
		_, err := kv.Get(ctx, "port")
		return err == nil
	})
	if err := rjs.DeleteKeyValue(ctx, mesh.RegistryBucket); err != nil {
		t.Fatal(err)
	}
	// Keep's copy hears of the deletion at once from the stream's DELETED
	// advisory, which nats-server 2.15.2 may drop (a stream busy
	// delivering stops its loop before sending it); its watch then ends
	// when its consumer's heartbeats stop, 15 to 20 s later (three beats
	// of 5 s, looked at every beat), and the bucket is made again and
	// written. The wait covers that, on a loaded machine too: still far
	// from the next hour.
	bustest.WaitFor(t, 45*time.Second, "every kind written again in the bucket made anew", all)
}

// A fence that fails (the seat may have lost its lease) stops Keep's sync
// before its first write: nothing is written.
func TestKeepWritesNothingPastAFailedFence(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	lapsed := errors.New("lease lapsed")
	synced := make(chan registry.Changes, 1)
	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- registry.Keep(kctx, js, registry.KeepOptions{
			Fence:  func() error { return lapsed },
			Synced: func(c registry.Changes) { synced <- c },
		})
	}()
	if c := <-synced; len(c.Written)+len(c.Deleted) != 0 {
		t.Errorf("sync past a failed fence = %+v; want nothing written", c)
	}
	stop()
	<-done
	kv, err := js.KeyValue(ctx, mesh.RegistryBucket)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range lister.Keys() {
		t.Errorf("registry holds %s after a sync past a failed fence", k)
	}
}

// Another writer's change to a kind between the copy's read and the
// sync's write is not overwritten: the write is conditional.
func TestSyncDoesNotOverwriteAChangeItHasNotSeen(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	kv, err := bus.Bucket(ctx, js, mesh.RegistryBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A copy that does not see port: as one that has not taken its write
	// yet.
	c := bus.Follow(ctx, js, mesh.RegistryBucket, bus.Options{Filter: "config"})
	<-c.Ready()
	if _, err := kv.Put(ctx, "port", []byte(`{"kind":"port"}`)); err != nil {
		t.Fatal(err)
	}
	_, err = registry.Sync(ctx, c, registry.Compiled())
	if !bus.IsConflict(err) {
		t.Errorf("Sync over an unseen write = %v; want a conflict", err)
	}
	e, err := kv.Get(ctx, "port")
	if err != nil || string(e.Value()) != `{"kind":"port"}` {
		t.Errorf("port = %s, %v; want the other writer's value kept", e.Value(), err)
	}
}
