package dryrun

import (
	"strings"

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
	changed     bool // the run changed the mesh before it stopped
	// consumers maps a module to the nodes whose placed modules require it
	// (see consumersOf), made at the first need.
	consumers map[string][]string
}

// lacks reports whether the run read what the mesh does not hold.
func (v *view) lacks() bool { return len(v.missing)+len(v.missingDeps) > 0 }

func (v *view) missed() Missing {
	return Missing{Nodes: sortedKeys(v.missing), Dependents: v.missingDeps, Changed: v.changed}
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

// consumersOf returns the nodes whose placed modules, at any build the seat
// composes them at (their want's, their have's, their newest), require
// module, or, for mesh-vault, an offer with a credential: a superset of
// the nodes the seat has learned require it.
func (v *view) consumersOf(module string) []string {
	if v.consumers == nil {
		v.consumers = consumers(v.Mesh)
	}
	return v.consumers[module]
}

// consumers maps each module to the nodes whose placed modules require it
// (see consumersOf), each node once, in name order.
func consumers(m *state.Mesh) map[string][]string {
	out := map[string][]string{}
	for _, node := range m.Nodes() {
		seen := map[string]bool{}
		add := func(mod string) {
			if !seen[mod] {
				seen[mod] = true
				out[mod] = append(out[mod], node)
			}
		}
		placed, _ := m.Placed(node)
		for _, mod := range placed {
			for _, b := range composedBuilds(m, node, mod) {
				man, err := m.Manifest(b.Manifest)
				if err != nil {
					continue
				}
				for _, req := range man.Requires {
					add(req.From)
					if credentialOf(m, req) {
						add(mesh.VaultModule)
					}
				}
			}
		}
	}
	return out
}

// composedBuilds returns the builds the seat may compose mod at on node:
// its want's, its have's and its newest.
func composedBuilds(m *state.Mesh, node, mod string) []mesh.Build {
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
