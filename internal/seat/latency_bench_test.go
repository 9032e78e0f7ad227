package seat_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// BenchmarkChangeToWritten times, over a real embedded NATS server and a
// running seat in steady state, how long one changed want takes to be
// written: from the put of the want (the one write "apply" makes for it)
// to the seat's last write that results from it (the node's plan, and any
// provision re-judged after it). Each op flips node-0001's want of one
// module between its two builds. It reports the p50 and p99 over the ops
// (p50-ms, p99-ms) and the mesh's provisions; ns/op also holds the wait
// until the seat is quiet again.
func BenchmarkChangeToWritten(b *testing.B) {
	for _, size := range []struct {
		name  string
		nodes int
	}{{"gen-10", 10}, {"gen-100", 100}, {"gen-1000", 1000}} {
		b.Run(size.name, func(b *testing.B) { benchChangeToWritten(b, size.nodes) })
	}
}

// lastWrite keeps the time of the seat's last result that wrote something.
type lastWrite struct {
	mu   sync.Mutex
	at   time.Time
	node map[string]string // node -> fingerprint of its plan's last write, by plan key
}

func benchChangeToWritten(b *testing.B, nodes int) {
	s := bustest.Server(b)
	ctx := bustest.Context(b)
	_, ojs := bustest.Connect(b, s, "operator")
	f, err := meshfile.Parse("bench.yaml", genFile(nodes)(b))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := meshfile.Apply(ctx, ojs, f, time.Now()); err != nil {
		b.Fatal(err)
	}
	lw := &lastWrite{node: map[string]string{}}
	_, sjs := bustest.Connect(b, s, "seat")
	se := seat.New(sjs, seat.Config{Log: quiet, OnResult: func(r *compose.Result) {
		if !r.Changed() {
			return
		}
		now := time.Now()
		lw.mu.Lock()
		lw.at = now
		for k, v := range r.Plans {
			var p mesh.Plan
			if json.Unmarshal(v, &p) == nil {
				lw.node[k] = p.Fingerprint
			}
		}
		lw.mu.Unlock()
	}})
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- se.Run(sctx) }()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	marks := seat.Marks(ctx, ojs)
	bustest.WaitFor(b, 10*time.Minute, "the seat to settle", func() bool { return se.Settled(marks) })

	// node-0001's first module with two builds; its want flips between them.
	wants, err := ojs.KeyValue(ctx, mesh.WantsBucket)
	if err != nil {
		b.Fatal(err)
	}
	builds, err := ojs.KeyValue(ctx, mesh.BuildsBucket)
	if err != nil {
		b.Fatal(err)
	}
	var module, key string
	var fps []string
	wl, err := wants.ListKeysFiltered(ctx, "want.node-0001.*")
	if err != nil {
		b.Fatal(err)
	}
	var wantKeys []string
	for k := range wl.Keys() {
		wantKeys = append(wantKeys, k)
	}
	slices.Sort(wantKeys)
	for _, k := range wantKeys {
		m := strings.TrimPrefix(k, "want.node-0001.")
		bl, err := builds.ListKeysFiltered(ctx, m+".*")
		if err != nil {
			b.Fatal(err)
		}
		var got []string
		for bk := range bl.Keys() {
			got = append(got, strings.TrimPrefix(bk, m+"."))
		}
		if len(got) >= 2 {
			slices.Sort(got)
			module, key, fps = m, k, got[:2]
			break
		}
	}
	if module == "" {
		b.Fatal("node-0001 wants no module with two builds")
	}
	provisions, err := ojs.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		b.Fatal(err)
	}
	st, err := provisions.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	planKey := "node-0001." + module

	var lat []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		fp := fps[i%2]
		if i == 0 {
			// The first op must change the want.
			if e, err := wants.Get(ctx, key); err == nil {
				var w mesh.Want
				if json.Unmarshal(e.Value(), &w) == nil && w.Fingerprint == fp {
					fps[0], fps[1] = fps[1], fps[0]
					fp = fps[0]
				}
			}
		}
		v, _ := json.Marshal(mesh.Want{Fingerprint: fp})
		start := time.Now()
		if _, err := wants.Put(ctx, key, v); err != nil {
			b.Fatal(err)
		}
		m := seat.Marks(ctx, ojs)
		bustest.WaitFor(b, time.Minute, "the seat to write the changed want's plan", func() bool {
			lw.mu.Lock()
			defer lw.mu.Unlock()
			return lw.node[planKey] == fp && se.Settled(m)
		})
		lw.mu.Lock()
		lat = append(lat, lw.at.Sub(start))
		lw.mu.Unlock()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100])/1e6, "p99-ms")
	b.ReportMetric(float64(st.Values()), "provisions")
}
