package seat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The benchmarks of issue 2: one node's composition in steady state, from
// the seat's in-memory mesh (BenchmarkComposeNode) and from the bus read
// key by key as a naive seat would (BenchmarkComposeNodeKeyByKey). Figures
// and the command lines are in BENCHMARKS.md.

// benchMesh is a mesh file and the node whose composition is timed.
type benchMesh struct {
	name string
	file func(testing.TB) []byte
	node string
	// needed, when set, is the exact set of keys the node's composition
	// needs; otherwise the set is read from the provisions the seat wrote.
	needed []string
}

// shanksNeeded are the keys the composition of shanks, the homelab's
// largest node (five placed modules, sixteen provisions of its own), needs:
// its own keys and the two shared credentials of other nodes that its
// provisions depend on.
func shanksNeeded() []string {
	var keys []string
	for k := range homelabKeys {
		if strings.HasPrefix(k, "shanks.") {
			keys = append(keys, k)
		}
	}
	keys = append(keys, "ace.gitea.credential.gitea_gitea-read", redisCred)
	sort.Strings(keys)
	return keys
}

func genFile(nodes int) func(testing.TB) []byte {
	return func(testing.TB) []byte { return gen.Generate(nodes, 8, 1) }
}

// benchMeshes are the meshes both benchmarks compose. node-0001 of a gen
// mesh with seed 1 is the same node, with the same modules, wants and haves,
// whatever the number of nodes: its composition must not grow with them.
var benchMeshes = []benchMesh{
	{name: "homelab", file: homelabFile, node: "shanks", needed: shanksNeeded()},
	{name: "gen-10", file: genFile(10), node: "node-0001"},
	{name: "gen-100", file: genFile(100), node: "node-0001"},
	{name: "gen-1000", file: genFile(1000), node: "node-0001"},
}

