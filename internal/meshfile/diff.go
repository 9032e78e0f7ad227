package meshfile

import (
	"bytes"
	"encoding/json"
	"sort"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Buckets lists the buckets a mesh file writes, in the order [Apply]
// writes them: what a composition reads by reference first (manifests,
// builds, modules, haves, wants), placement last, so that a seat that
// follows the buckets never sees a module placed before its builds.
var Buckets = []string{
	mesh.ManifestsBucket,
	mesh.BuildsBucket,
	mesh.ModulesBucket,
	mesh.HaveBucket,
	mesh.WantsBucket,
	mesh.PlacementBucket,
}

// removeOrder is the order in which Apply removes keys: placement first, so
// that a module stops being placed before its want and have go.
var removeOrder = []string{mesh.PlacementBucket, mesh.WantsBucket, mesh.HaveBucket}

// Put is one key to write: Value at Key in Bucket.
type Put struct {
	Bucket, Key string
	Value       []byte
}

// Remove is one key to remove from Bucket.
type Remove struct {
	Bucket, Key string
}

// Odd is a key found in a bucket that is out of the bucket's shape: it is
// left as it is and said.
type Odd struct {
	Bucket, Key, Why string
}

// Diff is what applying a file changes, computed by [File.Diff].
type Diff struct {
	// Puts are the keys whose bytes differ from what the bucket holds (or
	// that it does not hold), in the order of [Buckets], keys sorted within
	// a bucket, except placement: provider nodes first, each after the
	// nodes of the providers it requires (see placementOrder), so that the
	// seat never composes a node before the placement of its providers.
	Puts []Put
	// Removes are the keys of placement, wants and haves that the file no
	// longer has, placement first, keys sorted within a bucket. Manifests,
	// builds and modules are never removed.
	Removes []Remove
	// Unchanged counts, per bucket, the file's keys that the bucket already
	// holds with the same bytes.
	Unchanged map[string]int
	// Odd lists the keys out of their bucket's shape, left as they are.
	Odd []Odd
}

// Diff compares the file's keys with current, the keys each bucket holds
// now (bucket -> key -> value; a missing bucket is empty), and returns
// what to write and what to remove. now gives new builds their at times
// (now plus the build's index in its module, in milliseconds, always
// increasing in the order listed); a build whose module, fp and manifest
// are unchanged keeps its at, so that applying the same file twice changes
// nothing.
//
// Removed are: a placement key whose node is not in the file; a want key
// the file does not have; a have key whose node is not in the file or
// whose module is not placed on that node in the file; and a have key the
// file does not have whose value an apply wrote (marked
// [mesh.HaveByMeshFile]): what a file wrote, the file takes back, and a
// have a node's engine wrote (no mark) stays while its module is placed.
// Diff is pure.
func (f *File) Diff(current map[string]map[string][]byte, now time.Time) *Diff {
	return f.DiffOf(current, nil, now)
}

// nodeBuckets are the buckets whose keys are of a node: a file's diff of
// some nodes looks at these keys of those nodes only.
var nodeBuckets = map[string]bool{mesh.PlacementBucket: true, mesh.WantsBucket: true, mesh.HaveBucket: true}

// DiffOf is [File.Diff] of the keys of some nodes only: current holds, of
// placement, wants and haves, the keys of the nodes of nodes alone (and
// every key of manifests, builds and modules), and every key the file
// writes of any other node is taken as held with the same bytes (counted
// unchanged): the caller knows those nodes equal (the seat's verb said
// their sums are the file's, see package digest). A nil nodes is every
// node: Diff. Its cost follows the nodes given, not the file's.
func (f *File) DiffOf(current map[string]map[string][]byte, nodes map[string]bool, now time.Time) *Diff {
	d := &Diff{Unchanged: map[string]int{}}
	keys := f.Keys()
	builds := map[string][]byte{}
	now = now.UTC().Truncate(time.Millisecond)
	for _, m := range f.Modules {
		bs := make([]mesh.Build, 0, len(m.Builds))
		for _, b := range m.Builds {
			bs = append(bs, mesh.Build{Module: m.Name, Fingerprint: b.Fingerprint, Manifest: b.Digest})
		}
		buildTimes(bs, current[mesh.BuildsBucket], now)
		for _, b := range bs {
			builds[mesh.BuildKey{Module: b.Module, Fingerprint: b.Fingerprint}.String()] = marshal(b)
		}
	}
	keys[mesh.BuildsBucket] = builds
	var ofNodes map[string][]string // bucket -> the keys the file writes of nodes, sorted
	if nodes != nil {
		ofNodes = f.KeysOf(nodes)
	}

	for _, bucket := range Buckets {
		var order []string
		switch {
		case nodes != nil && nodeBuckets[bucket]:
			order = ofNodes[bucket]
			d.Unchanged[bucket] += len(keys[bucket]) - len(order)
		case bucket == mesh.PlacementBucket:
			order = f.placementOrder()
		default:
			order = sortedKeys(keys[bucket])
		}
		for _, k := range order {
			v := keys[bucket][k]
			if old, ok := current[bucket][k]; ok && bytes.Equal(old, v) {
				d.Unchanged[bucket]++
				continue
			}
			d.Puts = append(d.Puts, Put{Bucket: bucket, Key: k, Value: v})
		}
	}
	for _, bucket := range removeOrder {
		for _, k := range sortedKeys(current[bucket]) {
			if _, keep := keys[bucket][k]; keep {
				continue
			}
			why, remove := f.removes(bucket, k, current[bucket][k])
			if why != "" {
				d.Odd = append(d.Odd, Odd{Bucket: bucket, Key: k, Why: why})
				continue
			}
			if remove {
				d.Removes = append(d.Removes, Remove{Bucket: bucket, Key: k})
			}
		}
	}
	return d
}

// KeysOf returns the keys the file writes of nodes in placement, wants and
// haves, per bucket: placement in the order of [File.placementOrder] (the
// order [File.Diff] writes them in), the others sorted.
func (f *File) KeysOf(nodes map[string]bool) map[string][]string {
	out := map[string][]string{}
	if len(nodes) == 0 {
		return out
	}
	for _, n := range f.placementOrder() {
		if nodes[n] {
			out[mesh.PlacementBucket] = append(out[mesh.PlacementBucket], n)
		}
	}
	for n := range nodes {
		for m := range f.Wants[n] {
			out[mesh.WantsBucket] = append(out[mesh.WantsBucket], mesh.WantKey{Node: n, Module: m}.String())
		}
		for m := range f.Haves[n] {
			out[mesh.HaveBucket] = append(out[mesh.HaveBucket], mesh.HaveKey{Node: n, Module: m}.String())
		}
	}
	sort.Strings(out[mesh.WantsBucket])
	sort.Strings(out[mesh.HaveBucket])
	return out
}

// removes reports whether key of bucket, which the file does not write and
// which holds value, is removed; why is set instead for a key out of its
// bucket's shape.
func (f *File) removes(bucket, key string, value []byte) (why string, remove bool) {
	switch bucket {
	case mesh.PlacementBucket:
		if !mesh.ValidName(key) {
			return "not a node name", false
		}
		return "", !f.HasNode(key)
	case mesh.WantsBucket:
		if _, err := mesh.ParseWantKey(key); err != nil {
			return err.Error(), false
		}
		return "", true
	case mesh.HaveBucket:
		k, err := mesh.ParseHaveKey(key)
		if err != nil {
			return err.Error(), false
		}
		if !f.HasNode(k.Node) {
			return "", true
		}
		if k.Module != "" && !f.Placed(k.Node, k.Module) {
			return "", true
		}
		var h mesh.Have
		return "", json.Unmarshal(value, &h) == nil && h.WrittenBy == mesh.HaveByMeshFile
	}
	return "", false
}

func sortedKeys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
