package assemble

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// live is the mesh as the bus holds it, folded from the changes of the
// placement, modules and manifests buckets: who runs (the nodes placed and
// the modules on each) and which modules keep entries. It keeps only what
// [access.Mesh] needs, not the buckets' values. Not safe for concurrent
// use: the follower guards it.
type live struct {
	// placement holds the modules placed on each node (nil for a node
	// whose value does not decode: nothing placed).
	placement map[string][]string
	// modules holds each module's manifest key (in ManifestsBucket).
	modules map[string]string
	// keeps says, per manifest key, whether its manifest keeps entries.
	keeps map[string]bool
}

func newLive() *live {
	return &live{placement: map[string][]string{}, modules: map[string]string{}, keeps: map[string]bool{}}
}

// take folds one change of bucket at key into l. It returns an error that
// names the bucket and key when the value does not decode (the key is
// then taken as placing nothing, naming no manifest, or keeping no
// entries).
func (l *live) take(bucket, key string, value []byte, deleted bool) error {
	switch bucket {
	case mesh.PlacementBucket:
		if deleted {
			delete(l.placement, key)
			return nil
		}
		var p mesh.Placement
		if err := json.Unmarshal(value, &p); err != nil {
			l.placement[key] = nil
			return fmt.Errorf("%s %s: %w", bucket, key, err)
		}
		mods := make([]string, 0, len(p.Modules))
		for _, pm := range p.Modules {
			mods = append(mods, pm.Module)
		}
		l.placement[key] = mods
	case mesh.ModulesBucket:
		if deleted {
			delete(l.modules, key)
			return nil
		}
		var r mesh.ModuleRecord
		if err := json.Unmarshal(value, &r); err != nil {
			l.modules[key] = ""
			return fmt.Errorf("%s %s: %w", bucket, key, err)
		}
		l.modules[key] = mesh.ManifestKey(r.Manifest)
	case mesh.ManifestsBucket:
		if deleted {
			delete(l.keeps, key)
			return nil
		}
		var r mesh.ManifestRecord
		if err := json.Unmarshal(value, &r); err != nil {
			l.keeps[key] = false
			return fmt.Errorf("%s %s: %w", bucket, key, err)
		}
		m, err := mesh.ParseManifest([]byte(r.JSON))
		if err != nil {
			l.keeps[key] = false
			return fmt.Errorf("%s %s: %w", bucket, key, err)
		}
		l.keeps[key] = m.KeepsEntries()
	}
	return nil
}

// mesh returns the [access.Mesh] of what l holds, nodes and modules
// sorted: the parties whose users the running mesh needs.
func (l *live) mesh() access.Mesh {
	m := access.Mesh{Placement: map[string][]string{}}
	for node, mods := range l.placement {
		m.Nodes = append(m.Nodes, node)
		m.Placement[node] = slices.Clone(mods)
	}
	for mod, manifest := range l.modules {
		m.Modules = append(m.Modules, mod)
		if l.keeps[manifest] {
			m.Providers = append(m.Providers, mod)
		}
	}
	sort.Strings(m.Nodes)
	sort.Strings(m.Modules)
	sort.Strings(m.Providers)
	return m
}

// Runs says which of a mesh's components a [Follower] runs beside the seat
// and the router.
type Runs struct {
	// Clients runs a client for every node placed.
	Clients bool
	// Postgres runs the postgres provider on the node it is placed on.
	Postgres bool
}

// Wanted returns the components that run for the mesh m as runs says:
// mesh-vault and postgres (with runs.Postgres) on each node they are placed
// on, then a client per node (with runs.Clients), nodes sorted. It is pure:
// the mesh in, the components out.
func Wanted(m access.Mesh, runs Runs) []Component {
	nodes := slices.Sorted(slices.Values(m.Nodes))
	var out []Component
	for _, node := range nodes {
		for _, mod := range m.Placement[node] {
			switch {
			case mod == mesh.VaultModule:
				out = append(out, Component{Role: Vault, Node: node})
			case mod == pgprovider.Module && runs.Postgres:
				out = append(out, Component{Role: Postgres, Node: node})
			}
		}
	}
	if runs.Clients {
		for _, node := range nodes {
			out = append(out, Component{Role: Client, Node: node})
		}
	}
	return out
}
