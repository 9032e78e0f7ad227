package compose_test

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkSettledMeshHeap reports what the seat's in-memory mesh holds
// once a generated mesh (8 modules a node) is settled, every node
// composed and its writes taken back as the seat takes them: the live
// heap it adds (live-B/op, after a collection) and its objects
// (live-objects/op). It is the part of the seat's heap that grows with the
// mesh (issue 11), with no bus; figures do not depend on load.
func BenchmarkSettledMeshHeap(b *testing.B) {
	for _, nodes := range []int{1000, 3000} {
		b.Run(fmt.Sprintf("gen-%d", nodes), func(b *testing.B) {
			var bytes, objects uint64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				m := loadGen(b, nodes)
				runtime.GC()
				runtime.ReadMemStats(&after)
				if len(m.Nodes()) < nodes {
					b.Fatalf("gen-%d: the mesh knows %d nodes", nodes, len(m.Nodes()))
				}
				bytes += after.HeapAlloc - before.HeapAlloc
				objects += after.HeapObjects - before.HeapObjects
				runtime.KeepAlive(m)
			}
			b.ReportMetric(float64(bytes)/float64(b.N), "live-B/op")
			b.ReportMetric(float64(objects)/float64(b.N), "live-objects/op")
		})
	}
}
