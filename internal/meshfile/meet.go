package meshfile

import (
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// meet checks that some provider of the file can meet each requirement of
// the builds the seat composes (a module's newest build, a build a want
// names, a build a have runs where no want is), once every module, node
// and placement is known. Refused, each at its line:
//
//   - a from that names no module of the file;
//   - a provision the provider's trunk manifest (its newest build) does
//     not offer, saying what it offers;
//   - an on that names no node of the file.
//
// Said as warnings, since a later file may place what is missing: a
// provider that is a module of the file but placed on no node, an on
// node where the provider is not placed (both only for a consumer placed
// on some node: one placed nowhere is held nowhere), and a provision whose offer has a
// credential (own or shared), required by a module placed on some node,
// when no node places mesh-vault, the provider of every credential (spec
// 4): its credential stays asked until a node places mesh-vault, which a
// running mesh follows with no restart. A requirement of a build the seat
// does not compose (an older build no want names and no have runs) is not
// refused: what it names is said as a warning.
func (p *parser) meet(f *File, modules map[string]*moduleInfo, refs []ref) {
	vault := false
	placed := map[string]bool{} // modules placed on some node
	for _, node := range f.Nodes {
		for _, m := range f.Placement[node] {
			placed[m] = true
			if m == mesh.VaultModule {
				vault = true
			}
		}
	}
	for _, r := range refs {
		if r.fp == "" {
			continue // its build's fp is not valid: said already
		}
		say := p.errf
		if !f.composes(r.consumer, r.fp) {
			say = p.warnf
		}
		what := describe(r.req.Provision, r.req.Local)
		if modules[r.req.From] == nil {
			say(r.n, "%s requires %s from %q, which is no module of this file (a provider is a module under modules)", r.consumer, what, r.req.From)
			continue
		}
		if r.req.On != "" && !f.HasNode(r.req.On) {
			say(r.on, "%s requires %s from %s on node %q, which is no node of this file", r.consumer, what, r.req.From, r.req.On)
		}
		provider := f.Module(r.req.From)
		if provider == nil || len(provider.Builds) == 0 {
			continue // its builds have problems: said already
		}
		trunk := provider.Trunk()
		offer, ok := trunk.Manifest.Offer(r.req.Provision)
		if !ok {
			say(r.provision, "%s requires %s from %s, which does not offer %s (%s offers %s, at its newest build %s)",
				r.consumer, what, r.req.From, r.req.Provision, r.req.From, trunk.Manifest.Offered(), trunk.Fingerprint)
			continue
		}
		switch {
		case !placed[r.consumer]:
			// Placed nowhere, the consumer is held nowhere: nothing to say.
		case !placed[r.req.From]:
			p.warnf(r.n, "%s requires %s from %s, which is placed on no node yet: the seat holds %s until %s is placed", r.consumer, what, r.req.From, r.consumer, r.req.From)
		case r.req.On != "" && f.HasNode(r.req.On) && !f.Placed(r.req.On, r.req.From):
			p.warnf(r.on, "%s requires %s from %s on %s, where %s is not placed yet: the seat holds %s until it is", r.consumer, what, r.req.From, r.req.On, r.req.From, r.consumer)
		}
		if credential(offer) && !vault && placed[r.consumer] && f.composes(r.consumer, r.fp) {
			p.warnf(r.item, "%s requires %s from %s, whose offer has a credential (credential: %s), and no node places %s, which provides every credential: it stays asked until a node places %s",
				r.consumer, what, r.req.From, offer.Credential, mesh.VaultModule, mesh.VaultModule)
		}
	}
}

// composes reports whether the seat composes build fp of module: it is the
// module's newest build, a want names it, or a have runs it on a node
// where no want names the module.
func (f *File) composes(module, fp string) bool {
	m := f.Module(module)
	if m == nil || len(m.Builds) == 0 {
		return false
	}
	if m.Trunk().Fingerprint == fp {
		return true
	}
	for _, wants := range f.Wants {
		if wants[module] == fp {
			return true
		}
	}
	for node, haves := range f.Haves {
		if h, ok := haves[module]; ok && h.Fingerprint == fp {
			if _, wanted := f.Wants[node][module]; !wanted {
				return true
			}
		}
	}
	return false
}

// credential reports whether an offer hands its consumers a credential
// from mesh-vault.
func credential(o mesh.Offer) bool {
	return o.Credential == mesh.CredentialOwn || o.Credential == mesh.CredentialShared
}
