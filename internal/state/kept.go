package state

import (
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// kept is a provision as the mesh holds it: what its key does not say. Its
// provision, local and consumer are the key's own tokens (checkProvision
// admits no other), so they are cut from the key when the provision is
// read ([Mesh.Provision]) rather than held once more per key; its
// provider is one shared copy per provider (refs), its state an index.
// At 112 bytes it is held in the map's own slots (a value over 128 bytes
// is a separate object per key), with 7 words the collector scans where
// mesh.Provision has 13.
type kept struct {
	provider  *mesh.Ref
	why       string
	dependsOn []string
	ask       string
	reference *mesh.Reference
	warrant   *mesh.Warrant
	at        time.Time
	state     uint8 // index into states
}

// states are the states a kept provision can have (checkProvision admits
// no other), by kept.state.
var states = [...]mesh.State{mesh.Asked, mesh.Provided, mesh.Failed, mesh.Waits, mesh.Retiring}

// stateIndex returns the index of s in states, or -1.
func stateIndex(s mesh.State) int {
	for i, st := range states {
		if st == s {
			return i
		}
	}
	return -1
}

// keep returns p as the mesh keeps it. p must have passed checkProvision.
func (m *Mesh) keep(p mesh.Provision) kept {
	return kept{
		provider:  m.ref(p.Provider),
		why:       m.names.String(p.Why),
		dependsOn: p.DependsOn,
		ask:       p.Ask,
		reference: p.Reference,
		warrant:   p.Warrant,
		at:        p.At,
		state:     uint8(stateIndex(p.State)),
	}
}

// provision returns the provision kept at key: k with the provision,
// local and consumer of key (cut from it, as checkProvision found them).
func (k *kept) provision(key string) mesh.Provision {
	node, rest, _ := strings.Cut(key, ".")
	consumer, rest, _ := strings.Cut(rest, ".")
	provision, local, _ := strings.Cut(rest, ".")
	return mesh.Provision{
		Provision: provision,
		Local:     local,
		Consumer:  mesh.Ref{Module: consumer, Node: node},
		Provider:  *k.provider,
		State:     states[k.state],
		Why:       k.why,
		DependsOn: k.dependsOn,
		Reference: k.reference,
		Ask:       k.ask,
		Warrant:   k.warrant,
		At:        k.at,
	}
}

// need is what a composition found needed at a key, as the mesh keeps it
// (Mesh.Composed): what the key does not say. A composition's Need of
// key has the key's provision, local and consumer (mesh.ProvisionKey and
// mesh.AppendCredentialKey make the key of these), so they are cut from
// it when the need is read ([Mesh.NeedOf]) rather than held once more per
// key and node; the provider is the mesh's shared copy. 64 bytes, in a
// slice per node, where the composition's Need is 152 bytes cut from a
// block of its own, pointed to from a map per node.
type need struct {
	key        string
	provider   *mesh.Ref
	dependsOn  []string
	noProvider string
}

// need returns the composition's Need that n keeps.
func (n *need) need() *compose.Need {
	node, rest, _ := strings.Cut(n.key, ".")
	consumer, rest, _ := strings.Cut(rest, ".")
	provision, local, _ := strings.Cut(rest, ".")
	return &compose.Need{
		Key:        n.key,
		Provision:  provision,
		Local:      local,
		Consumer:   mesh.Ref{Module: consumer, Node: node},
		Provider:   *n.provider,
		DependsOn:  n.dependsOn,
		NoProvider: n.noProvider,
	}
}

// ref returns the mesh's one shared copy of r ([intern.Table.SharedRef]).
func (m *Mesh) ref(r mesh.Ref) *mesh.Ref { return m.names.SharedRef(r) }
