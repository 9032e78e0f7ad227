// Package digest sums, per node, the keys a mesh file writes of that node
// (its placement, its wants and its haves), so that two holders of those
// keys find the nodes where they differ by comparing short sums rather
// than the keys: the seat's verb, which follows the buckets
// (mesh-provisioner.provisioning, what "digests"), and apply, which holds
// the file. Nodes are summed in [Groups] groups too, so that a request
// carries one sum per group and its answer the nodes of the groups that
// differ. It is pure: keys and values in, sums out.
//
// A node's sum is the SHA-256, cut to 16 bytes and written in hex, of its
// keys in name order, each as its bucket, its key and the SHA-256 (cut to
// 16 bytes) of its value; a group's sum the same of its nodes' names and
// sums in name order. A node or group holding no key sums to "".
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Buckets are the buckets summed per node: the keys a mesh file writes of
// each node.
var Buckets = []string{mesh.PlacementBucket, mesh.WantsBucket, mesh.HaveBucket}

// Groups is how many groups the nodes are summed in: a node's group is the
// first byte of the SHA-256 of its name ([GroupOf]).
const Groups = 256

// NodeOf returns the node a key of bucket is of: mesh-controller_placement
// <node>, mesh-assigner_wants want.<node>.<module>, node-engine_have
// <node> or <node>.<module>, its tokens taken as they stand (a name out of
// the spec's shape is the caller's to say). ok is false for a key of any
// other shape, or of another bucket: an odd key, summed apart ([Set.Odd]).
func NodeOf(bucket, key string) (node string, ok bool) {
	switch bucket {
	case mesh.PlacementBucket:
		return key, key != "" && !strings.Contains(key, ".")
	case mesh.WantsBucket:
		rest, found := strings.CutPrefix(key, "want.")
		n, module, two := strings.Cut(rest, ".")
		return n, found && two && n != "" && module != "" && !strings.Contains(module, ".")
	case mesh.HaveBucket:
		n, module, two := strings.Cut(key, ".")
		return n, n != "" && (!two || module != "" && !strings.Contains(module, "."))
	}
	return "", false
}

// GroupOf returns the group of node, 0 to [Groups]-1.
func GroupOf(node string) int {
	s := sha256.Sum256([]byte(node))
	return int(s[0])
}

// sum is a cut SHA-256: 16 bytes.
type sum [16]byte

func sumOf(b []byte) sum {
	full := sha256.Sum256(b)
	var s sum
	copy(s[:], full[:])
	return s
}

// Set holds the sums of every key of [Buckets] given to it, kept current
// key by key: a node's sum and its group's are made again only when asked
// for after one of its keys changed. The zero Set is not usable: make one
// with [New]. A Set is not safe for concurrent use.
type Set struct {
	nodes  map[string]*node
	groups [Groups]*group
	odd    map[string]OddKey // "<bucket> <key>" -> the key
}

// OddKey is a key of [Buckets] that is of no node ([NodeOf]).
type OddKey struct {
	Bucket, Key string
}

type node struct {
	keys  map[entry]sum // each key -> its value's sum
	group int
	sum   string
	dirty bool
}

// entry is a key of a node: its bucket's index in [Buckets] and the key.
type entry struct {
	bucket byte
	key    string
}

type group struct {
	nodes map[string]bool
	sum   string
	dirty bool
}

// New returns an empty Set.
func New() *Set {
	return &Set{nodes: map[string]*node{}, odd: map[string]OddKey{}}
}

// Of returns the Set of keys (bucket -> key -> value; buckets other than
// [Buckets] are passed over).
func Of(keys map[string]map[string][]byte) *Set {
	s := New()
	for _, b := range Buckets {
		for k, v := range keys[b] {
			s.Put(b, k, v)
		}
	}
	return s
}

func bucketIndex(bucket string) (byte, bool) {
	for i, b := range Buckets {
		if b == bucket {
			return byte(i), true
		}
	}
	return 0, false
}

// Put takes value at key of bucket (a bucket other than [Buckets] is
// passed over).
func (s *Set) Put(bucket, key string, value []byte) {
	s.change(bucket, key, value, false)
}

