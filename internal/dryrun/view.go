package dryrun

import (
	"bytes"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// view is the mesh as a run reads it: the [state.Mesh], whose seat keys
// (plans, provisions, refusals, providers' entries) are held only for the
// nodes of loaded (nil: every node's). Each read of a key of a node not
// loaded notes the node in missing: the run's report is then not to be
// trusted, and the caller reads those nodes too and runs again.
type view struct {
	*state.Mesh
	loaded  map[string]bool
	missing map[string]bool
	// deps holds the shared credential keys whose dependents the mesh
	// holds; missingDeps those read whose dependents it lacks, key ->
	// their provision.
	deps        map[string]bool
	missingDeps map[string]string
	// provs holds the provision names whose keys on every node the mesh
	// holds; missingProvs those needed that it lacks.
	provs, missingProvs map[string]bool
	changed             bool // the run changed the mesh before it stopped
	// consumers maps a module to the nodes whose placed modules require it
	// (see consumersOf), each found at its first need.
	consumers map[string][]string
	// lazy holds the wants and haves the mesh was not given (nil: it holds
	// every one).
	lazy *Lazy
}

// Placed is the mesh's placement of node, taken from the lazy source
// first.
func (v *view) Placed(node string) ([]string, error) {
	v.lazy.takePlacement(v.Mesh, node)
	return v.Mesh.Placed(node)
}

// NodesOf is the mesh's nodes of module, every placement naming it taken
// from the lazy source first.
func (v *view) NodesOf(module string) []string {
	v.lazy.takeNodesOf(v.Mesh, module)
	return v.Mesh.NodesOf(module)
}

// Want is the mesh's want, taken from the lazy source first.
func (v *view) Want(node, module string) (string, bool, error) {
	v.lazy.take(v.Mesh, node, module)
	return v.Mesh.Want(node, module)
}

// Have is the mesh's have, taken from the lazy source first.
func (v *view) Have(node, module string) (mesh.Have, bool, error) {
	v.lazy.take(v.Mesh, node, module)
	return v.Mesh.Have(node, module)
}

// lacks reports whether the run read what the mesh does not hold.
func (v *view) lacks() bool { return len(v.missing)+len(v.missingDeps)+len(v.missingProvs) > 0 }

func (v *view) missed() Missing {
	m := Missing{Nodes: sortedKeys(v.missing), Dependents: v.missingDeps, Changed: v.changed}
	if len(v.missingProvs) > 0 {
		m.Provisions = sortedKeys(v.missingProvs)
	}
	return m
}

// needProvision notes that the run needs every key of provision name, on
// any node.
func (v *view) needProvision(name string) {
	if v.loaded != nil && !v.provs[name] {
		v.missingProvs[name] = true
	}
}

func (v *view) need(node string) {
	if v.loaded != nil && !v.loaded[node] {
		v.missing[node] = true
	}
}

func (v *view) Provision(key string) (mesh.Provision, bool) {
	v.need(nodeOf(key))
	return v.Mesh.Provision(key)
}

func (v *view) ProvisionsOf(node string) []string {
	v.need(node)
	return v.Mesh.ProvisionsOf(node)
}

func (v *view) Plan(key string) ([]byte, bool) {
	v.need(nodeOf(key))
	return v.Mesh.Plan(key)
}

func (v *view) PlansOf(node string) []string {
	v.need(node)
	return v.Mesh.PlansOf(node)
}

func (v *view) Refusal(key string) (mesh.Refusal, bool) {
	v.need(nodeOf(key))
	return v.Mesh.Refusal(key)
}

func (v *view) RefusalsOf(node string) []string {
	v.need(node)
	return v.Mesh.RefusalsOf(node)
}

func (v *view) Entry(provider, key string) (mesh.Entry, bool, error) {
	v.need(nodeOf(key))
	return v.Mesh.Entry(provider, key)
}

// DependentsOf returns the keys whose depends-on names key: keys of key's
// node, and for a shared credential (the key <node>.<provider>.credential.
// <provider>_<provision> of a provider's one value) its consumers' keys of
// that provision on any node, which must have been read (see
// [RunLoaded]'s dependents) for the answer to be whole.
func (v *view) DependentsOf(key string) []string {
	v.need(nodeOf(key))
	if v.loaded != nil {
		if prov, ok := SharedProvision(key); ok && !v.deps[key] {
			v.missingDeps[key] = prov
		}
	}
	return v.Mesh.DependentsOf(key)
}

// SharedProvision returns, for a shared credential's key
// (<node>.<provider>.credential.<provider>_<provision>), the provision its
// consumers' keys are of: those keys depend on it, on any node. ok is
// false for any other key.
func SharedProvision(key string) (provision string, ok bool) {
	k, err := mesh.ParseProvisionKey(key)
	if err != nil || k.Provision != credentialProvision {
		return "", false
	}
	rest, found := strings.CutPrefix(k.Local, k.Consumer+"_")
	if !found || rest == "" || strings.Contains(rest, "_") {
		return "", false
	}
	return rest, true
}

// consumersOf returns, sorted, the nodes whose placed modules, at any
// build the seat composes them at (their want's, their have's, their
// newest), require module, or, for mesh-vault, an offer with a credential:
// a superset of the nodes the seat has learned require it. Its cost
// follows the answer: the builds that require module are found among the
// mesh's builds, and only the nodes placing their modules are looked at
// (a node's want and have only when module's newest build does not
// require it).
func (v *view) consumersOf(module string) []string {
	if got, ok := v.consumers[module]; ok {
		return got
	}
	if v.consumers == nil {
		v.consumers = map[string][]string{}
	}
	m := v.Mesh
	requiring := map[string]map[string]bool{} // placed module -> fps of its builds requiring module
	m.Builds(func(b mesh.Build) {
		man, err := m.Manifest(b.Manifest)
		if err != nil {
			return
		}
		for _, req := range man.Requires {
			if req.From == module || module == mesh.VaultModule && credentialOf(m, req) {
				if requiring[b.Module] == nil {
					requiring[b.Module] = map[string]bool{}
				}
				requiring[b.Module][b.Fingerprint] = true
				return
			}
		}
	})
	nodes := map[string]bool{}
	for mod, fps := range requiring {
		if b, ok := m.Newest(mod); ok && fps[b.Fingerprint] {
			for _, n := range v.NodesOf(mod) {
				nodes[n] = true
			}
			continue
		}
		for _, n := range v.NodesOf(mod) {
			for _, b := range composedBuilds(v, n, mod) {
				if fps[b.Fingerprint] {
					nodes[n] = true
				}
			}
		}
	}
	v.consumers[module] = sortedKeys(nodes)
	return v.consumers[module]
}

// composedBuilds returns the builds the seat may compose mod at on node:
// its want's, its have's and its newest.
func composedBuilds(m compose.State, node, mod string) []mesh.Build {
	var builds []mesh.Build
	if fp, ok, _ := m.Want(node, mod); ok {
		if b, ok := m.Build(mod, fp); ok {
			builds = append(builds, b)
		}
	}
	if h, ok, _ := m.Have(node, mod); ok && h.Fingerprint != "" {
		if b, ok := m.Build(mod, h.Fingerprint); ok {
			builds = append(builds, b)
		}
	}
	if b, ok := m.Newest(mod); ok {
		builds = append(builds, b)
	}
	return builds
}

// credentialProvision is the provision of every credential key.
const credentialProvision = "credential"

// Lazy is a dry run's source of the placements, wants and haves of the
// mesh that its [state.Mesh] was not given: the raw values read from
// mesh-controller_placement (<node>), mesh-controller_wants
// (want.<node>.<module>) and node-engine_have (<node>.<module>), key ->
// value. A run takes a node's want and have of a module into the mesh the
// first time it reads either, or takes a change of either; a node's
// placement the first time it reads it or takes a change of it, and every
// placement that may name a module (its raw value holds the module's name)
// the first time it reads the module's nodes or takes a change of its
// builds or trunk (the mesh's own index of a module's nodes is then
// whole). So a run over a mesh of many nodes decodes only the keys it
// reads. Taking them in any order leaves the mesh as taking every one at
// the start: nothing else of the mesh reads them. Make a new Lazy for each
// new mesh; one Lazy may serve runs over the same mesh one after another.
type Lazy struct {
	placement, wants, haves map[string][]byte
	took                    map[string]bool // <node>.<module> whose want and have were taken
	placed                  map[string]bool // nodes whose placement was taken
	nodesOf                 map[string]bool // modules whose placements were taken
	odd                     []error
}

// NewLazy returns a source of the given placements, wants and haves
// (bucket key -> value), which it reads and never changes.
func NewLazy(placement, wants, haves map[string][]byte) *Lazy {
	return &Lazy{placement: placement, wants: wants, haves: haves,
		took: map[string]bool{}, placed: map[string]bool{}, nodesOf: map[string]bool{}}
}

// Took returns the <node>.<module> pairs whose want and have were taken,
// sorted.
func (l *Lazy) Took() []string { return sortedKeys(l.took) }

// Placements returns the nodes whose placement was taken, sorted.
func (l *Lazy) Placements() []string { return sortedKeys(l.placed) }

// takePlacement takes node's placement into m, once.
func (l *Lazy) takePlacement(m *state.Mesh, node string) {
	if l == nil || l.placed[node] {
		return
	}
	l.placed[node] = true
	if b, ok := l.placement[node]; ok {
		if t := m.Take(bus.Change{Bucket: mesh.PlacementBucket, Key: node, Value: b}); t.Odd != nil {
			l.odd = append(l.odd, t.Odd)
		}
	}
}

// takeNodesOf takes, once, every placement whose raw value holds module's
// name: a superset of those placing it.
func (l *Lazy) takeNodesOf(m *state.Mesh, module string) {
	if l == nil || l.nodesOf[module] {
		return
	}
	l.nodesOf[module] = true
	name := []byte(module)
	for node, b := range l.placement {
		if !l.placed[node] && bytes.Contains(b, name) {
			l.takePlacement(m, node)
		}
	}
}

// Odd returns what taking the wants and haves taken so far said was out
// of shape, in the order taken.
func (l *Lazy) Odd() []error { return l.odd }

// take takes node's want and have of module into m, once; a nil Lazy
// takes nothing (m holds every one).
func (l *Lazy) take(m *state.Mesh, node, module string) {
	if l == nil {
		return
	}
	pair := node + "." + module
	if l.took[pair] {
		return
	}
	l.took[pair] = true
	wk := mesh.WantKey{Node: node, Module: module}.String()
	if b, ok := l.wants[wk]; ok {
		if t := m.Take(bus.Change{Bucket: mesh.WantsBucket, Key: wk, Value: b}); t.Odd != nil {
			l.odd = append(l.odd, t.Odd)
		}
	}
	hk := mesh.HaveKey{Node: node, Module: module}.String()
	if b, ok := l.haves[hk]; ok {
		if t := m.Take(bus.Change{Bucket: mesh.HaveBucket, Key: hk, Value: b}); t.Odd != nil {
			l.odd = append(l.odd, t.Odd)
		}
	}
}

// takeFor takes the want and have that a change of the wants or haves
// names before the change is taken, so that a later read takes nothing
// over it.
func (l *Lazy) takeFor(m *state.Mesh, ch bus.Change) {
	if l == nil {
		return
	}
	switch ch.Bucket {
	case mesh.PlacementBucket:
		l.takePlacement(m, ch.Key)
	case mesh.BuildsBucket:
		if k, err := mesh.ParseBuildKey(ch.Key); err == nil {
			l.takeNodesOf(m, k.Module)
		}
	case mesh.ModulesBucket:
		l.takeNodesOf(m, ch.Key)
	case mesh.ManifestsBucket:
		// A manifest's change composes the nodes of the modules whose
		// builds or trunk name it.
		m.Builds(func(b mesh.Build) {
			if mesh.ManifestKey(b.Manifest) == ch.Key {
				l.takeNodesOf(m, b.Module)
			}
			if d, ok := m.Trunk(b.Module); ok && mesh.ManifestKey(d) == ch.Key {
				l.takeNodesOf(m, b.Module)
			}
		})
	case mesh.WantsBucket:
		if k, err := mesh.ParseWantKey(ch.Key); err == nil {
			l.take(m, k.Node, k.Module)
		}
	case mesh.HaveBucket:
		if k, err := mesh.ParseHaveKey(ch.Key); err == nil && k.Module != "" {
			l.take(m, k.Node, k.Module)
		}
	}
}