func homelabFile(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile("../../examples/homelab.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var quiet = slog.New(slog.DiscardHandler)

// steady is a mesh applied to a real server and composed by a real seat
// until it settled: every plan and provision exists.
type steady struct {
	ctx    context.Context
	server *bus.Server
	now    time.Time
}

// settle applies file on a new embedded server, runs a seat until it has
// composed every node and taken every write, then stops the seat.
func settle(b *testing.B, file []byte) *steady {
	b.Helper()
	s := bustest.Server(b)
	st := &steady{ctx: bustest.Context(b), server: s, now: time.Now().UTC()}
	_, ojs := bustest.Connect(b, s, "operator")
	f, err := meshfile.Parse("bench.yaml", file)
	if err != nil {
		b.Fatalf("parse: %v", err)
	}
	if _, err := meshfile.Apply(st.ctx, ojs, f, st.now); err != nil {
		b.Fatalf("apply: %v", err)
	}
	_, sjs := bustest.Connect(b, s, "seat")
	se := seat.New(sjs, seat.Config{Log: quiet})
	ctx, cancel := context.WithCancel(st.ctx)
	done := make(chan error, 1)
	go func() { done <- se.Run(ctx) }()
	marks := seat.Marks(st.ctx, ojs)
	bustest.WaitFor(b, 5*time.Minute, "the seat to settle", func() bool { return se.Settled(marks) })
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("seat.Run = %v", err)
	}
	return st
}

// seatBuckets are the buckets the seat follows besides the providers'
// <provider>_bound buckets.
var seatBuckets = []string{
	mesh.PlacementBucket, mesh.WantsBucket, mesh.ModulesBucket, mesh.ManifestsBucket,
	mesh.BuildsBucket, mesh.HaveBucket,
	mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket,
	mesh.RecordsBucket,
}

// inMemory builds a state.Mesh the way the seat builds its own: a watched
// copy of every bucket it reads on its own connection, each change taken
// as it arrives, and the bound buckets of the providers that the taken
// manifests name followed too. Every node is then composed once and its
// needs taken, as the seat's start does; each composition must change
// nothing (steady state).
func (st *steady) inMemory(b *testing.B) *state.Mesh {
	b.Helper()
	_, js := bustest.Connect(b, st.server, "bench-mesh")
	var mu sync.Mutex
	var queue []bus.Change
	opts := bus.Options{Create: true, Log: quiet, OnChange: func(ch bus.Change) {
		mu.Lock()
		queue = append(queue, ch)
		mu.Unlock()
	}}
	m := state.New()
	followed := map[string]*bus.Copy{}
	next := slices.Clone(seatBuckets)
	for len(next) > 0 {
		for _, bucket := range next {
			followed[bucket] = bus.Follow(st.ctx, js, bucket, opts)
		}
		for _, bucket := range next {
			select {
			case <-followed[bucket].Ready():
			case <-time.After(time.Minute):
				b.Fatalf("the copy of %s is not ready after a minute", bucket)
			}
		}
		mu.Lock()
		q := queue
		queue = nil
		mu.Unlock()
		next = nil
		for _, ch := range q {
			t := m.Take(ch)
			if t.Odd != nil {
				b.Fatalf("odd change: %v", t.Odd)
			}
			for _, p := range t.Bound {
				if _, ok := followed[mesh.BoundBucket(p)]; !ok {
					next = append(next, mesh.BoundBucket(p))
				}
			}
		}
	}
	if len(followed) == len(seatBuckets) {
		b.Fatal("no provider keeps entries: no bound bucket is followed")
	}
	for _, n := range m.Nodes() {
		res := compose.Node(m, n, st.now)
		if res.Changed() {
			b.Fatalf("node %s is not in steady state: its composition writes %d plans, %d refusals, %d provisions",
				n, len(res.Plans), len(res.Refusals), len(res.Provisions))
		}
		m.Composed(res)
	}
	return m
}

// expectedNeeds returns the keys a node's composition must need in steady
// state, read from the provisions bucket: the node's keys and the keys of
// other nodes they depend on.
func (st *steady) expectedNeeds(b *testing.B, bm benchMesh) []string {
	b.Helper()
	if bm.needed != nil {
		return bm.needed
	}
	_, js := bustest.Connect(b, st.server, "bench-expect")
	kv, err := js.KeyValue(st.ctx, mesh.ProvisionsBucket)
	if err != nil {
		b.Fatal(err)
	}
	lister, err := kv.ListKeysFiltered(st.ctx, bm.node+".>")
	if err != nil {
		b.Fatal(err)
	}
	keys := map[string]bool{}
	for k := range lister.Keys() {
		keys[k] = true
		e, err := kv.Get(st.ctx, k)
		if err != nil {
			b.Fatalf("get provision %s: %v", k, err)
		}
		var p mesh.Provision
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			b.Fatalf("decode provision %s: %v", k, err)
		}
		if p.State == mesh.Retiring {
			b.Fatalf("provision %s is retiring in steady state: %s", k, p.Why)
		}
		for _, d := range p.DependsOn {
			keys[d] = true
		}
	}
	if len(keys) == 0 {
		b.Fatalf("node %s has no provisions", bm.node)
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func neededKeys(res *compose.Result) []string {
	keys := make([]string, 0, len(res.Needed))
	for k := range res.Needed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkSteady fails b unless res composes node with exactly the needed
// keys, holds nothing and changes nothing.
func checkSteady(b *testing.B, res *compose.Result, needed []string) {
	b.Helper()
	if got := neededKeys(res); !slices.Equal(got, needed) {
		b.Fatalf("composition of %s needs %d keys %v; want %d keys %v", res.Node, len(got), got, len(needed), needed)
	}
	if res.Changed() || len(res.Held) > 0 || len(res.Problems) > 0 || len(res.Retiring) > 0 {
		b.Fatalf("composition of %s in steady state: plans %v, refusals %v, provisions %v, held %v, problems %v, retiring %v",
			res.Node, res.Plans, res.Refusals, res.Provisions, res.Held, res.Problems, res.Retiring)
	}
}

var sink *compose.Result

// cpuClock measures the CPU time of the benchmark's own thread across its
// loop. Unlike ns/op, it leaves out the time other processes of a loaded
// machine take and the work of other goroutines (the embedded server, the
// garbage collector's background workers); what the loop allocates still
// costs it its GC assists.
type cpuClock struct {
	start time.Duration
	ok    bool
}

// startCPU locks the goroutine to its thread and reads the thread's clock.
func startCPU() cpuClock {
	runtime.LockOSThread()
	start, ok := threadCPU()
	return cpuClock{start: start, ok: ok}
}

// report unlocks the thread and reports the loop's CPU time per op as
// cpu-ns/op.
func (c cpuClock) report(b *testing.B) {
	end, ok := threadCPU()
	runtime.UnlockOSThread()
	if c.ok && ok && b.N > 0 {
		b.ReportMetric(float64(end-c.start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkComposeNode times one node's composition from the seat's
// in-memory mesh (spec 12: compositions read the watched copies only).
func BenchmarkComposeNode(b *testing.B) {
	for _, bm := range benchMeshes {
		b.Run(bm.name, func(b *testing.B) {
			st := settle(b, bm.file(b))
			m := st.inMemory(b)
			res := compose.Node(m, bm.node, st.now)
			checkSteady(b, res, st.expectedNeeds(b, bm))
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				sink = compose.Node(m, bm.node, st.now)
			}
			cpu.report(b)
			b.ReportMetric(float64(len(res.Needed)), "keys")
		})
	}
}

// BenchmarkComposeNodeKeyByKey times the same composition through a
// compose.State that reads the bus key by key on every call, as a naive
// seat without watched copies would.
func BenchmarkComposeNodeKeyByKey(b *testing.B) {
	for _, bm := range benchMeshes {
		b.Run(bm.name, func(b *testing.B) {
			st := settle(b, bm.file(b))
			want := compose.Node(st.inMemory(b), bm.node, st.now)
			checkSteady(b, want, st.expectedNeeds(b, bm))
			_, js := bustest.Connect(b, st.server, "naive-seat")
			kv := &keyByKey{ctx: st.ctx, js: js, buckets: map[string]jetstream.KeyValue{}}
			res := compose.Node(kv, bm.node, st.now)
			if kv.err != nil {
				b.Fatal(kv.err)
			}
			checkSteady(b, res, neededKeys(want))
			if !reflect.DeepEqual(res.Needed, want.Needed) || !slices.Equal(res.Requires, want.Requires) {
				b.Fatalf("key by key, %s composes to needs %v requiring %v; in memory to %v requiring %v",
					bm.node, res.Needed, res.Requires, want.Needed, want.Requires)
			}
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				sink = compose.Node(kv, bm.node, st.now)
			}
			cpu.report(b)
			if kv.err != nil {
				b.Fatal(kv.err)
			}
			b.ReportMetric(float64(len(res.Needed)), "keys")
		})
	}
}

// keyByKey is a compose.State that reads the bus on every call: one Get
// per key, a key listing where a composition asks for a node's or a
// module's keys, and every manifest decoded at each read (a naive seat
// keeps no cache). Bucket handles are kept, as any client keeps its
// connection. The first error of the bus is kept in err.
type keyByKey struct {
	ctx     context.Context
	js      jetstream.JetStream
	buckets map[string]jetstream.KeyValue
	err     error
}

func (s *keyByKey) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// kv returns the bucket's handle, or nil when the bucket does not exist.
func (s *keyByKey) kv(bucket string) jetstream.KeyValue {
	if kv, ok := s.buckets[bucket]; ok {
		return kv
	}
	kv, err := s.js.KeyValue(s.ctx, bucket)
	if err != nil {
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			s.fail(fmt.Errorf("bucket %s: %w", bucket, err))
		}
		return nil
	}
	s.buckets[bucket] = kv
	return kv
}

// get returns the value at key, or nil when there is none.
func (s *keyByKey) get(bucket, key string) []byte {
	kv := s.kv(bucket)
	if kv == nil {
		return nil
	}
	e, err := kv.Get(s.ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		s.fail(fmt.Errorf("get %s %s: %w", bucket, key, err))
		return nil
	}
	return e.Value()
}

// decode decodes the value at key into v and reports whether there is a
// value; a value that does not decode is returned as the error.
func (s *keyByKey) decode(bucket, key string, v any) (bool, error) {
	b := s.get(bucket, key)
	if b == nil {
		return false, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("%s %s: %w", bucket, key, err)
	}
	return true, nil
}

// mustDecode is decode for the values whose State method returns no error:
// one that does not decode counts as missing and is kept in err.
func (s *keyByKey) mustDecode(bucket, key string, v any) bool {
	ok, err := s.decode(bucket, key, v)
	if err != nil {
		s.fail(err)
		return false
	}
	return ok
}

// keys lists the keys of bucket that match filter ("" for all), sorted.
func (s *keyByKey) keys(bucket, filter string) []string {
	kv := s.kv(bucket)
	if kv == nil {
		return nil
	}
	var lister jetstream.KeyLister
	var err error
	if filter == "" {
		lister, err = kv.ListKeys(s.ctx)
	} else {
		lister, err = kv.ListKeysFiltered(s.ctx, filter)
	}
	if err != nil {
		s.fail(fmt.Errorf("list %s %s: %w", bucket, filter, err))
		return nil
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Compact(keys)
}

func (s *keyByKey) Placed(node string) ([]string, error) {
	var p mesh.Placement
	if ok, err := s.decode(mesh.PlacementBucket, node, &p); !ok || err != nil {
		return nil, err
	}
	modules := make([]string, 0, len(p.Modules))
	for _, pm := range p.Modules {
		modules = append(modules, pm.Module)
	}
	return modules, nil
}

func (s *keyByKey) NodesOf(module string) []string {
	var nodes []string
	for _, node := range s.keys(mesh.PlacementBucket, "") {
		modules, err := s.Placed(node)
		if err == nil && slices.Contains(modules, module) {
			nodes = append(nodes, node)
		}
	}
	return nodes
}

func (s *keyByKey) Want(node, module string) (string, bool, error) {
	var w mesh.Want
	ok, err := s.decode(mesh.WantsBucket, mesh.WantKey{Node: node, Module: module}.String(), &w)
	if !ok || err != nil || w.Removed {
		return "", false, err
	}
	return w.Fingerprint, true, nil
}

func (s *keyByKey) Have(node, module string) (mesh.Have, bool, error) {
	var h mesh.Have
	ok, err := s.decode(mesh.HaveBucket, mesh.HaveKey{Node: node, Module: module}.String(), &h)
	if err != nil {
		return mesh.Have{}, false, err
	}
	return h, ok, nil
}

func (s *keyByKey) Build(module, fp string) (mesh.Build, bool) {
	var b mesh.Build
	if !s.mustDecode(mesh.BuildsBucket, mesh.BuildKey{Module: module, Fingerprint: fp}.String(), &b) {
		return mesh.Build{}, false
	}
	b.Module, b.Fingerprint = module, fp
	return b, true
}

func (s *keyByKey) Newest(module string) (mesh.Build, bool) {
	var best mesh.Build
	found := false
	for _, key := range s.keys(mesh.BuildsBucket, module+".*") {
		k, err := mesh.ParseBuildKey(key)
		if err != nil {
			continue
		}
		b, ok := s.Build(k.Module, k.Fingerprint)
		if ok && (!found || b.At.After(best.At) || b.At.Equal(best.At) && b.Fingerprint > best.Fingerprint) {
			best, found = b, true
		}
	}
	return best, found
}

func (s *keyByKey) Trunk(module string) (string, bool) {
	var r mesh.ModuleRecord
	if !s.mustDecode(mesh.ModulesBucket, module, &r) {
		return "", false
	}
	return r.Manifest, true
}

func (s *keyByKey) Manifest(digest string) (*mesh.Manifest, error) {
	var r mesh.ManifestRecord
	ok, err := s.decode(mesh.ManifestsBucket, mesh.ManifestKey(digest), &r)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, compose.ErrNoManifest
	}
	if got := mesh.Digest([]byte(r.JSON)); got != digest {
		return nil, fmt.Errorf("its text has digest %s", got)
	}
	return mesh.ParseManifest([]byte(r.JSON))
}

func (s *keyByKey) Entry(provider, key string) (mesh.Entry, bool, error) {
	var e mesh.Entry
	ok, err := s.decode(mesh.BoundBucket(provider), key, &e)
	if err != nil {
		return mesh.Entry{}, false, err
	}
	return e, ok, nil
}

// Lost knows no lost entry: a key read alone has no past.
func (s *keyByKey) Lost(provider, key string) (mesh.Entry, bool) { return mesh.Entry{}, false }

func (s *keyByKey) Provision(key string) (mesh.Provision, bool) {
	var p mesh.Provision
	ok := s.mustDecode(mesh.ProvisionsBucket, key, &p)
	return p, ok
}

func (s *keyByKey) ProvisionsOf(node string) []string {
	return s.keys(mesh.ProvisionsBucket, node+".>")
}

func (s *keyByKey) DependentsOf(key string) []string {
	var out []string
	for _, k := range s.keys(mesh.ProvisionsBucket, "") {
		if p, ok := s.Provision(k); ok && slices.Contains(p.DependsOn, key) {
			out = append(out, k)
		}
	}
	return out
}

func (s *keyByKey) Plan(key string) ([]byte, bool) {
	b := s.get(mesh.PlansBucket, key)
	return b, b != nil
}

func (s *keyByKey) PlansOf(node string) []string { return s.keys(mesh.PlansBucket, node+".*") }

func (s *keyByKey) Refusal(key string) (mesh.Refusal, bool) {
	var r mesh.Refusal
	ok := s.mustDecode(mesh.RefusedBucket, key, &r)
	return r, ok
}

func (s *keyByKey) RefusalsOf(node string) []string { return s.keys(mesh.RefusedBucket, node+".*") }

func (s *keyByKey) Record(id string) (mesh.Record, bool) {
	var r mesh.Record
	ok := s.mustDecode(mesh.RecordsBucket, id, &r)
	return r, ok
}

var _ compose.State = (*keyByKey)(nil)
