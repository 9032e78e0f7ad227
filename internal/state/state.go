// Package state holds the mesh in memory as the seat sees it: every bucket
// the seat reads, decoded once per change and indexed so that composing a
// node reads only what that node touches. [Mesh] implements
// [compose.State], and [Mesh.Take] says what each change touches: which
// nodes to compose and which keys to re-judge.
//
// A Mesh is not safe for concurrent use: the seat's loop owns it.
package state

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/intern"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

type set map[string]struct{}

func (s set) add(k string) { s[k] = struct{}{} }

func (s set) sorted() []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func addTo(m map[string]set, k, v string) {
	s := m[k]
	if s == nil {
		s = set{}
		m[k] = s
	}
	s.add(v)
}

// few is a set of strings kept for many keys where most sets hold one
// member (the nodes whose composition needs a key, the keys that depend on
// a key): the first member inline, a map only for the others. Members are
// never empty; one is empty only in an empty set.
type few struct {
	one  string
	more set
}

func (f *few) add(v string) {
	if f.one == "" || f.one == v {
		f.one = v
		return
	}
	if f.more == nil {
		f.more = set{}
	}
	f.more.add(v)
}

func (f *few) remove(v string) {
	if f.one == v {
		f.one = ""
		for k := range f.more {
			f.one = k
			delete(f.more, k)
			break
		}
	} else {
		delete(f.more, v)
	}
	if len(f.more) == 0 {
		f.more = nil
	}
}

