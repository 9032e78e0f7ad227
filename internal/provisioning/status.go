package provisioning

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// StatusStates are the provision states the status answer counts.
var StatusStates = []mesh.State{mesh.Provided, mesh.Asked, mesh.Waits, mesh.Failed, mesh.Retiring}

// StatusBuckets are the buckets the status answer counts from: the
// placement (a node placed with nothing else is a row too), the plans,
// the provisions and the refusals. Only their keys are kept, and each
// provision's state.
var StatusBuckets = []string{mesh.PlacementBucket, mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket}

// StatusPage is how many nodes one status answer holds at most: a node's
// entry is some 100 bytes, so a page stays far below NATS's default max
// payload of 1 MiB. Reply.Next names where the next page starts.
const StatusPage = 1000

// NodeStatus is the value of one node's entry (key the node's name) in
// the status answer: the count of its plans, of its provisions per state
// (by the state's name; a state with none is left out), of its provision
// keys whose value does not decode or names no state of
// [StatusStates] (Odd), and its held modules (the module tokens of its
// refusals, sorted).
type NodeStatus struct {
	Plans  int            `json:"plans"`
	States map[string]int `json:"states"`
	Odd    int            `json:"odd,omitempty"`
	Held   []string       `json:"held"`
}

// tally holds the status answer's counts, kept current change by change:
// a request reads the counts, never the buckets.
type tally struct {
	mu    sync.Mutex
	nodes map[string]*nodeTally
	plans map[string]string   // plan key → its node
	provs map[string]provHead // provision key → its node and state
	held  map[string]mesh.RefusalKey
	heads jsonhead.HeadReader
	ready chan struct{}
}

// provHead is what the tally keeps of one provision: its node and state
// ("" for a value that does not decode or names no known state).
type provHead struct {
	node  string
	state mesh.State
}

type nodeTally struct {
	placed bool
	plans  int
	states map[mesh.State]int
	odd    int
	held   map[string]bool
}

func newTally() *tally {
	return &tally{nodes: map[string]*nodeTally{}, plans: map[string]string{}, provs: map[string]provHead{},
		held: map[string]mesh.RefusalKey{}, ready: make(chan struct{})}
}

// followTally starts a tally kept current from the watched copies of
// [StatusBuckets] until ctx is done. Its Ready is closed once every copy
// holds its bucket's keys.
func followTally(ctx context.Context, f *follower) *tally {
	t := newTally()
	var copies []*bus.Copy
	for _, b := range StatusBuckets {
		opts := bus.Options{Log: f.log, RevisionsOnly: true, Create: b != mesh.PlacementBucket,
			OnChange: func(ch bus.Change) { t.change(ch.Bucket, ch.Key, ch.Value, ch.Deleted) }}
		copies = append(copies, bus.Follow(ctx, f.js, b, opts))
	}
	go func() {
		for _, c := range copies {
			select {
			case <-c.Ready():
			case <-ctx.Done():
				return
			}
		}
		close(t.ready)
	}()
	return t
}

// Ready is closed once the tally counts every key of its buckets.
func (t *tally) Ready() <-chan struct{} { return t.ready }

func (t *tally) node(n string) *nodeTally {
	nt := t.nodes[n]
	if nt == nil {
		nt = &nodeTally{states: map[mesh.State]int{}, held: map[string]bool{}}
		t.nodes[n] = nt
	}
	return nt
}

// drop forgets node n once nothing is counted for it.
func (t *tally) drop(n string) {
	nt := t.nodes[n]
	if nt != nil && !nt.placed && nt.plans == 0 && nt.odd == 0 && len(nt.states) == 0 && len(nt.held) == 0 {
		delete(t.nodes, n)
	}
}

// nodeOf is a key's first token, the node of every key of the counted
// buckets.
func nodeOf(key string) string {
	n, _, _ := strings.Cut(key, ".")
	return n
}

// change takes one change of bucket's key into the counts: the key's old
// count is undone, then its new one (none for a delete) is done.
func (t *tally) change(bucket, key string, value []byte, deleted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch bucket {
	case mesh.PlacementBucket:
		t.node(key).placed = !deleted
		t.drop(key)
	case mesh.PlansBucket:
		if _, ok := t.plans[key]; ok == deleted {
			n := nodeOf(key)
			if deleted {
				delete(t.plans, key)
				t.node(n).plans--
				t.drop(n)
			} else {
				t.plans[key] = n
				t.node(n).plans++
			}
		}
	case mesh.ProvisionsBucket:
		if old, ok := t.provs[key]; ok {
			nt := t.node(old.node)
			if old.state == "" {
				nt.odd--
			} else if nt.states[old.state]--; nt.states[old.state] == 0 {
				delete(nt.states, old.state)
			}
			delete(t.provs, key)
			t.drop(old.node)
		}
		if deleted {
			return
		}
		h := provHead{node: nodeOf(key), state: t.stateOf(value)}
		t.provs[key] = h
		if nt := t.node(h.node); h.state == "" {
			nt.odd++
		} else {
			nt.states[h.state]++
		}
	case mesh.RefusedBucket:
		k, err := mesh.ParseRefusalKey(key)
		if err != nil {
			return // not a refusal: no module is held by it
		}
		if deleted {
			delete(t.held, key)
			delete(t.node(k.Node).held, k.Module)
			t.drop(k.Node)
			return
		}
		t.held[key] = k
		t.node(k.Node).held[k.Module] = true
	}
}

// stateOf is a provision value's state, or "" when the value does not
// decode or names no state of [StatusStates].
func (t *tally) stateOf(v []byte) mesh.State {
	h, err := t.heads.Read(v, jsonhead.HeadState, nil)
	if err != nil {
		var p mesh.Provision
		if jsonhead.Decode(v, &p) != nil {
			return ""
		}
		h.State = p.State
	}
	for _, s := range StatusStates {
		if h.State == s {
			return s
		}
	}
	return ""
}

// answer is the status answer of req: one entry per node (only req.Node
// when set), sorted, from the first node after req.After, at most
// [StatusPage] of them; Next is the last node's name when more follow.
func (t *tally) answer(req Request) Reply {
	reply := Reply{What: WhatStatus, Entries: []Entry{}, Odd: []Odd{}}
	t.mu.Lock()
	defer t.mu.Unlock()
	var names []string
	if req.Node != "" {
		if _, ok := t.nodes[req.Node]; ok || req.After == "" {
			names = append(names, req.Node)
		}
	} else {
		for n := range t.nodes {
			if n > req.After {
				names = append(names, n)
			}
		}
		sort.Strings(names)
	}
	if len(names) > StatusPage {
		names = names[:StatusPage]
		reply.Next = names[len(names)-1]
	}
	for _, n := range names {
		ns := NodeStatus{States: map[string]int{}, Held: []string{}}
		if nt := t.nodes[n]; nt != nil {
			ns.Plans, ns.Odd = nt.plans, nt.odd
			for s, c := range nt.states {
				ns.States[string(s)] = c
			}
			for m := range nt.held {
				ns.Held = append(ns.Held, m)
			}
			sort.Strings(ns.Held)
		}
		b, _ := json.Marshal(ns) // plain counts and strings always encode
		reply.Entries = append(reply.Entries, Entry{Key: n, Value: b})
	}
	return reply
}

// status answers req from the buckets in src, counted afresh: the pure
// step of what the verb answers from its kept tally.
func status(req Request, src Sources) Reply {
	t := newTally()
	for _, b := range StatusBuckets {
		each(src[b], func(key string, value []byte) { t.change(b, key, value, false) })
	}
	return t.answer(req)
}
