// Package meshfile reads an operator's mesh file (spec section 9): a YAML
// file naming the nodes, the modules with their builds and manifests, the
// placement, the wants and, for a mesh with no node engines, the haves.
//
// [Parse] validates the whole file and returns every problem with its line
// as one [*Errors]; a file with any problem is refused whole. A valid file
// is a [File], which says the keys it writes into the buckets the
// provisioner reads (placement, wants, modules, manifests, builds, haves).
// [File.Diff] is the pure step that compares those keys with what the
// buckets hold now; [Apply] reads the buckets, writes the differences and
// removes what the file no longer places.
package meshfile

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// File is a valid mesh file. Its fields are read-only once Parse returns
// it.
type File struct {
	// Name is the file's name as given to Parse, used in messages.
	Name string
	// Mesh is the mesh's own name (the optional top-level "mesh:"), a
	// valid name of at most MaxName bytes; empty when the file names none.
	// It is written to no bucket: up hands it to the providers it starts,
	// and the postgres provider puts it in the name of every role and
	// database it makes (pgprovider.Config.Mesh), so that two meshes
	// sharing a PostgreSQL server never meet.
	Mesh string
	// Nodes lists the mesh's nodes in file order.
	Nodes []string
	// Modules lists the modules in file order.
	Modules []Module
	// Placement holds, per node of Nodes, the modules placed on it in file
	// order (empty for a node with nothing placed).
	Placement map[string][]string
	// Wants holds, per node, the build (fingerprint) each wanted module
	// should run there.
	Wants map[string]map[string]string
	// Haves holds, per node, what each module runs there, for a mesh with no
	// node engines.
	Haves map[string]map[string]mesh.Have
	// lines says where each key's value comes from, for [File.Oversize].
	lines lines
	// keys holds [File.Keys], made once.
	keys     map[string]map[string][]byte
	keysOnce sync.Once
	// Warnings are problems that do not refuse the file (a have naming a
	// build the file does not list, a requirement from a module the file
	// does not hold), sorted by line.
	Warnings []Error
}

// Module is one module of a mesh file and its builds, oldest first: the
// last listed is the newest, and its manifest is the module's trunk.
type Module struct {
	Name   string
	Builds []Build
	Line   int // where the module's name is
}

// Build is one build of a module with its manifest.
type Build struct {
	Fingerprint string
	// Manifest is the decoded, valid manifest.
	Manifest *mesh.Manifest
	// JSON is the manifest's JSON text as written to the manifests bucket:
	// json.Marshal of Manifest, so the same manifest always has the same
	// text.
	JSON []byte
	// Digest is [mesh.Digest] of JSON.
	Digest string
	Line   int // where the build's fp is

	manifestLine int // where the build's manifest is
}

// Trunk returns the module's newest build: the last listed.
func (m *Module) Trunk() *Build { return &m.Builds[len(m.Builds)-1] }

// WithPlacement returns a copy of f with nodes and placement in place of
// its own (placement holds, per node of nodes, the modules placed on it);
// its keys are made anew. Copy a File only so: a File copied whole would
// keep the keys made of the first one's placement.
func (f *File) WithPlacement(nodes []string, placement map[string][]string) *File {
	return &File{Name: f.Name, Mesh: f.Mesh, Nodes: nodes, Modules: f.Modules, Placement: placement,
		Wants: f.Wants, Haves: f.Haves, lines: f.lines, Warnings: f.Warnings}
}

// Module returns the module named name, or nil.
func (f *File) Module(name string) *Module {
	for i := range f.Modules {
		if f.Modules[i].Name == name {
			return &f.Modules[i]
		}
	}
	return nil
}

// Placed reports whether module is placed on node in the file.
func (f *File) Placed(node, module string) bool {
	for _, m := range f.Placement[node] {
		if m == module {
			return true
		}
	}
	return false
}

// HasNode reports whether the file lists node.
func (f *File) HasNode(node string) bool {
	_, ok := f.Placement[node]
	return ok
}

