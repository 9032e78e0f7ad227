package kit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// BenchmarkKitProvides times a kit started over n provisions of its provider
// already in the provisions bucket (as the vault starts in up's cold start)
// until a watcher on another connection has seen the entry of each: the
// kit's copy of the provisions, its handling and its entry writes, over a
// real embedded server. The handler answers at once, so the figure is the
// kit's own rate (keys/s).
func BenchmarkKitProvides(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			url := kittest.Server(b)
			_, js := kittest.Connect(b, url, "bench-seat")
			ctx, cancel := context.WithCancel(context.Background())
			b.Cleanup(cancel)
			writeProvisions(b, ctx, js, n)
			_, kjs := kittest.Connect(b, url, provider.Module)
			_, wjs := kittest.Connect(b, url, "bench-watcher")
			h := kit.Funcs{ProvideFunc: func(_ context.Context, key mesh.ProvisionKey, _ mesh.Provision) (kit.Result, error) {
				return kit.Provided("cred-"+key.Consumer, 1), nil
			}}
			// The first run is checked: every key has its provided entry.
			provideAll(b, ctx, kjs, wjs, h, n, true)
			b.ReportAllocs()
			start, cpu := time.Now(), processCPU()
			for b.Loop() {
				provideAll(b, ctx, kjs, wjs, h, n, false)
			}
			b.ReportMetric(float64(n)*float64(b.N)/time.Since(start).Seconds(), "keys/s")
			// CPU of the whole process (kit, server, watcher) per key: less
			// bent by a loaded machine than the rate.
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(n*b.N), "cpu-us/key")
		})
	}
}

// writeProvisions writes n asked provisions of provider, in batches of
// asynchronous publishes.
func writeProvisions(b *testing.B, ctx context.Context, js jetstream.JetStream, n int) {
	b.Helper()
	if _, err := bus.Bucket(ctx, js, mesh.ProvisionsBucket, 0); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		key, p := kittest.Requirement(mesh.Ref{Module: fmt.Sprintf("app%d", i), Node: fmt.Sprintf("node-%04d", i%1000)}, "shelf", "", provider)
		v, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync("$KV."+mesh.ProvisionsBucket+"."+key.String(), v); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 || i == n-1 {
			awaitAcks(b, js)
		}
	}
}

// awaitAcks waits for every asynchronous publish of js (under the
// client's limit of outstanding ones, which a loaded machine reaches).
func awaitAcks(b *testing.B, js jetstream.JetStream) {
	b.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("provisions not acknowledged in a minute")
	}
}

