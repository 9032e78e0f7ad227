package seat_test

import (
	"context"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

// BenchmarkSeatStart times a seat's cold start (issue 11): each op applies
// gen-1000 (1000 nodes, 8 modules) to a new embedded server (not timed),
// then runs a new seat from Run until it has composed every node, every
// write landed and it is settled. It checks that the seat wrote every plan
// and provision, and reports the keys written (keys/op) and the CPU time
// of the whole process per op (proc-cpu-ns/op: the seat, its watches and
// the embedded server, on this machine's cores).
func BenchmarkSeatStart(b *testing.B) {
	file, err := meshfile.Parse("bench.yaml", genFile(1000)(b))
	if err != nil {
		b.Fatal(err)
	}
	var keys int64
	var cpu time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := bustest.Server(b)
		ctx := bustest.Context(b)
		_, ojs := bustest.Connect(b, s, "operator")
		if _, err := meshfile.Apply(ctx, ojs, file, time.Now()); err != nil {
			b.Fatal(err)
		}
		marks := seat.Marks(ctx, ojs)
		_, sjs := bustest.Connect(b, s, "seat")
		se := seat.New(sjs, seat.Config{Log: quiet})
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		before := procCPU()
		b.StartTimer()
		go func() { done <- se.Run(sctx) }()
		for !se.Settled(marks) {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		cpu += procCPU() - before
		keys += se.Wrote()
		cancel()
		if err := <-done; err != nil {
			b.Fatalf("seat.Run = %v", err)
		}
		if se.Wrote() < 41000 {
			b.Fatalf("the seat wrote %d keys at its start; want every plan and provision of gen-1000 (41 404)", se.Wrote())
		}
	}
	b.ReportMetric(float64(keys)/float64(b.N), "keys/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "proc-cpu-ns/op")
}
