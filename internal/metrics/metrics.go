// Package metrics keeps a process's Prometheus metrics in a registry of its
// own (never the library's global default) and serves them with a health
// check: /metrics in Prometheus' text format, /healthz as 200 or 503 with a
// short text.
//
// What it counts comes in at the edges: the seat's OnResult and
// OnWriteError hooks ([Metrics.Result], [Metrics.WriteError]), watched
// copies of mesh-provisioner_provisions and mesh-asks_records
// ([Metrics.Follow]), and the watch counts of internal/bus. The pure
// compose package knows nothing of it.
package metrics

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Namespace prefixes every metric's name.
const Namespace = "mesh_provisioner"

// States are the provision states [Metrics] reports a gauge for, each
// present even at zero.
var States = []mesh.State{mesh.Asked, mesh.Provided, mesh.Failed, mesh.Waits, mesh.Retiring}

// Metrics is one process's metrics. Create it with [New]; its methods are
// safe for concurrent use.
//
// Series (all prefixed "mesh_provisioner_"):
//   - compositions_total: counter of node compositions by the seat.
//   - composition_seconds: histogram of one node's composition time
//     (compose and judge phases, not the writes).
//   - write_errors_total: counter of the seat's writes and deletes the bus
//     refused or did not acknowledge.
//   - provisions{state}: gauge of keys in mesh-provisioner_provisions per
//     state (the five states always present).
//   - odd_provisions: gauge of keys whose value does not decode.
//   - open_asks: gauge of records in mesh-asks_records in state open.
//   - watch_give_ups_total{bucket}, watch_restarts_total{bucket]: counters
//     of this process's watched copies (see [bus.WatchCounts]).
//
// plus the Go runtime's and the process's standard collectors.
type Metrics struct {
	reg          *prometheus.Registry
	compositions prometheus.Counter
	seconds      prometheus.Histogram
	writeErrors  prometheus.Counter

	mu     sync.Mutex
	states map[string]mesh.State // provision key -> state ("" when odd)
	open   map[string]bool       // record key -> open
}

// New returns metrics registered in a registry of their own.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		compositions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "compositions_total",
			Help: "Node compositions by the seat.",
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "composition_seconds",
			Help:    "Time to compose and judge one node, in seconds (writes not included).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16), // 50 µs to about 1.6 s
		}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "write_errors_total",
			Help: "Writes and deletes of the seat that the bus refused or did not acknowledge.",
		}),
		states: map[string]mesh.State{},
		open:   map[string]bool{},
	}
	m.reg.MustRegister(m.compositions, m.seconds, m.writeErrors, collector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry every series of m is in, for a caller's
// own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Result counts one result of the seat: pass it as the seat's OnResult. A
// node's composition is counted and timed; a result of keys re-judged
// (Node empty) is not.
func (m *Metrics) Result(r *compose.Result) {
	if r == nil || r.Node == "" {
		return
	}
	m.compositions.Inc()
	m.seconds.Observe((r.Compose + r.Judge).Seconds())
}

// WriteError counts one failed write: pass it as the seat's OnWriteError.
func (m *Metrics) WriteError(bucket, key string, err error) { m.writeErrors.Inc() }

// Follow keeps the gauges of provisions per state and of open asks from
// watched copies of mesh-provisioner_provisions and mesh-asks_records
// through js (a connection allowed to read both), until ctx is done. It
// returns at once; a missing bucket is waited for. The copies keep
// revisions only: the gauges keep what they count (a state per key, open
// or not per record), never the values.
func (m *Metrics) Follow(ctx context.Context, js jetstream.JetStream) {
	bus.Follow(ctx, js, mesh.ProvisionsBucket, bus.Options{OnChange: m.takeProvision, RevisionsOnly: true})
	bus.Follow(ctx, js, mesh.RecordsBucket, bus.Options{OnChange: m.takeRecord, RevisionsOnly: true})
}

func (m *Metrics) takeProvision(ch bus.Change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch.Deleted {
		delete(m.states, ch.Key)
		return
	}
	var p mesh.Provision
	if json.Unmarshal(ch.Value, &p) != nil {
		p.State = "" // counted as odd
	}
	m.states[ch.Key] = p.State
}

func (m *Metrics) takeRecord(ch bus.Change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch.Deleted {
		delete(m.open, ch.Key)
		return
	}
	var r mesh.Record
	m.open[ch.Key] = json.Unmarshal(ch.Value, &r) == nil && r.State == mesh.RecordOpen
}

// collector reports the gauges kept from copies and the bus's watch
// counts at each scrape.
type collector struct{ m *Metrics }

var (
	provisionsDesc = prometheus.NewDesc(Namespace+"_provisions",
		"Keys in mesh-provisioner_provisions per state.", []string{"state"}, nil)
	oddDesc = prometheus.NewDesc(Namespace+"_odd_provisions",
		"Keys in mesh-provisioner_provisions whose value does not decode or has no known state.", nil, nil)
	openAsksDesc = prometheus.NewDesc(Namespace+"_open_asks",
		"Records in mesh-asks_records in state open.", nil, nil)
	giveUpsDesc = prometheus.NewDesc(Namespace+"_watch_give_ups_total",
		"Watches of this process's watched copies that ended or could not start while still following.", []string{"bucket"}, nil)
	restartsDesc = prometheus.NewDesc(Namespace+"_watch_restarts_total",
		"Watches that came back (delivered the bucket's values again) after a give-up.", []string{"bucket"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{provisionsDesc, oddDesc, openAsksDesc, giveUpsDesc, restartsDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	counts := map[mesh.State]int{}
	odd, open := 0, 0
	c.m.mu.Lock()
	for _, st := range c.m.states {
		counts[st]++
	}
	for _, o := range c.m.open {
		if o {
			open++
		}
	}
	c.m.mu.Unlock()
	known := 0
	for _, st := range States {
		ch <- prometheus.MustNewConstMetric(provisionsDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
		known += counts[st]
	}
	for _, n := range counts {
		odd += n
	}
	ch <- prometheus.MustNewConstMetric(oddDesc, prometheus.GaugeValue, float64(odd-known))
	ch <- prometheus.MustNewConstMetric(openAsksDesc, prometheus.GaugeValue, float64(open))
	for b, n := range bus.WatchCounts() {
		ch <- prometheus.MustNewConstMetric(giveUpsDesc, prometheus.CounterValue, float64(n.GiveUps), b)
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(n.Restarts), b)
	}
}
