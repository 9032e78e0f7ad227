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
// placement, modules, manifests, applied and collect buckets: who runs
// (the nodes placed and the modules on each), which modules keep entries,
// which collections they contribute to, and the records each node holds. It keeps only what
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
	// contributes holds, per manifest key, its module and the
	// collections it contributes to.
	contributes map[string]contribution
	// applied and collect hold, per node, the keys the node holds in
	// the applied and collect buckets (a client's own records).
	applied, collect map[string]map[string]bool
}

// contribution is a manifest's module and the collections it contributes
// to.
type contribution struct {
	module      string
	collections []string
}

func newLive() *live {
	return &live{placement: map[string][]string{}, modules: map[string]string{}, keeps: map[string]bool{},
		contributes: map[string]contribution{}, applied: map[string]map[string]bool{}, collect: map[string]map[string]bool{}}
}

// hold notes that node holds key in held (or no longer, deleted).
func hold(held map[string]map[string]bool, node, key string, deleted bool) {
	if deleted {
		delete(held[node], key)
		if len(held[node]) == 0 {
			delete(held, node)
		}
		return
	}
	if held[node] == nil {
		held[node] = map[string]bool{}
	}
	held[node][key] = true
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
		delete(l.contributes, key)
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
		if c := m.Collections(); len(c) > 0 {
			l.contributes[key] = contribution{module: m.Module, collections: c}
		}
	case mesh.AppliedBucket:
		k, err := mesh.ParseNodeModule(key)
		if err != nil {
			return fmt.Errorf("%s %s: %w", bucket, key, err)
		}
		hold(l.applied, k.Node, key, deleted)
	case mesh.CollectBucket:
		k, err := mesh.ParseCollectKey(key)
		if err != nil {
			return fmt.Errorf("%s %s: %w", bucket, key, err)
		}
		hold(l.collect, k.Node, key, deleted)
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
	for _, c := range l.contributes {
		if _, ok := l.modules[c.module]; !ok {
			continue
		}
		if m.Contributes == nil {
			m.Contributes = map[string][]string{}
		}
		m.Contributes[c.module] = append(m.Contributes[c.module], c.collections...)
	}
	for mod, colls := range m.Contributes {
		slices.Sort(colls)
		m.Contributes[mod] = slices.Compact(colls)
	}
	// The keys a node holds that its placement no longer gives its
	// client: it may still delete them.
	held := map[string]access.HeldKeys{}
	for node, keys := range l.applied {
		for key := range keys {
			if k, _ := mesh.ParseNodeModule(key); !slices.Contains(l.placement[node], k.Module) {
				h := held[node]
				h.Applied = append(h.Applied, key)
				held[node] = h
			}
		}
	}
	for node, keys := range l.collect {
		for key := range keys {
			k, _ := mesh.ParseCollectKey(key)
			if !slices.Contains(l.placement[node], k.Contributor) || !slices.Contains(m.Contributes[k.Contributor], k.Collection) {
				h := held[node]
				h.Collect = append(h.Collect, key)
				held[node] = h
			}
		}
	}
	for node, h := range held {
		slices.Sort(h.Applied)
		slices.Sort(h.Collect)
		held[node] = h
	}
	if len(held) > 0 {
		m.Held = held
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