func (f few) sorted() []string {
	if f.one == "" {
		return nil
	}
	out := make([]string, 0, 1+len(f.more))
	out = append(out, f.one)
	for k := range f.more {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func addToFew(m map[string]few, k, v string) {
	f := m[k]
	f.add(v)
	m[k] = f
}

func removeFromFew(m map[string]few, k, v string) {
	f, ok := m[k]
	if !ok {
		return
	}
	f.remove(v)
	if f.one == "" {
		delete(m, k)
		return
	}
	m[k] = f
}

func removeFrom(m map[string]set, k, v string) {
	if s := m[k]; s != nil {
		delete(s, v)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}

// addSorted puts v into the sorted keys of k, once: keys that compositions
// read sorted are kept sorted, not sorted at each read.
func addSorted(m map[string][]string, k, v string) {
	s := m[k]
	if i, found := slices.BinarySearch(s, v); !found {
		m[k] = slices.Insert(s, i, v)
	}
}

// removeSorted takes v out of the sorted keys of k.
func removeSorted(m map[string][]string, k, v string) {
	s := m[k]
	i, found := slices.BinarySearch(s, v)
	if !found {
		return
	}
	if len(s) == 1 {
		delete(m, k)
		return
	}
	m[k] = slices.Delete(s, i, i+1)
}

type placed struct {
	modules []string
	err     error
}

type want struct {
	fp  string
	err error
}

type have struct {
	h   mesh.Have
	err error
}

type entry struct {
	e   mesh.Entry
	err error
}

type manifest struct {
	m   *mesh.Manifest
	err error
}

// Mesh is the seat's view of the mesh. The zero value is not usable: call
// [New].
type Mesh struct {
	placement map[string]placed          // node -> placement
	nodesOf   map[string][]string        // module -> sorted nodes it is placed on
	wants     map[string]map[string]want // node -> module -> want
	haves     map[string]map[string]have // node -> module -> have
	builds    map[string]map[string]mesh.Build
	newest    map[string]mesh.Build
	trunk     map[string]string // module -> digest
	manifests map[string]manifest
	texts     map[string]string // digest -> raw JSON text (decoded lazily)
	usedBy    map[string]set    // digest -> modules whose build or trunk names it
	entries   map[string]map[string]entry
	// lost holds, per provider, the last entry of each key the seat keeps a
	// provision at whose entry was deleted or purged since: what it said
	// last (see [Mesh.Lost]).
	lost map[string]map[string]mesh.Entry

	provisions map[string]kept     // key -> the provision kept there
	provByNode map[string][]string // node -> its provision keys, sorted
	dependents map[string]few      // key -> keys whose depends-on names it
	approved   map[mesh.Ref]set    // provider -> retiring keys asked or approved, waiting for it: re-judged when it comes or goes

	plans      map[string][]byte
	plansOf    map[string][]string // node -> its plan keys, sorted
	refusals   map[string]mesh.Refusal
	refusalsOf map[string][]string // node -> its refusal keys, sorted

	// What the last composition of each node found.
	needed map[string][]need // node -> what it needs, by key
	// needers holds, for a key that the composition of a node other than
	// its own needs (a shared credential, on its provider's node), those
	// nodes; a key its own node's composition needs is found in
	// needed[its node] (most keys: an entry per key here was the largest
	// index of the seat).
	needers    map[string]few      // key -> other nodes whose composition needs it
	byProvider map[mesh.Ref]set    // provider -> needed keys it answers
	requires   map[string][]string // node -> modules its modules require
	consumers  map[string]set      // module -> nodes that require it

	// revs holds, per bucket the seat alone writes (plans, provisions,
	// refused), the revision of the last change taken at each key (a
	// delete's too): what a conditional write of the key expects.
	revs map[string]map[string]uint64
	// junk holds, per such bucket, the keys whose value is not of its kind
	// (or whose key is out of shape), with that value's revision.
	junk map[string]map[string]uint64

	records map[string]mesh.Record // ask id -> the router's record
	askedBy map[string]string      // ask id -> the provision key that names it

	bound set // providers whose bound bucket is followed

	// provision and entry are what a provision's or an entry's value is
	// decoded into, zero between changes: a value decoded into a local
	// variable (through an interface) made that variable an object per
	// change.
	provision mesh.Provision
	entry     mesh.Entry

	// names keeps one copy of the names and texts that repeat across keys
	// (the providers' nodes and modules and the whys of provisions; the
	// modules of placements; the fingerprints of wants; the phases,
	// healths, fingerprints and details of haves; the states and whys of
	// entries), which JSON decodes into strings of their own.
	names intern.Table
}

// New returns an empty Mesh.
func New() *Mesh {
	return &Mesh{
		placement:  map[string]placed{},
		nodesOf:    map[string][]string{},
		wants:      map[string]map[string]want{},
		haves:      map[string]map[string]have{},
		builds:     map[string]map[string]mesh.Build{},
		newest:     map[string]mesh.Build{},
		trunk:      map[string]string{},
		manifests:  map[string]manifest{},
		texts:      map[string]string{},
		usedBy:     map[string]set{},
		entries:    map[string]map[string]entry{},
		lost:       map[string]map[string]mesh.Entry{},
		provisions: map[string]kept{},
		provByNode: map[string][]string{},
		dependents: map[string]few{},
		approved:   map[mesh.Ref]set{},
		plans:      map[string][]byte{},
		plansOf:    map[string][]string{},
		refusals:   map[string]mesh.Refusal{},
		refusalsOf: map[string][]string{},
		needed:     map[string][]need{},
		needers:    map[string]few{},
		byProvider: map[mesh.Ref]set{},
		requires:   map[string][]string{},
		consumers:  map[string]set{},
		revs:       map[string]map[string]uint64{},
		junk:       map[string]map[string]uint64{},
		records:    map[string]mesh.Record{},
		askedBy:    map[string]string{},
		bound:      set{},
	}
}

// Touch is what one change touches.
type Touch struct {
	// Nodes to compose.
	Nodes []string
	// Keys to re-judge without composing.
	Keys []string
	// Bound lists providers newly found to keep entries: the seat follows
	// their <provider>_bound buckets.
	Bound []string
	// Odd, when set, says why the change's key or value is out of shape; the
	// change was taken as far as it could be (a value that does not decode
	// is kept as such, so that compositions can say why).
	Odd error
	// Junk is set when the change put a value that is not of its kind (or
	// a key out of shape) into a bucket the seat alone writes (plans,
	// provisions, refused): the value is taken as absent, and the seat
	// deletes it unless a composition writes the key anew (see
	// [Mesh.Junk]).
	Junk bool
}

func (t *Touch) nodes(ns ...string) { t.Nodes = append(t.Nodes, ns...) }

// ErrOdd is wrapped by every Touch.Odd.
var ErrOdd = errors.New("state: odd change")

func odd(ch bus.Change, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s: %s", ErrOdd, ch.Bucket, ch.Key, fmt.Sprintf(format, args...))
}

// Take takes one change of a followed bucket into the mesh and returns what
// it touches.
func (m *Mesh) Take(ch bus.Change) Touch {
	var t Touch
	switch {
	case ch.Bucket == mesh.PlacementBucket:
		m.takePlacement(ch, &t)
	case ch.Bucket == mesh.WantsBucket:
		m.takeWant(ch, &t)
	case ch.Bucket == mesh.HaveBucket:
		m.takeHave(ch, &t)
	case ch.Bucket == mesh.BuildsBucket:
		m.takeBuild(ch, &t)
	case ch.Bucket == mesh.ModulesBucket:
		m.takeModule(ch, &t)
	case ch.Bucket == mesh.ManifestsBucket:
		m.takeManifest(ch, &t)
	case ch.Bucket == mesh.ProvisionsBucket:
		m.takeOwn(ch, &t, func() { m.takeProvision(ch, nil, &t) })
	case ch.Bucket == mesh.PlansBucket:
		m.takeOwn(ch, &t, func() { m.takePlan(ch, nil, &t) })
	case ch.Bucket == mesh.RefusedBucket:
		m.takeOwn(ch, &t, func() { m.takeRefusal(ch, nil, &t) })
	case ch.Bucket == mesh.RecordsBucket:
		m.takeRecord(ch, &t)
	case strings.HasSuffix(ch.Bucket, "_bound"):
		m.takeEntry(ch, &t)
	default:
		t.Odd = odd(ch, "not a bucket the seat follows")
	}
	return t
}

// takeOwn takes ch, a change of a bucket the seat alone writes, with take:
// its revision is noted, then take takes it, then it is noted as junk or
// not.
func (m *Mesh) takeOwn(ch bus.Change, t *Touch, take func()) {
	m.noteRevision(ch)
	take()
	m.noteJunk(ch, t)
}

// The seat takes each of its own puts into its mesh when it publishes it
// (and takes back the value it held when the bus refuses the put). The put
// methods below take such a value as it was before it was encoded, and do
// what [Mesh.Take] does with the put's change (the same code, without the
// decoding): a put whose key or value is out of shape is odd and junk
// there as here. The value must be one that JSON gives back as it is: its
// strings valid UTF-8, its times in UTC within the years 0 to 9999 (the
// seat's own values are; the decoding path would change the others).

// PutProvision takes a put of p at key of [mesh.ProvisionsBucket] that
// expects revision rev, as [Mesh.Take] takes the change of that put
// (Revision rev, Value the JSON of p), and returns what it touches. p's
// lists and pointers are kept, never changed: the caller must not change
// them either.
func (m *Mesh) PutProvision(key string, p mesh.Provision, rev uint64) Touch {
	var t Touch
	ch := bus.Change{Bucket: mesh.ProvisionsBucket, Key: key, Revision: rev}
	m.takeOwn(ch, &t, func() { m.takeProvision(ch, &p, &t) })
	return t
}

// Left returns the keys that the provision kept at key depends on and p no
// longer does, sorted (none when no provision is kept at key). Each is to
// be judged again, since a retiring key waits for the keys that depend on
// it; and a key of another node is to have its node composed again, since
// a shared credential on its provider's node is kept needed while a
// provision of another node depends on it.
func (m *Mesh) Left(key string, p mesh.Provision) []string {
	old, ok := m.provisions[key]
	if !ok {
		return nil
	}
	var keys []string
	for _, d := range old.dependsOn {
		if !slices.Contains(p.DependsOn, d) {
			keys = append(keys, d)
		}
	}
	slices.Sort(keys)
	return keys
}

// PutPlan takes a put of value at key of [mesh.PlansBucket] that expects
// revision rev, as [Mesh.Take] takes the change of that put, and returns
// what it touches. value must be the JSON of a [mesh.Plan] whose node and
// module are those of names (what Take reads of a plan besides its bytes);
// it is kept, never changed: the caller must not change it either.
func (m *Mesh) PutPlan(key string, value []byte, names mesh.NodeModule, rev uint64) Touch {
	var t Touch
	ch := bus.Change{Bucket: mesh.PlansBucket, Key: key, Value: value, Revision: rev}
	m.takeOwn(ch, &t, func() { m.takePlan(ch, &names, &t) })
	return t
}

// PutRefusal takes a put of r at key of [mesh.RefusedBucket] that expects
// revision rev, as [Mesh.Take] takes the change of that put (Revision rev,
// Value the JSON of r), and returns what it touches.
func (m *Mesh) PutRefusal(key string, r mesh.Refusal, rev uint64) Touch {
	var t Touch
	ch := bus.Change{Bucket: mesh.RefusedBucket, Key: key, Revision: rev}
	m.takeOwn(ch, &t, func() { m.takeRefusal(ch, &r, &t) })
	return t
}

// noteRevision keeps the revision of a change of a bucket the seat alone
// writes.
func (m *Mesh) noteRevision(ch bus.Change) {
	r := m.revs[ch.Bucket]
	if r == nil {
		r = map[string]uint64{}
		m.revs[ch.Bucket] = r
	}
	r[ch.Key] = ch.Revision
}

// noteJunk keeps (or forgets) the change's key as junk: a put the take
// found odd is junk, anything else is not.
func (m *Mesh) noteJunk(ch bus.Change, t *Touch) {
	j := m.junk[ch.Bucket]
	if t.Odd != nil && !ch.Deleted {
		if j == nil {
			j = map[string]uint64{}
			m.junk[ch.Bucket] = j
		}
		j[ch.Key] = ch.Revision
		t.Junk = true
		return
	}
	delete(j, ch.Key)
}

// Wrote notes rev as the revision of key of bucket (plans, provisions or
// refused) once the seat's own write of it is acknowledged: the mesh took
// the written value when it was published (with the revision it expected),
// and the key's next conditional write expects rev.
func (m *Mesh) Wrote(bucket, key string, rev uint64) {
	m.noteRevision(bus.Change{Bucket: bucket, Key: key, Revision: rev})
}

// Revision returns the revision (stream sequence) of the last change taken
// at key of bucket, one of the buckets the seat alone writes (plans,
// provisions, refused), a delete's included; 0 when none was taken. It is
// what a conditional write of the key expects to find.
func (m *Mesh) Revision(bucket, key string) uint64 { return m.revs[bucket][key] }

// Junk returns the revision of the value at key of bucket (plans,
// provisions or refused) that is not of its kind, or whose key is out of
// the bucket's shape, and whether there is one. Such a value is taken as
// absent: no composition reads it.
func (m *Mesh) Junk(bucket, key string) (uint64, bool) {
	r, ok := m.junk[bucket][key]
	return r, ok
}

// decode decodes ch's value into v, its names matched exactly (spec 2,
// [jsonhead.Decode]): a value with a name in another case ("STATE") is odd
// as one that does not decode is. It is how the seat reads what it alone
// writes (plans, provisions, refused): such a value is not its own.
func decode(ch bus.Change, v any) error {
	if err := jsonhead.Decode(ch.Value, v); err != nil {
		var name *jsonhead.NameError
		if errors.As(err, &name) {
			return odd(ch, "value not as written by the seat: %v", err)
		}
		return odd(ch, "value does not decode: %v", err)
	}
	return nil
}

// read decodes ch's value into v, its names matched exactly, as the seat
// reads what others write: a name in another case is left unread (as any
// name not the spec's), and the change is odd (t.Odd) but the value read;
// the error returned is a value that does not decode.
func read(ch bus.Change, v any, t *Touch) error {
	err := jsonhead.Decode(ch.Value, v)
	var name *jsonhead.NameError
	if errors.As(err, &name) {
		t.Odd = odd(ch, "value read without that name: %v", err)
		return nil
	}
	if err != nil {
		return odd(ch, "value does not decode: %v", err)
	}
	return nil
}

func (m *Mesh) takePlacement(ch bus.Change, t *Touch) {
	node := ch.Key
	if !mesh.ValidName(node) {
		t.Odd = odd(ch, "node %q is not a valid name", node)
		return
	}
	old := m.placement[node]
	var now placed
	if !ch.Deleted {
		var p mesh.Placement
		if err := read(ch, &p, t); err != nil {
			t.Odd = err
			now = placed{modules: old.modules, err: err}
		} else {
			now.modules = m.placedModules(ch, p.Modules, t)
		}
	}
	if ch.Deleted {
		delete(m.placement, node)
	} else {
		m.placement[node] = now
	}
	t.nodes(node)
	// Modules that came or went: their consumers resolve providers anew.
	changed := set{}
	for _, mod := range old.modules {
		if !slices.Contains(now.modules, mod) {
			changed.add(mod)
		}
	}
	for _, mod := range now.modules {
		if !slices.Contains(old.modules, mod) {
			changed.add(mod)
		}
	}
	for mod := range changed {
		m.reindexNodesOf(mod, node, slices.Contains(now.modules, mod))
		for n := range m.consumers[mod] {
			t.nodes(n)
		}
		t.Keys = append(t.Keys, m.approved[mesh.Ref{Module: mod, Node: node}].sorted()...)
	}
}

// placedModules returns the names of a placement's modules. A module
// that is not a valid name is odd (t.Odd, beside any odd name of the
// value): one with no name (an item whose "module" is "" or missing, as
// {"MODULE":"x"} reads) is left out, as no key token can name it (its
// refusal key would be "<node>."); one with a name is kept, and
// composition holds it with a why in its refusal (the module's token
// escaped, spec 2).
func (m *Mesh) placedModules(ch bus.Change, items []mesh.PlacedModule, t *Touch) []string {
	modules := make([]string, 0, len(items))
	var bad []string
	for i, pm := range items {
		switch {
		case pm.Module == "":
			bad = append(bad, fmt.Sprintf("item %d has no module name: left out", i))
			continue
		case !mesh.ValidName(pm.Module):
			bad = append(bad, fmt.Sprintf("item %d: module %q is not a valid name: held", i, pm.Module))
		}
		modules = append(modules, m.names.String(pm.Module))
	}
	if len(bad) == 0 {
		return modules
	}
	why := strings.Join(bad, "; ")
	if t.Odd != nil {
		t.Odd = fmt.Errorf("%w; %s", t.Odd, why) // and an odd name of the value
	} else {
		t.Odd = odd(ch, "%s", why)
	}
	return modules
}

// reindexNodesOf puts node into the sorted nodes of mod, or takes it out,
// as placed says: one binary search, not a scan of every placement (a
// scan per placement made a fresh start quadratic in the nodes).
func (m *Mesh) reindexNodesOf(mod, node string, placed bool) {
	nodes := m.nodesOf[mod]
	i, found := slices.BinarySearch(nodes, node)
	switch {
	case placed && !found:
		m.nodesOf[mod] = slices.Insert(nodes, i, node)
	case !placed && found:
		nodes = slices.Delete(nodes, i, i+1)
		if len(nodes) == 0 {
			delete(m.nodesOf, mod)
			return
		}
		m.nodesOf[mod] = nodes
	}
}

func (m *Mesh) takeWant(ch bus.Change, t *Touch) {
	k, err := mesh.ParseWantKey(ch.Key)
	if err != nil {
		t.Odd = odd(ch, "%v", err)
		return
	}
	if ch.Deleted {
		if w := m.wants[k.Node]; w != nil {
			delete(w, k.Module)
		}
	} else {
		var w mesh.Want
		v := want{}
		if err := read(ch, &w, t); err != nil {
			t.Odd, v.err = err, err
		} else if !w.Removed {
			v.fp = m.names.String(w.Fingerprint)
		}
		if w.Removed && v.err == nil {
			if ws := m.wants[k.Node]; ws != nil {
				delete(ws, k.Module)
			}
		} else {
			if m.wants[k.Node] == nil {
				m.wants[k.Node] = map[string]want{}
			}
			m.wants[k.Node][k.Module] = v
		}
	}
	t.nodes(k.Node)
	t.Keys = append(t.Keys, m.byProvider[mesh.Ref{Module: k.Module, Node: k.Node}].sorted()...)
}

func (m *Mesh) takeHave(ch bus.Change, t *Touch) {
	k, err := mesh.ParseHaveKey(ch.Key)
	if err != nil {
		t.Odd = odd(ch, "%v", err)
		return
	}
	if k.Module == "" {
		return // the node's own have: not read by composition
	}
	old, hadOld := m.haves[k.Node][k.Module]
	if ch.Deleted {
		if h := m.haves[k.Node]; h != nil {
			delete(h, k.Module)
		}
	} else {
		v := have{}
		if err := read(ch, &v.h, t); err != nil {
			t.Odd, v.err = err, err
		}
		// The closed sets are interned; the detail is free text, most often
		// the have's own, kept as decoded.
		v.h.Phase, v.h.Health = m.names.String(v.h.Phase), m.names.String(v.h.Health)
		v.h.Fingerprint, v.h.WrittenBy = m.names.String(v.h.Fingerprint), m.names.String(v.h.WrittenBy)
		if m.haves[k.Node] == nil {
			m.haves[k.Node] = map[string]have{}
		}
		m.haves[k.Node][k.Module] = v
	}
	t.Keys = append(t.Keys, m.byProvider[mesh.Ref{Module: k.Module, Node: k.Node}].sorted()...)
	t.Keys = append(t.Keys, m.approved[mesh.Ref{Module: k.Module, Node: k.Node}].sorted()...)
	// A module with no want is composed at the build its have runs.
	if _, wanted := m.wants[k.Node][k.Module]; !wanted {
		now := m.haves[k.Node][k.Module]
		if !hadOld || old.h.Fingerprint != now.h.Fingerprint || ch.Deleted {
			t.nodes(k.Node)
		}
	}
}

func (m *Mesh) takeBuild(ch bus.Change, t *Touch) {
	k, err := mesh.ParseBuildKey(ch.Key)
	if err != nil {
		t.Odd = odd(ch, "%v", err)
		return
	}
	if ch.Deleted {
		delete(m.builds[k.Module], k.Fingerprint)
	} else {
		var b mesh.Build
		if err := read(ch, &b, t); err != nil {
			t.Odd = err
			return
		}
		b.Module, b.Fingerprint = k.Module, k.Fingerprint
		if m.builds[k.Module] == nil {
			m.builds[k.Module] = map[string]mesh.Build{}
		}
		m.builds[k.Module][k.Fingerprint] = b
		addTo(m.usedBy, b.Manifest, k.Module)
		m.noteManifest(b.Manifest, t)
	}
	m.renewNewest(k.Module)
	m.touchModule(k.Module, t)
}

func (m *Mesh) renewNewest(mod string) {
	var best mesh.Build
	found := false
	for _, b := range m.builds[mod] {
		if !found || b.At.After(best.At) || b.At.Equal(best.At) && b.Fingerprint > best.Fingerprint {
			best, found = b, true
		}
	}
	if found {
		m.newest[mod] = best
	} else {
		delete(m.newest, mod)
	}
}

// touchModule composes the nodes where mod is placed and those of its
// consumers.
func (m *Mesh) touchModule(mod string, t *Touch) {
	t.nodes(m.nodesOf[mod]...)
	for n := range m.consumers[mod] {
		t.nodes(n)
	}
}

func (m *Mesh) takeModule(ch bus.Change, t *Touch) {
	if !mesh.ValidName(ch.Key) {
		t.Odd = odd(ch, "module %q is not a valid name", ch.Key)
		return
	}
	if ch.Deleted {
		delete(m.trunk, ch.Key)
	} else {
		var r mesh.ModuleRecord
		if err := read(ch, &r, t); err != nil {
			t.Odd = err
			return
		}
		m.trunk[ch.Key] = r.Manifest
		addTo(m.usedBy, r.Manifest, ch.Key)
		m.noteManifest(r.Manifest, t)
	}
	m.touchModule(ch.Key, t)
}

func (m *Mesh) takeManifest(ch bus.Change, t *Touch) {
	digest, err := token.Unescape(ch.Key)
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		t.Odd = odd(ch, "key is not an escaped sha256 digest")
		return
	}
	delete(m.manifests, digest)
	if ch.Deleted {
		delete(m.texts, digest)
	} else {
		var r mesh.ManifestRecord
		if err := read(ch, &r, t); err != nil {
			t.Odd = err
			m.manifests[digest] = manifest{err: err}
		} else {
			m.texts[digest] = r.JSON
			m.noteManifest(digest, t)
			if mf := m.manifests[digest]; mf.err != nil {
				t.Odd = odd(ch, "%v", mf.err)
			}
		}
	}
	for mod := range m.usedBy[digest] {
		m.touchModule(mod, t)
	}
}

// noteManifest decodes a manifest once per digest and notes providers that
// keep entries.
func (m *Mesh) noteManifest(digest string, t *Touch) {
	mf, ok := m.manifests[digest]
	if !ok {
		text, has := m.texts[digest]
		if !has {
			return
		}
		if got := mesh.Digest([]byte(text)); got != digest {
			mf = manifest{err: fmt.Errorf("its text has digest %s", got)}
		} else if mf.m, mf.err = mesh.ParseManifest([]byte(text)); mf.err == nil {
			// ParseManifest (encoding/json) takes a name in another case
			// for the field's: the spec's names are exact.
			var name *jsonhead.NameError
			if err := jsonhead.Decode([]byte(text), new(mesh.Manifest)); errors.As(err, &name) {
				mf = manifest{err: fmt.Errorf("manifest: %w", err)}
			}
		}
		m.manifests[digest] = mf
	}
	if mf.m != nil && mf.m.KeepsEntries() {
		if _, ok := m.bound[mf.m.Module]; !ok {
			m.bound.add(mf.m.Module)
			t.Bound = append(t.Bound, mf.m.Module)
		}
	}
}

func (m *Mesh) takeEntry(ch bus.Change, t *Touch) {
	provider := strings.TrimSuffix(ch.Bucket, "_bound")
	if _, err := mesh.ParseProvisionKey(ch.Key); err != nil {
		t.Odd = odd(ch, "%v", err)
		return
	}
	if ch.Deleted {
		old, had := m.entries[provider][ch.Key]
		if _, kept := m.provisions[ch.Key]; kept && had && old.err == nil {
			if m.lost[provider] == nil {
				m.lost[provider] = map[string]mesh.Entry{}
			}
			m.lost[provider][ch.Key] = old.e
		}
		delete(m.entries[provider], ch.Key)
	} else {
		m.forgetLost(provider, ch.Key)
		v := entry{}
		err := read(ch, &m.entry, t)
		v.e, m.entry = m.entry, mesh.Entry{}
		if err != nil {
			t.Odd, v.err = err, err
		}
		// The state is interned; the whys (why, refused, waits) are free
		// text, most often the entry's own, kept as decoded.
		v.e.State = mesh.State(m.names.String(string(v.e.State)))
		if m.entries[provider] == nil {
			m.entries[provider] = map[string]entry{}
		}
		m.entries[provider][ch.Key] = v
	}
	t.Keys = append(t.Keys, ch.Key)
}

// forgetLost forgets the lost entry of provider at key.
func (m *Mesh) forgetLost(provider, key string) {
	if l, ok := m.lost[provider]; ok {
		delete(l, key)
		if len(l) == 0 {
			delete(m.lost, provider)
		}
	}
}

// takeProvision takes ch, a change of a provision key: put, the value of a
// put when the caller has it decoded, else the decoded ch.Value.
func (m *Mesh) takeProvision(ch bus.Change, put *mesh.Provision, t *Touch) {
	k, err := mesh.ParseProvisionKey(ch.Key)
	if err != nil {
		t.Odd = odd(ch, "%v", err)
		return
	}
	old, had := m.provisions[ch.Key]
	// The keys that depend on this one quote its state and why: when they
	// change (or the key comes or goes), they are judged again, whichever
	// node they are on (a shared credential's dependents are on its
	// consumers' nodes, not composed with the key's own).
	defer func() {
		now, has := m.provisions[ch.Key]
		if had != has || now.state != old.state || now.why != old.why {
			t.Keys = append(t.Keys, m.dependents[ch.Key].sorted()...)
		}
	}()
	if had {
		for _, d := range old.dependsOn {
			removeFromFew(m.dependents, d, ch.Key)
		}
		if old.ask != "" && m.askedBy[old.ask] == ch.Key {
			delete(m.askedBy, old.ask)
		}
		if s := m.approved[*old.provider]; s != nil {
			delete(s, ch.Key)
			if len(s) == 0 {
				delete(m.approved, *old.provider)
			}
		}
	}
	// Taken from the bus, this is another writer's change to what the seat
	// keeps: its node is composed again, so that the seat's word stands,
	// and so are the other nodes whose composition needs it (a shared
	// credential is needed by its consumers' nodes, not its own).
	t.nodes(k.Node)
	if f, ok := m.needers[ch.Key]; ok {
		t.nodes(f.sorted()...)
	}
	if ch.Deleted {
		delete(m.provisions, ch.Key)
		removeSorted(m.provByNode, k.Node, ch.Key)
		for provider := range m.lost {
			m.forgetLost(provider, ch.Key)
		}
		return
	}
	var p mesh.Provision
	if put != nil {
		p = decoded(*put)
	} else {
		err = decode(ch, &m.provision)
		p, m.provision = m.provision, mesh.Provision{}
	}
	if err == nil {
		err = checkProvision(ch, k, p)
	}
	if err != nil {
		// Taken as absent: a composition that needs the key writes it anew,
		// and the seat deletes it otherwise.
		t.Odd = err
		delete(m.provisions, ch.Key)
		removeSorted(m.provByNode, k.Node, ch.Key)
		return
	}
	m.provisions[ch.Key] = m.keep(p)
	addSorted(m.provByNode, k.Node, ch.Key)
	if p.Ask != "" {
		m.askedBy[p.Ask] = ch.Key
	}
	for _, d := range p.DependsOn {
		addToFew(m.dependents, d, ch.Key)
	}
	if p.State == mesh.Retiring && (p.Warrant != nil || p.Ask != "") {
		s := m.approved[p.Provider]
		if s == nil {
			s = set{}
			m.approved[p.Provider] = s
		}
		s.add(ch.Key)
	}
}

// decoded returns p as decoding its JSON gives it: an empty depends-on is
// left out of the JSON (nil when decoded), and the reference and warrant
// are the mesh's own copies.
func decoded(p mesh.Provision) mesh.Provision {
	if len(p.DependsOn) == 0 {
		p.DependsOn = nil
	}
	if p.Reference != nil {
		r := *p.Reference
		p.Reference = &r
	}
	if p.Warrant != nil {
		w := *p.Warrant
		p.Warrant = &w
	}
	return p
}

// checkProvision says why a decoded provision is not one the seat writes at
// key k: its provision, local and consumer must be the key's, its provider
// named, its state one of the five, every key it depends on in shape.
func checkProvision(ch bus.Change, k mesh.ProvisionKey, p mesh.Provision) error {
	switch {
	case p.Provision != k.Provision || p.Local != k.Local:
		return odd(ch, "value names provision %q local %q, not the key's", p.Provision, p.Local)
	case p.Consumer != (mesh.Ref{Module: k.Consumer, Node: k.Node}):
		return odd(ch, "value names consumer %q on %q, not the key's", p.Consumer.Module, p.Consumer.Node)
	case !mesh.ValidName(p.Provider.Module) || !mesh.ValidName(p.Provider.Node):
		return odd(ch, "value names no valid provider (module %q on node %q)", p.Provider.Module, p.Provider.Node)
	}
	switch p.State {
	case mesh.Asked, mesh.Provided, mesh.Failed, mesh.Waits, mesh.Retiring:
	default:
		return odd(ch, "value has the state %q, which is none of asked, provided, failed, waits, retiring", p.State)
	}
	for _, d := range p.DependsOn {
		if _, err := mesh.ParseProvisionKey(d); err != nil {
			return odd(ch, "value depends on %q: %v", d, err)
		}
	}
	return nil
}

// takePlan takes ch, a change of a plan key: put, when set, names the node
// and module of the plan ch.Value holds (the caller decoded it), else they
// are decoded from ch.Value.
func (m *Mesh) takePlan(ch bus.Change, put *mesh.NodeModule, t *Touch) {
	k, err := mesh.ParseNodeModule(ch.Key)
	if err != nil {
		t.Odd = odd(ch, "%v", err)
		return
	}
	t.nodes(k.Node) // another writer's change: composed again
	if ch.Deleted {
		delete(m.plans, ch.Key)
		removeSorted(m.plansOf, k.Node, ch.Key)
		return
	}
	var p mesh.NodeModule
	if put != nil {
		p = *put
	} else {
		var plan mesh.Plan
		err = decode(ch, &plan)
		p = mesh.NodeModule{Node: plan.Node, Module: plan.Module}
	}
	if err == nil && p != k {
		err = odd(ch, "value is the plan of %q on %q, not the key's", p.Module, p.Node)
	}
	if err != nil {
		// Taken as absent: a composition writes the plan anew where the
		// module is composed, and the seat deletes it otherwise.
		t.Odd = err
		delete(m.plans, ch.Key)
		removeSorted(m.plansOf, k.Node, ch.Key)
		return
	}
	m.plans[ch.Key] = ch.Value
	addSorted(m.plansOf, k.Node, ch.Key)
}

// takeRefusal takes ch, a change of a refusal key: put, the value of a put
// when the caller has it decoded, else the decoded ch.Value.
func (m *Mesh) takeRefusal(ch bus.Change, put *mesh.Refusal, t *Touch) {
	k, err := mesh.ParseRefusalKey(ch.Key)
	if err != nil {
		t.Odd = odd(ch, "%v", err)
		return
	}
	t.nodes(k.Node) // another writer's change: composed again
	if ch.Deleted {
		delete(m.refusals, ch.Key)
		removeSorted(m.refusalsOf, k.Node, ch.Key)
		return
	}
	var r mesh.Refusal
	if put != nil {
		r = *put
	} else {
		err = decode(ch, &r)
	}
	if err == nil && (r.Node != k.Node || r.Module != k.Module || r.Why == "") {
		err = odd(ch, "value is not the refusal of %q on %q with a why", k.Module, k.Node)
	}
	if err != nil {
		// Taken as absent: a composition that holds the module writes it
		// anew, and the seat deletes it otherwise.
		t.Odd = err
		delete(m.refusals, ch.Key)
		removeSorted(m.refusalsOf, k.Node, ch.Key)
		return
	}
	m.refusals[ch.Key] = r
	addSorted(m.refusalsOf, k.Node, ch.Key)
}

// takeRecord keeps the ask router's record of an ask and re-judges the key
// the ask is about.
func (m *Mesh) takeRecord(ch bus.Change, t *Touch) {
	if ch.Deleted {
		delete(m.records, ch.Key)
	} else {
		var r mesh.Record
		if err := read(ch, &r, t); err != nil {
			t.Odd = err
			return
		}
		m.records[ch.Key] = r
		if key, ok := strings.CutPrefix(r.Ask.About, "provision."); ok {
			if _, err := mesh.ParseProvisionKey(key); err == nil {
				t.Keys = append(t.Keys, key)
			}
		}
	}
	if key, ok := m.askedBy[ch.Key]; ok {
		t.Keys = append(t.Keys, key)
	}
}

// Composed takes what the last composition of a node found: the keys it
// needs and the modules it requires, for routing later changes. It keeps
// what of each need its key does not say (see [Mesh.NeedOf]), not the
// composition's Needs.
func (m *Mesh) Composed(res *compose.Result) {
	if res.Needed == nil {
		return // the node was not composed (its placement did not decode)
	}
	node := res.Node
	for _, n := range m.needed[node] {
		own := nodeOf(n.key)
		if own != node {
			removeFromFew(m.needers, n.key, node)
		}
		// Still needed by another node's composition (this node's is being
		// replaced)?
		_, still := m.needers[n.key]
		if !still && own != node {
			_, still = m.neededBy(own, n.key)
		}
		if !still {
			if s := m.byProvider[*n.provider]; s != nil {
				delete(s, n.key)
				if len(s) == 0 {
					delete(m.byProvider, *n.provider)
				}
			}
		}
	}
	for _, mod := range m.requires[node] {
		removeFrom(m.consumers, mod, node)
	}
	needs := make([]need, 0, len(res.Needed))
	for key, n := range res.Needed {
		needs = append(needs, need{key: key, provider: m.ref(n.Provider), dependsOn: n.DependsOn, noProvider: n.NoProvider})
		if nodeOf(key) != node {
			addToFew(m.needers, key, node)
		}
		s := m.byProvider[n.Provider]
		if s == nil {
			s = set{}
			m.byProvider[n.Provider] = s
		}
		s.add(key)
	}
	slices.SortFunc(needs, func(a, b need) int { return strings.Compare(a.key, b.key) })
	if len(needs) == 0 {
		delete(m.needed, node)
	} else {
		m.needed[node] = needs
	}
	m.requires[node] = res.Requires
	for _, mod := range res.Requires {
		addTo(m.consumers, mod, node)
	}
}

// NeedOf returns the need that the last composition of some node found for
// key, or nil when no composition needs it. The Need is new at each call,
// but its DependsOn is the mesh's own slice (and its strings the mesh's):
// read it, never change it.
func (m *Mesh) NeedOf(key string) *compose.Need {
	if n, ok := m.neededBy(nodeOf(key), key); ok {
		return n.need()
	}
	if f, ok := m.needers[key]; ok {
		if n, ok := m.neededBy(f.one, key); ok {
			return n.need()
		}
	}
	return nil
}

// neededBy returns what the last composition of node found needed at key,
// and whether it needs key.
func (m *Mesh) neededBy(node, key string) (*need, bool) {
	needs := m.needed[node]
	i, found := slices.BinarySearchFunc(needs, key, func(n need, key string) int { return strings.Compare(n.key, key) })
	if !found {
		return nil, false
	}
	return &needs[i], true
}

// nodeOf returns the node of a provision key: its first token.
func nodeOf(key string) string {
	node, _, _ := strings.Cut(key, ".")
	return node
}

// Nodes returns every node the mesh knows: placed, or holding plans,
// provisions or refusals.
func (m *Mesh) Nodes() []string {
	s := set{}
	for n := range m.placement {
		s.add(n)
	}
	for n := range m.plansOf {
		s.add(n)
	}
	for n := range m.provByNode {
		s.add(n)
	}
	for n := range m.refusalsOf {
		s.add(n)
	}
	return s.sorted()
}

// Bound returns the providers known to keep entries, sorted.
func (m *Mesh) Bound() []string { return m.bound.sorted() }

// Provisions calls f for every provision the seat keeps.
func (m *Mesh) Provisions(f func(key string, p mesh.Provision)) {
	for k, p := range m.provisions {
		f(k, p.provision(k))
	}
}

// Refusals calls f for every refusal the seat keeps.
func (m *Mesh) Refusals(f func(key string, r mesh.Refusal)) {
	for k, r := range m.refusals {
		f(k, r)
	}
}

// The compose.State methods.

func (m *Mesh) Placed(node string) ([]string, error) {
	p := m.placement[node]
	return p.modules, p.err
}

// NodesOf returns the sorted nodes module is placed on. The slice is the
// mesh's own, valid until the next [Mesh.Take]: read it, never change it.
func (m *Mesh) NodesOf(module string) []string { return m.nodesOf[module] }

func (m *Mesh) Want(node, module string) (string, bool, error) {
	w, ok := m.wants[node][module]
	return w.fp, ok && w.err == nil, w.err
}

func (m *Mesh) Have(node, module string) (mesh.Have, bool, error) {
	h, ok := m.haves[node][module]
	return h.h, ok && h.err == nil, h.err
}

func (m *Mesh) Build(module, fp string) (mesh.Build, bool) {
	b, ok := m.builds[module][fp]
	return b, ok
}

// Builds calls f for every build the mesh holds (mesh-builder_builds), in
// no order.
func (m *Mesh) Builds(f func(b mesh.Build)) {
	for _, bs := range m.builds {
		for _, b := range bs {
			f(b)
		}
	}
}

func (m *Mesh) Newest(module string) (mesh.Build, bool) {
	b, ok := m.newest[module]
	return b, ok
}

func (m *Mesh) Trunk(module string) (string, bool) {
	d, ok := m.trunk[module]
	return d, ok
}

func (m *Mesh) Manifest(digest string) (*mesh.Manifest, error) {
	mf, ok := m.manifests[digest]
	if !ok {
		if _, has := m.texts[digest]; !has {
			return nil, compose.ErrNoManifest
		}
		var t Touch
		m.noteManifest(digest, &t)
		mf = m.manifests[digest]
	}
	return mf.m, mf.err
}

func (m *Mesh) Entry(provider, key string) (mesh.Entry, bool, error) {
	e, ok := m.entries[provider][key]
	return e.e, ok && e.err == nil, e.err
}

// Lost returns the entry provider kept at key before it was deleted or
// purged from <provider>_bound, and whether one was: only while the seat
// keeps a provision at key and the entry has not come back. An entry that
// did not decode, or whose deletion this mesh took without having taken
// the entry (a start after the deletion), is not known.
func (m *Mesh) Lost(provider, key string) (mesh.Entry, bool) {
	e, ok := m.lost[provider][key]
	return e, ok
}

// Provision returns the provision at key in mesh-provisioner_provisions
// (written by the seat), and whether the mesh holds one: a value the seat
// itself wrote, as the mesh keeps it (one that is not of its kind is junk,
// not held). The value is built anew at each call from what the mesh
// keeps, its provision, local and consumer cut from key; its DependsOn,
// Reference and Warrant are shared with the mesh: read them, never change
// them.
func (m *Mesh) Provision(key string) (mesh.Provision, bool) {
	p, ok := m.provisions[key]
	if !ok {
		return mesh.Provision{}, false
	}
	return p.provision(key), true
}

// ProvisionsOf returns the sorted provision keys of node. The slice is the
// mesh's own, valid until the next [Mesh.Take]: read it, never change it.
func (m *Mesh) ProvisionsOf(node string) []string { return m.provByNode[node] }

func (m *Mesh) DependentsOf(key string) []string { return m.dependents[key].sorted() }

func (m *Mesh) Plan(key string) ([]byte, bool) {
	b, ok := m.plans[key]
	return b, ok
}

// PlansOf returns the sorted plan keys of node. The slice is the mesh's
// own, valid until the next [Mesh.Take]: read it, never change it.
func (m *Mesh) PlansOf(node string) []string { return m.plansOf[node] }

func (m *Mesh) Refusal(key string) (mesh.Refusal, bool) {
	r, ok := m.refusals[key]
	return r, ok
}

// RefusalsOf returns the sorted refusal keys of node. The slice is the
// mesh's own, valid until the next [Mesh.Take]: read it, never change it.
func (m *Mesh) RefusalsOf(node string) []string { return m.refusalsOf[node] }

// AskedBy returns the provision key whose value names the ask id, and
// whether one does.
func (m *Mesh) AskedBy(id string) (string, bool) {
	k, ok := m.askedBy[id]
	return k, ok
}

// Records calls f for every record of mesh-asks_records the seat keeps,
// by ask id.
func (m *Mesh) Records(f func(id string, r mesh.Record)) {
	for id, r := range m.records {
		f(id, r)
	}
}

func (m *Mesh) Record(id string) (mesh.Record, bool) {
	r, ok := m.records[id]
	return r, ok
}

var _ compose.State = (*Mesh)(nil)
