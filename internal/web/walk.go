package web

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/internal/why"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// walkState is the [compose.State] a key's why walk reads: the
// provisions, refusals, ask records and which nodes have a plan of a
// module from the page's own state (it follows them), everything else
// (entries, haves, wants, modules, manifests, builds, a plan's value) from
// the bus, by key ([busReads]): a walk costs the keys it passes, not the
// mesh.
type walkState struct {
	*busReads
	p *Page
}

// NodesOf returns the nodes that have a plan of module or hold it: the
// nodes the seat composed it on, which are those it is placed on (the
// seat writes a plan or a refusal for every placed module).
func (w walkState) NodesOf(module string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	nodes := keySet{}
	for n := range w.p.idx.planned[module] {
		nodes[n] = struct{}{}
	}
	for _, r := range w.p.refusals {
		if r.Module == module {
			nodes[r.Node] = struct{}{}
		}
	}
	return nodes.sorted()
}

func (w walkState) PlansOf(node string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	var out []string
	for _, mod := range w.p.idx.plansOf[node].sorted() {
		out = append(out, mesh.NodeModule{Node: node, Module: mod}.String())
	}
	return out
}

// Records calls f with every ask record the page holds.
func (w walkState) Records(f func(id string, r mesh.Record)) {
	w.p.mu.Lock()
	recs := make(map[string]mesh.Record, len(w.p.records))
	for id, r := range w.p.records {
		recs[id] = r
	}
	w.p.mu.Unlock()
	for id, r := range recs {
		f(id, r)
	}
}

func (w walkState) Provision(key string) (mesh.Provision, bool) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	pv, ok := w.p.provs[key]
	return pv, ok
}

func (w walkState) ProvisionsOf(node string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.idx.consumes[node].sorted()
}

func (w walkState) DependentsOf(key string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	var out []string
	for k, pv := range w.p.provs {
		for _, d := range pv.DependsOn {
			if d == key {
				out = append(out, k)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func (w walkState) Refusal(key string) (mesh.Refusal, bool) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	r, ok := w.p.refusals[key]
	return r, ok
}

func (w walkState) RefusalsOf(node string) []string {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.idx.heldOf[node].sorted()
}

func (w walkState) Record(id string) (mesh.Record, bool) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	r, ok := w.p.records[id]
	return r, ok
}

// walkTimeout bounds the bus's reads of one walk.
const walkTimeout = 5 * time.Second

// walk walks key to the root cause of its state (internal/why), reading
// from the bus while ctx lasts. A read the bus failed is said as the
// walk's last step.
func (p *Page) walk(ctx context.Context, key string) ([]why.Step, error) {
	ctx, cancel := context.WithTimeout(ctx, walkTimeout)
	defer cancel()
	b := &busReads{ctx: ctx, js: p.cfg.JS, Mesh: state.New(), kvs: map[string]jetstream.KeyValue{}, got: map[string]bool{}}
	steps, err := why.Walk(walkState{busReads: b, p: p}, key)
	if b.err != nil {
		steps = append(steps, why.Step{What: "error", Says: "the walk may miss a step: " + b.err.Error()})
	}
	return steps, err
}

// busReads is a [compose.State] that reads each key from the bus the first
// time it is asked for (a get by key) into a [state.Mesh], the seat's own
// reader, so that a key reads as the seat reads it. It is for one walk.
type busReads struct {
	*state.Mesh
	ctx context.Context
	js  jetstream.JetStream
	kvs map[string]jetstream.KeyValue // nil for a bucket that does not exist
	got map[string]bool               // "<bucket> <key>" read
	err error                         // the first read that failed
}

var _ compose.State = walkState{}

// get reads key of bucket once.
func (b *busReads) get(bucket, key string) {
	id := bucket + " " + key
	if b.got[id] || b.js == nil {
		return
	}
	b.got[id] = true
	kv, ok := b.kvs[bucket]
	if !ok {
		var err error
		kv, err = b.js.KeyValue(b.ctx, bucket)
		if err != nil {
			kv = nil
			if !errors.Is(err, jetstream.ErrBucketNotFound) && b.err == nil {
				b.err = fmt.Errorf("bucket %s: %w", bucket, err)
			}
		}
		b.kvs[bucket] = kv
	}
	if kv == nil {
		return
	}
	e, err := kv.Get(b.ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
	case err != nil:
		if b.err == nil {
			b.err = fmt.Errorf("get %s %s: %w", bucket, key, err)
		}
	default:
		b.Mesh.Take(bus.Change{Bucket: bucket, Key: key, Value: e.Value(), Revision: e.Revision()})
	}
}

func (b *busReads) Placed(node string) ([]string, error) {
	b.get(mesh.PlacementBucket, node)
	return b.Mesh.Placed(node)
}

func (b *busReads) Want(node, module string) (string, bool, error) {
	b.get(mesh.WantsBucket, mesh.WantKey{Node: node, Module: module}.String())
	return b.Mesh.Want(node, module)
}

func (b *busReads) Have(node, module string) (mesh.Have, bool, error) {
	b.get(mesh.HaveBucket, mesh.HaveKey{Node: node, Module: module}.String())
	return b.Mesh.Have(node, module)
}

func (b *busReads) Build(module, fp string) (mesh.Build, bool) {
	b.get(mesh.BuildsBucket, mesh.BuildKey{Module: module, Fingerprint: fp}.String())
	return b.Mesh.Build(module, fp)
}

func (b *busReads) Trunk(module string) (string, bool) {
	b.get(mesh.ModulesBucket, module)
	return b.Mesh.Trunk(module)
}

func (b *busReads) Manifest(digest string) (*mesh.Manifest, error) {
	b.get(mesh.ManifestsBucket, token.Escape(digest))
	return b.Mesh.Manifest(digest)
}

func (b *busReads) Entry(provider, key string) (mesh.Entry, bool, error) {
	b.get(mesh.BoundBucket(provider), key)
	return b.Mesh.Entry(provider, key)
}

// Lost is what a walk that read the entry once knows of it before a
// deletion: nothing (the bucket keeps no value under a delete marker).
func (b *busReads) Lost(provider, key string) (mesh.Entry, bool) {
	b.get(mesh.BoundBucket(provider), key)
	return b.Mesh.Lost(provider, key)
}

func (b *busReads) Plan(key string) ([]byte, bool) {
	b.get(mesh.PlansBucket, key)
	return b.Mesh.Plan(key)
}