// provideAll starts a kit on an empty bound bucket and returns once a
// watcher has seen n entries, then stops the kit and deletes the bucket.
func provideAll(b *testing.B, ctx context.Context, kjs, wjs jetstream.JetStream, h kit.Handler, n int, check bool) {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := make(chan struct{})
	count := 0
	w := bus.Follow(ctx, wjs, mesh.BoundBucket(provider.Module), bus.Options{Create: true, OnChange: func(ch bus.Change) {
		if ch.Deleted {
			return
		}
		if count++; count == n {
			close(seen)
		}
	}})
	<-w.Ready()
	quiet, _ := kittest.Log()
	if _, err := kit.Start(ctx, kit.Config{Module: provider.Module, Node: provider.Node, JetStream: kjs, Handler: h, Log: quiet}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-seen:
	case <-time.After(5 * time.Minute):
		b.Fatalf("the watcher saw %d entries of %d in 5 minutes", w.Len(), n)
	}
	if check {
		bad := 0
		w.Range(func(key string, it bus.Item) bool {
			var e mesh.Entry
			if json.Unmarshal(it.Value, &e) != nil || e.State != mesh.Provided || e.Generation != 1 {
				bad++
			}
			return true
		})
		if w.Len() != n || bad != 0 {
			b.Fatalf("the bound bucket holds %d entries, %d of them not provided at generation 1; want %d provided", w.Len(), bad, n)
		}
	}
	cancel()
	if err := kjs.DeleteKeyValue(context.Background(), mesh.BoundBucket(provider.Module)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkKitTakesOthers times the kit's intake of n provisions of other
// providers (each change handed to it as its copy of the provisions bucket
// does), as the vault's kit takes two thirds of the bucket at a cold start:
// a third asked of a route proxy (no depends-on), a third asked of a
// database provider depending on a credential, a third provided by a cache
// depending on one shared credential, each with the seat's why and time.
// held-B/key is the live heap the kit holds afterwards per key taken (the
// route's keys, asked and depending on nothing, are not held).
func BenchmarkKitTakesOthers(b *testing.B) {
	const n = 10000
	url := kittest.Server(b)
	_, js := kittest.Connect(b, url, provider.Module)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	changes := make([]bus.Change, n)
	at := time.Date(2026, 12, 1, 5, 25, 12, 856591144, time.UTC)
	for i := range changes {
		consumer := mesh.Ref{Module: fmt.Sprintf("app-%d", i%8), Node: fmt.Sprintf("node-%04d", i/8)}
		var key mesh.ProvisionKey
		var p mesh.Provision
		switch i % 3 {
		case 0:
			key, p = kittest.Requirement(consumer, "route", "", mesh.Ref{Module: "route-proxy", Node: "control"})
		case 1:
			key, p = kittest.Requirement(consumer, "database", "", mesh.Ref{Module: "postgres", Node: "control"})
			_, _, p = kittest.Credential(key, p, vault)
		case 2:
			key, p = kittest.Requirement(consumer, "cache", "", mesh.Ref{Module: "redis", Node: "control"})
			p.DependsOn = []string{"control.redis.credential.redis_cache"}
			p.State = mesh.Provided
		}
		if p.State == mesh.Asked {
			p.Why = kittest.WhyNoEntry(p.Provider)
		}
		p.At = at
		v, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		changes[i] = bus.Change{Bucket: mesh.ProvisionsBucket, Key: key.String(), Value: v, Revision: uint64(i + 1)}
	}
	quiet, _ := kittest.Log()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k, err := kit.Start(ctx, kit.Config{Module: provider.Module, Node: provider.Node, JetStream: js, Handler: kit.Funcs{}, Log: quiet})
	if err != nil {
		b.Fatal(err)
	}
	<-k.Ready()
	for _, ch := range changes {
		kit.Take(k, ch)
	}
	// Checked before it is timed: every key but the route's held in part,
	// none whole.
	if whole, part := kit.Held(k); whole != 0 || part != n-(n+2)/3 {
		b.Fatalf("the kit holds %d keys whole and %d in part; want 0 and %d", whole, part, n-(n+2)/3)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportAllocs()
	for b.Loop() {
		for _, ch := range changes {
			kit.Take(k, ch)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*b.N), "ns/key")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "held-B/key")
	runtime.KeepAlive(k)
}

// BenchmarkKitTakesOwn times the kit taking n changes of provisions of its
// own provider (credentials of a vault-like provider, as the seat writes
// them: asked, with a why and a time) and reports the heap it holds per key
// (held-B/key): the value it keeps, its indexes and its queue. The handler
// holds each of the kit's workers on its first key, so that no entry is
// written: the figure is what the kit keeps of a key it has yet to handle.
func BenchmarkKitTakesOwn(b *testing.B) {
	const n = 10000
	url := kittest.Server(b)
	_, js := kittest.Connect(b, url, vault.Module)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	changes := make([]bus.Change, n)
	at := time.Date(2026, 12, 1, 5, 25, 12, 856591144, time.UTC)
	for i := range changes {
		consumer := mesh.Ref{Module: fmt.Sprintf("app-%d", i%8), Node: fmt.Sprintf("node-%04d", i/8)}
		key, p := kittest.Requirement(consumer, "database", "", mesh.Ref{Module: "postgres", Node: "control"})
		ck, cp, _ := kittest.Credential(key, p, vault)
		cp.Why, cp.At = kittest.WhyNoEntry(vault), at
		v, err := json.Marshal(cp)
		if err != nil {
			b.Fatal(err)
		}
		changes[i] = bus.Change{Bucket: mesh.ProvisionsBucket, Key: ck.String(), Value: v, Revision: uint64(i + 1)}
	}
	quiet, _ := kittest.Log()
	hold := kit.Funcs{ProvideFunc: func(ctx context.Context, _ mesh.ProvisionKey, _ mesh.Provision) (kit.Result, error) {
		<-ctx.Done()
		return kit.Result{}, ctx.Err()
	}}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k, err := kit.Start(ctx, kit.Config{Module: vault.Module, Node: vault.Node, JetStream: js, Handler: hold, Log: quiet})
	if err != nil {
		b.Fatal(err)
	}
	<-k.Ready()
	for _, ch := range changes {
		kit.Take(k, ch)
	}
	// Checked before it is timed: every key held whole, each as written.
	if whole, part := kit.Held(k); whole != n || part != 0 {
		b.Fatalf("the kit holds %d keys whole and %d in part; want %d and 0", whole, part, n)
	}
	for _, ch := range changes[:3] {
		var want mesh.Provision
		if err := json.Unmarshal(ch.Value, &want); err != nil {
			b.Fatal(err)
		}
		if got, ok := k.Provision(ch.Key); !ok || !reflect.DeepEqual(got, want) {
			b.Fatalf("Provision(%s) = %+v, %v; want %+v", ch.Key, got, ok, want)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportAllocs()
	for b.Loop() {
		for _, ch := range changes {
			kit.Take(k, ch)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*b.N), "ns/key")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "held-B/key")
	runtime.KeepAlive(k)
}