// Delete takes key of bucket as gone.
func (s *Set) Delete(bucket, key string) {
	s.change(bucket, key, nil, true)
}

func (s *Set) change(bucket, key string, value []byte, deleted bool) {
	i, ok := bucketIndex(bucket)
	if !ok {
		return
	}
	n, ok := NodeOf(bucket, key)
	if !ok {
		if deleted {
			delete(s.odd, bucket+" "+key)
		} else {
			s.odd[bucket+" "+key] = OddKey{Bucket: bucket, Key: key}
		}
		return
	}
	nd := s.nodes[n]
	if nd == nil {
		if deleted {
			return
		}
		nd = &node{keys: make(map[entry]sum, 8), group: GroupOf(n)}
		s.nodes[n] = nd
		s.group(nd.group).nodes[n] = true
	}
	k := entry{bucket: i, key: key}
	if deleted {
		if _, had := nd.keys[k]; !had {
			return
		}
		delete(nd.keys, k)
	} else {
		nd.keys[k] = sumOf(value)
	}
	nd.dirty = true
	g := s.groups[nd.group]
	g.dirty = true
	if len(nd.keys) == 0 {
		delete(s.nodes, n)
		delete(g.nodes, n)
	}
}

func (s *Set) group(i int) *group {
	g := s.groups[i]
	if g == nil {
		g = &group{nodes: map[string]bool{}}
		s.groups[i] = g
	}
	return g
}

// Node returns node's sum ("" when the set holds no key of it).
func (s *Set) Node(n string) string {
	nd := s.nodes[n]
	if nd == nil {
		return ""
	}
	if nd.dirty {
		keys := make([]entry, 0, len(nd.keys))
		for k := range nd.keys {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].bucket != keys[j].bucket {
				return keys[i].bucket < keys[j].bucket
			}
			return keys[i].key < keys[j].key
		})
		h := sha256.New()
		for _, k := range keys {
			v := nd.keys[k]
			h.Write([]byte{'0' + k.bucket})
			h.Write([]byte(k.key))
			h.Write([]byte{0})
			h.Write(v[:])
		}
		nd.sum = hex.EncodeToString(h.Sum(nil)[:16])
		nd.dirty = false
	}
	return nd.sum
}

// Group returns group i's sum ("" when none of its nodes has a key).
func (s *Set) Group(i int) string {
	g := s.groups[i]
	if g == nil || len(g.nodes) == 0 {
		return ""
	}
	if g.dirty {
		h := sha256.New()
		for _, n := range s.NodesOf(i) {
			h.Write([]byte(n))
			h.Write([]byte{0})
			h.Write([]byte(s.Node(n)))
			h.Write([]byte{0})
		}
		g.sum = hex.EncodeToString(h.Sum(nil)[:16])
		g.dirty = false
	}
	return g.sum
}

// Sums returns every group's sum, by group.
func (s *Set) Sums() []string {
	out := make([]string, Groups)
	for i := range out {
		out[i] = s.Group(i)
	}
	return out
}

// NodesOf returns the nodes of group i the set holds keys of, sorted.
func (s *Set) NodesOf(i int) []string {
	g := s.groups[i]
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.nodes))
	for n := range g.nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Odd returns the keys the set holds that are of no node, sorted by
// bucket and key.
func (s *Set) Odd() []OddKey {
	out := make([]OddKey, 0, len(s.odd))
	for _, o := range s.odd {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bucket != out[j].Bucket {
			return out[i].Bucket < out[j].Bucket
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Differ returns, sorted, the nodes whose sums differ between s and
// another set, given its nodes and their sums for each group whose sum
// differs from s's (as the verb answers them: group -> node -> sum): a
// node of those groups that one holds and the other does not differs too.
// The groups not given are taken as equal.
func (s *Set) Differ(theirs map[int]map[string]string) []string {
	differ := map[string]bool{}
	for i, nodes := range theirs {
		for _, n := range s.NodesOf(i) {
			if nodes[n] != s.Node(n) {
				differ[n] = true
			}
		}
		for n, sm := range nodes {
			if s.Node(n) != sm {
				differ[n] = true
			}
		}
	}
	out := make([]string, 0, len(differ))
	for n := range differ {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
