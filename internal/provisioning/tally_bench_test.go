package provisioning

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// BenchmarkStatusTallyHeap reports the live heap the status tally keeps
// for a mesh shaped as "gen --nodes N --modules 8" settles (per node one
// placement, 9 plans, 32 provisions, no refusal), at 1,000 and 10,000
// nodes: bytes per key and in all.
func BenchmarkStatusTallyHeap(b *testing.B) {
	value := []byte(`{"provision":"database","local":"","consumer":{"module":"books-1","node":"node-0001"},"provider":{"module":"postgres","node":"control"},"state":"provided","at":"2026-12-01T19:34:49.796312267Z"}`)
	for _, nodes := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var heap uint64
			keys := 0
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				t := newTally()
				keys = 0
				for i := range nodes {
					n := fmt.Sprintf("node-%04d", i)
					t.change(mesh.PlacementBucket, n, nil, false)
					for m := range 9 {
						t.change(mesh.PlansBucket, fmt.Sprintf("%s.app-%d", n, m), nil, false)
					}
					for p := range 32 {
						t.change(mesh.ProvisionsBucket, fmt.Sprintf("%s.app-%d.provision.database_%d", n, p%9, p), value, false)
					}
					keys += 1 + 9 + 32
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap = after.HeapAlloc - before.HeapAlloc
				runtime.KeepAlive(t)
			}
			b.ReportMetric(float64(heap)/(1<<20), "MiB")
			b.ReportMetric(float64(heap)/float64(keys), "B/key")
		})
	}
}