// Keys returns every key the file writes and its value (compact JSON), per
// bucket, for the buckets [mesh.PlacementBucket] (<node>: [mesh.Placement],
// one per node of the file, empty modules for a node with nothing placed),
// [mesh.WantsBucket] (want.<node>.<module>: [mesh.Want]),
// [mesh.ModulesBucket] (<module>: [mesh.ModuleRecord] of the last listed
// build), [mesh.ManifestsBucket] ([mesh.ManifestKey] of the digest:
// [mesh.ManifestRecord]) and [mesh.HaveBucket] (<node>.<module>:
// [mesh.Have], marked [mesh.HaveByMeshFile]). Builds are not among them: their values hold a time; see
// [File.Builds] and [File.Diff].
//
// The keys are made once per file (its parse checks their sizes, and
// [File.Diff] and [Apply] compare them): the inner maps are the file's
// own, to read and never change; the outer map is the caller's.
func (f *File) Keys() map[string]map[string][]byte {
	f.keysOnce.Do(func() { f.keys = f.makeKeys() })
	out := make(map[string]map[string][]byte, len(f.keys))
	for b, held := range f.keys {
		out[b] = held
	}
	return out
}

// makeKeys makes what [File.Keys] returns.
func (f *File) makeKeys() map[string]map[string][]byte {
	keys := map[string]map[string][]byte{
		mesh.PlacementBucket: {},
		mesh.WantsBucket:     {},
		mesh.ModulesBucket:   {},
		mesh.ManifestsBucket: {},
		mesh.HaveBucket:      {},
	}
	for _, node := range f.Nodes {
		p := mesh.Placement{Modules: []mesh.PlacedModule{}}
		for _, m := range f.Placement[node] {
			p.Modules = append(p.Modules, mesh.PlacedModule{Module: m})
		}
		keys[mesh.PlacementBucket][node] = marshal(p)
		for m, fp := range f.Wants[node] {
			keys[mesh.WantsBucket][mesh.WantKey{Node: node, Module: m}.String()] = marshal(mesh.Want{Fingerprint: fp})
		}
		for m, h := range f.Haves[node] {
			h.WrittenBy = mesh.HaveByMeshFile
			keys[mesh.HaveBucket][mesh.HaveKey{Node: node, Module: m}.String()] = marshal(h)
		}
	}
	for i := range f.Modules {
		m := &f.Modules[i]
		keys[mesh.ModulesBucket][m.Name] = marshal(mesh.ModuleRecord{Manifest: m.Trunk().Digest})
		for _, b := range m.Builds {
			keys[mesh.ManifestsBucket][mesh.ManifestKey(b.Digest)] = marshal(mesh.ManifestRecord{JSON: string(b.JSON)})
		}
	}
	return keys
}

// Builds returns every build of the file as the value written at
// <module>.<fp> in [mesh.BuildsBucket], modules and builds in file order,
// with At left zero: [File.Diff] gives each its time.
func (f *File) Builds() []mesh.Build {
	var out []mesh.Build
	for _, m := range f.Modules {
		for _, b := range m.Builds {
			out = append(out, mesh.Build{Module: m.Name, Fingerprint: b.Fingerprint, Manifest: b.Digest})
		}
	}
	return out
}

// marshal encodes the values of this package, which always encode.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("meshfile: encode %T: %v", v, err))
	}
	return b
}

// buildTimes gives the builds of one module, listed oldest first, their at
// times: an existing build whose module, fp and manifest are unchanged
// keeps its time as long as the times still increase in list order; any
// other gets now plus its index in milliseconds, and at least one
// millisecond after the build before it.
func buildTimes(builds []mesh.Build, current map[string][]byte, now time.Time) {
	var prev time.Time
	for i := range builds {
		b := &builds[i]
		at := time.Time{}
		if old, ok := current[mesh.BuildKey{Module: b.Module, Fingerprint: b.Fingerprint}.String()]; ok {
			var was mesh.Build
			if json.Unmarshal(old, &was) == nil && was.Module == b.Module && was.Fingerprint == b.Fingerprint &&
				was.Manifest == b.Manifest && !was.At.IsZero() && was.At.After(prev) {
				at = was.At
			}
		}
		if at.IsZero() {
			at = now.Add(time.Duration(i) * time.Millisecond)
			if !at.After(prev) {
				at = prev.Add(time.Millisecond)
			}
		}
		b.At = at
		prev = at
	}
}
