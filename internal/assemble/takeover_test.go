package assemble_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

// BenchmarkTakeover measures how long a standby seat takes to hold the
// lease after the holder dies as by kill -9 (its connection closed, its
// lease never given back), on a three-server cluster with R3 buckets and
// the replicated lease's defaults. Each iteration starts a holder and a
// standby, kills the holder at a random point of its renewal period and
// times the standby's takeover; it reports the median and the longest
// (s/takeover-median, s/takeover-max). Run it with
//
//	go test -run '^$' -bench Takeover -benchtime 5x ./internal/assemble/
//
// Each iteration takes a lease's TTL and more (12 s by default).
func BenchmarkTakeover(b *testing.B) {
	c := bustest.Cluster(b)
	quiet := slog.New(slog.DiscardHandler)
	var took []time.Duration
	i := 0
	for b.Loop() {
		i++
		ctx, cancel := context.WithCancel(context.Background())
		a := &assemble.Assembly{Dial: assemble.Shared(c.URL(), "", quiet), Log: quiet, Replicas: 3}
		start := func(id string) *assemble.SeatRunning {
			s, err := a.StartSeat(ctx, assemble.SeatConfig{ID: id})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		holder := start(fmt.Sprintf("holder-%d", i))
		bustest.WaitFor(b, 30*time.Second, "the holder to take the lease", func() bool {
			st, _ := holder.Seat().Lease()
			return st == seat.LeaseHeld
		})
		standby := start(fmt.Sprintf("standby-%d", i))
		bustest.WaitFor(b, 10*time.Second, "the standby to wait", func() bool {
			st, _ := standby.Seat().Lease()
			return st == seat.LeaseWaiting
		})
		// Somewhere in the renewal period (2 s of the 12 s lease).
		time.Sleep(time.Duration(i%4) * 500 * time.Millisecond)
		nc, _ := holder.Conn()
		nc.Close() // kill -9: no lease given back
		killed := time.Now()
		bustest.WaitFor(b, 60*time.Second, "the standby to take over", func() bool {
			st, _ := standby.Seat().Lease()
			return st == seat.LeaseHeld
		})
		took = append(took, time.Since(killed))
		cancel()
		a.Wait()
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(took[len(took)/2].Seconds(), "s/takeover-median")
	b.ReportMetric(took[len(took)-1].Seconds(), "s/takeover-max")
	b.Logf("takeovers after kill -9 of the holder, R3, lease %v: %v", seat.ReplicatedLease, took)
}
