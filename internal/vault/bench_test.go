package vault_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// BenchmarkVaultProvides times a vault started on an empty store over n
// credential provisions already in the provisions bucket (as in up's cold
// start) until a watcher on another connection has seen the entry of each:
// the kit's copy of the provisions, a new value per credential saved to the
// store's log (synced to this machine's disk, syncs shared between values
// issued together) and the entries written, over a real embedded server.
func BenchmarkVaultProvides(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("credentials=%d", n), func(b *testing.B) {
			url := kittest.Server(b)
			_, js := kittest.Connect(b, url, "bench-seat")
			ctx, cancel := context.WithCancel(context.Background())
			b.Cleanup(cancel)
			if _, err := bus.Bucket(ctx, js, mesh.ProvisionsBucket, 0); err != nil {
				b.Fatal(err)
			}
			if _, err := bus.Bucket(ctx, js, mesh.PlansBucket, 0); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				consumer := mesh.Ref{Module: fmt.Sprintf("app%d", i%8), Node: fmt.Sprintf("node-%04d", i/8)}
				key, p := kittest.Requirement(consumer, "database", "", mesh.Ref{Module: "postgres", Node: "control"})
				ck, cp, _ := kittest.Credential(key, p, vaultRef)
				v, _ := json.Marshal(cp)
				if _, err := js.PublishAsync("$KV."+mesh.ProvisionsBucket+"."+ck.String(), v); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 999 || i == n-1 {
					select {
					case <-js.PublishAsyncComplete():
					case <-time.After(time.Minute):
						b.Fatal("provisions not acknowledged in a minute")
					}
				}
			}
			nc, vjs := kittest.Connect(b, url, mesh.VaultModule)
			_, wjs := kittest.Connect(b, url, "bench-watcher")
			run := func(check bool) {
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				seen := make(chan struct{})
				count := 0
				w := bus.Follow(ctx, wjs, mesh.BoundBucket(mesh.VaultModule), bus.Options{Create: true, OnChange: func(ch bus.Change) {
					if !ch.Deleted {
						if count++; count == n {
							close(seen)
						}
					}
				}})
				<-w.Ready()
				quiet, _ := kittest.Log()
				if _, err := vault.Start(ctx, vault.Config{Dir: b.TempDir(), Node: vaultRef.Node}, nc, vjs, quiet); err != nil {
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
						if json.Unmarshal(it.Value, &e) != nil || e.State != mesh.Provided || e.VaultName != key || e.Generation != 1 {
							bad++
						}
						return true
					})
					if w.Len() != n || bad != 0 {
						b.Fatalf("the vault's bucket holds %d entries, %d of them not provided at generation 1 under their own name; want %d", w.Len(), bad, n)
					}
				}
				cancel()
				if err := deleteBound(vjs); err != nil {
					b.Fatal(err)
				}
			}
			run(true)
			b.ReportAllocs()
			start, cpu := time.Now(), processCPU()
			for b.Loop() {
				run(false)
			}
			b.ReportMetric(float64(n)*float64(b.N)/time.Since(start).Seconds(), "credentials/s")
			// CPU of the whole process (kit, server, watcher) per key: less
			// bent by a loaded machine than the rate.
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(n*b.N), "cpu-us/credential")
		})
	}
}

func deleteBound(js jetstream.JetStream) error {
	return js.DeleteKeyValue(context.Background(), mesh.BoundBucket(mesh.VaultModule))
}
