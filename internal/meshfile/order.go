package meshfile

import (
	"sort"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// placementOrder returns the nodes of the file in the order [File.Diff]
// writes their placement keys, so that a seat composing a node as soon as
// its placement appears finds the providers it requires already placed:
//
//   - first the provider nodes, those that host a module some manifest
//     requires (a requires[].from of any build of any module) or
//     mesh-vault, then the rest;
//   - within that, a node comes after the nodes hosting the providers its
//     modules require (and after mesh-vault's node when any of its
//     modules requires anything, for the credentials): for the homelab,
//     control (postgres, keycloak, ...) before ace (gitea, which
//     woodpecker requires), before g14 and shanks;
//   - ties, and nodes on a cycle of requirements, go by name.
func (f *File) placementOrder() []string {
	required := map[string]bool{mesh.VaultModule: true} // provider modules
	requires := map[string]map[string]bool{}            // module -> modules it requires
	for _, m := range f.Modules {
		for _, b := range m.Builds {
			for _, r := range b.Manifest.Requires {
				required[r.From] = true
				if requires[m.Name] == nil {
					requires[m.Name] = map[string]bool{}
				}
				requires[m.Name][r.From] = true
			}
		}
	}
	hosts := map[string][]string{} // module -> nodes it is placed on
	provider := map[string]bool{}  // node -> hosts a provider module
	for _, node := range f.Nodes {
		for _, m := range f.Placement[node] {
			hosts[m] = append(hosts[m], node)
			if required[m] {
				provider[node] = true
			}
		}
	}
	// after[n] holds the nodes n waits for.
	after := map[string]map[string]bool{}
	wait := func(n, p string) {
		if n == p || after[n][p] {
			return
		}
		if after[n] == nil {
			after[n] = map[string]bool{}
		}
		after[n][p] = true
	}
	for _, node := range f.Nodes {
		for _, m := range f.Placement[node] {
			if len(requires[m]) == 0 {
				continue
			}
			for _, p := range hosts[mesh.VaultModule] {
				wait(node, p)
			}
			for from := range requires[m] {
				for _, p := range hosts[from] {
					wait(node, p)
				}
			}
		}
	}
	less := func(a, b string) bool {
		if provider[a] != provider[b] {
			return provider[a]
		}
		return a < b
	}
	left := append([]string(nil), f.Nodes...)
	sort.Slice(left, func(i, j int) bool { return less(left[i], left[j]) })
	done := map[string]bool{}
	out := make([]string, 0, len(left))
	for len(left) > 0 {
		// The first node, in (provider, name) order, that waits for no node
		// not yet written; on a cycle, the first node, so that provider
		// nodes still come before the rest.
		pick := -1
		for i, n := range left {
			ready := true
			for p := range after[n] {
				if !done[p] {
					ready = false
					break
				}
			}
			if ready {
				pick = i
				break
			}
		}
		if pick < 0 || provider[left[0]] && !provider[left[pick]] {
			pick = 0
		}
		n := left[pick]
		left = append(left[:pick], left[pick+1:]...)
		done[n] = true
		out = append(out, n)
	}
	return out
}
