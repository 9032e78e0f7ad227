package compose

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The whys of holding a module (written into its refusal), of problems, and
// of each provision state. Each names the key, node, provider or state it
// is about, so that an operator can act on it without the docs.

func whyBadModuleName(m string) string {
	return fmt.Sprintf("module name %q is not a valid token (lower-case [a-z0-9][a-z0-9-]*)", m)
}

func whyNoBuild(m string) string {
	return fmt.Sprintf("no build of %s is known (mesh-builder_builds has no %s.<fp>)", m, m)
}

func whyWantUnknown(m, fp string) string {
	return fmt.Sprintf("its want names build %s of %s, which is not known", fp, m)
}

func whyWantUndecodable(m string, err error) string {
	return fmt.Sprintf("the want of %s cannot be decoded: %v", m, err)
}

func whyHaveUnknown(m, fp string) string {
	return fmt.Sprintf("it has no want and its have runs build %s of %s, which is not known", fp, m)
}

func whyManifestMissing(m, fp, digest string) string {
	return fmt.Sprintf("the manifest %s of %s build %s is missing", digest, m, fp)
}

func whyManifestInvalid(m, fp, digest string, err error) string {
	return fmt.Sprintf("the manifest %s of %s build %s is not valid: %v", digest, m, fp, err)
}

func whyManifestOtherModule(m, fp, other string) string {
	return fmt.Sprintf("the manifest of %s build %s names module %q", m, fp, other)
}

// The parts of a requirement's why that say where its provider is, when
// no node can be chosen.
const whereNowhere = "is placed on no node"

func whereNotOn(r mesh.Requirement) string {
	return "is not placed on " + r.On
}

func whereSeveral(nodes []string) string {
	return fmt.Sprintf("is placed on several nodes (%s) and none is chosen: pin one with \"on\"", strings.Join(nodes, ", "))
}

// whyRequirement is the why of a requirement that cannot be met, at key k
// of the held module: every reason, where (a where* text, or empty when a
// node is chosen) and what the provider's trunk manifest (pman, or the
// error reading it) offers: "g14.grafana.oidc: it requires oidc from
// keycloak, which is placed on no node and offers oidc-client, not oidc".
func whyRequirement(k mesh.ProvisionKey, r mesh.Requirement, where string, pman *mesh.Manifest, err error) string {
	var reasons []string
	if where != "" {
		reasons = append(reasons, where)
	}
	switch {
	case err == ErrNoManifest:
		reasons = append(reasons, "has no trunk manifest known (mesh-indexer_modules has no "+r.From+")")
	case err != nil:
		reasons = append(reasons, fmt.Sprintf("has a trunk manifest that is not valid: %v", err))
	default:
		if _, ok := pman.Offer(r.Provision); !ok {
			reasons = append(reasons, "offers "+pman.Offered()+", not "+r.Provision)
		}
	}
	from := r.From
	if r.On != "" {
		from += " on " + r.On
	}
	return fmt.Sprintf("%s: it requires %s from %s, which %s", k, r.Provision, from, strings.Join(reasons, " and "))
}

func problemNewest(m, fp, why string) string {
	return fmt.Sprintf("%s at its newest build %s is held: %s (the plan at its want stands)", m, fp, why)
}

func problemNoVault(key string) string {
	return fmt.Sprintf("no node runs %s, so the credential %s has no provider", mesh.VaultModule, key)
}

func problemSeveralVaults(key string, nodes []string) string {
	return fmt.Sprintf("%s is placed on several nodes (%s), so the credential %s has no provider",
		mesh.VaultModule, strings.Join(nodes, ", "), key)
}

func problemPlacement(node string, err error) string {
	return fmt.Sprintf("the placement of %s cannot be decoded, so nothing on it was composed: %v", node, err)
}

// Whys of provision states.

func whyRetiring(k mesh.ProvisionKey, p mesh.Provision) string {
	return fmt.Sprintf("no build wanted or placed on %s requires %s of %s on %s any more",
		k.Node, p.Provision, p.Provider.Module, p.Provider.Node)
}

// The whys a composition of a settled mesh says again for many keys are
// appended to a buffer rather than made with fmt: a composition compares the
// bytes with the key's stored why and makes a string only when they differ
// (see judge.text).

func appendWhyNoEntry(b []byte, provider mesh.Ref, readsPlans bool) []byte {
	b = append(b, "asked of "...)
	b = appendRef(b, provider)
	b = append(b, "; waits for its entry in "...)
	b = append(b, mesh.BoundBucket(provider.Module)...)
	if !readsPlans {
		b = append(b, "; "...)
		b = append(b, provider.Module...)
		b = append(b, " does not read mesh-provisioner.plans, so its helper will never answer this key"...)
	}
	return b
}

// whyEntryLost is the why of a key whose provider's entry was deleted or
// purged at about now; said is what the entry said last ([Said]).
func whyEntryLost(provider mesh.Ref, said string, now time.Time) string {
	return lostPrefix(provider) + now.UTC().Format(time.RFC3339) + " (it said last: " + said + ")"
}

// saidBefore returns what an entry of provider said as the key p still
// says it, when only an entry can have made p say it: provided with a
// reference, or failed or waits quoting the entry ("postgres on control
// says failed: disk full").
func saidBefore(p *mesh.Provision, provider mesh.Ref) (string, bool) {
	if p.Provider != provider {
		return "", false
	}
	switch p.State {
	case mesh.Provided:
		if p.Reference == nil {
			return "", false
		}
		return Said(mesh.Entry{State: mesh.Provided, VaultName: p.Reference.ID, Generation: p.Reference.Generation}), true
	case mesh.Failed, mesh.Waits:
		prefix := string(appendWhyEntryOutcome(nil, provider, p.State, ""))
		prefix = strings.TrimSuffix(prefix, "it gave no why")
		if why, ok := strings.CutPrefix(p.Why, prefix); ok {
			return Said(mesh.Entry{State: p.State, Why: why}), true
		}
	}
	return "", false
}

// IsLostEntryWhy reports whether why is the why of a key whose provider's
// entry was deleted or purged ("asked of <provider> on <node>; its entry
// in <provider>_bound is gone since ..."); it makes no string (a settled
// mesh asks it of every key with no entry).
func IsLostEntryWhy(why string, provider mesh.Ref) bool {
	for _, part := range [...]string{"asked of ", provider.Module, " on ", provider.Node, "; its entry in ",
		provider.Module, boundSuffix, " is gone since "} {
		var ok bool
		if why, ok = strings.CutPrefix(why, part); !ok {
			return false
		}
	}
	return true
}

// boundSuffix ends the name of every <provider>_bound bucket.
var boundSuffix = mesh.BoundBucket("")

func lostPrefix(provider mesh.Ref) string {
	return "asked of " + provider.Module + " on " + provider.Node + "; its entry in " + mesh.BoundBucket(provider.Module) + " is gone since "
}

// Said says what an entry says: "provided, vault name V, generation N",
// "failed: <why>", "waits: <why>", or its state and why when it is none of
// these.
func Said(e mesh.Entry) string {
	state, why := e.Outcome()
	switch state {
	case mesh.Provided:
		s := string(state)
		if e.VaultName != "" {
			s += ", vault name " + e.VaultName
		}
		if e.Generation != 0 {
			s += ", generation " + strconv.FormatInt(e.Generation, 10)
		}
		return s
	case "":
		state = "no state"
	}
	if why == "" {
		return string(state)
	}
	return string(state) + ": " + why
}

// appendRef appends "<module> on <node>".
func appendRef(b []byte, r mesh.Ref) []byte {
	b = append(b, r.Module...)
	b = append(b, " on "...)
	return append(b, r.Node...)
}

// appendWhyProviderLeft is the why of a key whose provider is no longer
// placed on its node: nodes are where it is placed now (none: it left the
// mesh).
func appendWhyProviderLeft(b []byte, provider mesh.Ref, nodes []string) []byte {
	b = append(b, "asked of "...)
	b = appendRef(b, provider)
	if len(nodes) == 0 {
		b = append(b, ", which is placed on no node any more"...)
	} else {
		b = append(b, ", which is no longer placed on "...)
		b = append(b, provider.Node...)
		b = append(b, " (it is placed on "...)
		for i, n := range nodes {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, n...)
		}
		b = append(b, ')')
	}
	return append(b, ": nothing answers this key"...)
}

func whyEntryUndecodable(provider mesh.Ref, err error) string {
	return fmt.Sprintf("the entry of %s for this key cannot be decoded: %v", provider.Module, err)
}

func whyEntryOdd(provider mesh.Ref, state mesh.State, why string) string {
	if state == mesh.Provided {
		return fmt.Sprintf("the entry of %s says provided, but %s", provider.Module, why)
	}
	w := fmt.Sprintf("the entry of %s says state %q, which is not provided, failed or waits", provider.Module, state)
	if why != "" {
		w += ": " + why
	}
	return w
}

func appendWhyEntryOutcome(b []byte, provider mesh.Ref, state mesh.State, why string) []byte {
	if why == "" {
		why = "it gave no why"
	}
	b = appendRef(b, provider)
	b = append(b, " says "...)
	b = append(b, state...)
	b = append(b, ": "...)
	return append(b, why...)
}

// whyDependsOn is the why of a key that waits for key, a key it depends on
// whose state is not provided; it quotes that key's own why.
func appendWhyDependsOn(b []byte, key string, state mesh.State, why string) []byte {
	b = append(b, "waits for "...)
	b = append(b, key...)
	if state == "" {
		return append(b, ", which is not asked yet"...)
	}
	if why == "" {
		why = "it gives no why"
	}
	b = append(b, ", which is "...)
	b = append(b, state...)
	b = append(b, ": "...)
	return append(b, why...)
}

func appendWhyNoProvider(b []byte, key, problem string) []byte {
	b = append(b, "waits for "...)
	b = append(b, key...)
	b = append(b, ", which has no provider: "...)
	return append(b, problem...)
}

// NoProviderOf returns the [Need.NoProvider] that the stored provision p
// was judged with, read back from its why (what the judge wrote
// for it: appendWhyNoProvider, or appendWhyHasNoProvider for a credential
// key), or "" when its why says none. A dry run gives it to a need it
// takes from a stored provision, as the seat learned it.
func NoProviderOf(p mesh.Provision) string {
	var prefix string
	if len(p.DependsOn) > 0 {
		prefix = "waits for " + p.DependsOn[0] + ", which has no provider: "
	} else if p.Provision == mesh.CredentialProvision {
		prefix = "asked of " + p.Provider.Module + ": "
	} else {
		return ""
	}
	problem, ok := strings.CutPrefix(p.Why, prefix)
	if !ok || !strings.HasSuffix(problem, " has no provider") {
		return ""
	}
	return problem
}

// appendWhyHasNoProvider is the why of a credential key still needed
// whose vault is gone or not chosen: "asked of mesh-vault: no node runs
// mesh-vault, so the credential K has no provider". It names no node: the
// key says the same whether a vault ever answered it (its provider is then
// that vault, where its store is) or none did.
func appendWhyHasNoProvider(b []byte, provider mesh.Ref, problem string) []byte {
	b = append(b, "asked of "...)
	b = append(b, provider.Module...)
	b = append(b, ": "...)
	return append(b, problem...)
}

func appendWhyNotRunning(b []byte, provider mesh.Ref) []byte {
	b = append(b, "waits for "...)
	b = appendRef(b, provider)
	return append(b, " to run"...)
}

func whyHaveUndecodable(provider mesh.Ref, err error) string {
	return fmt.Sprintf("the have of %s on %s cannot be decoded: %v", provider.Module, provider.Node, err)
}

func appendWhyHaveFailed(b []byte, provider mesh.Ref, h mesh.Have) []byte {
	detail := h.Detail
	if detail == "" {
		detail = "no detail given"
	}
	b = appendPhase(b, provider, h)
	b = append(b, ": "...)
	return append(b, detail...)
}

func appendWhyHaveNotReady(b []byte, provider mesh.Ref, h mesh.Have, want string) []byte {
	b = appendPhase(b, provider, h)
	if want != "" && h.Fingerprint != want {
		b = append(b, ", running build "...)
		b = append(b, h.Fingerprint...)
		b = append(b, " where its want names "...)
		b = append(b, want...)
	}
	return b
}

// appendPhase appends "<module> on <node> is <phase> with health <health>".
func appendPhase(b []byte, provider mesh.Ref, h mesh.Have) []byte {
	b = appendRef(b, provider)
	b = append(b, " is "...)
	b = append(b, h.Phase...)
	b = append(b, " with health "...)
	return append(b, h.Health...)
}

func whyProviderUnknown(provider mesh.Ref, err error) string {
	if err == ErrNoManifest {
		return fmt.Sprintf("the trunk manifest of %s is not known, so nothing says how it answers", provider.Module)
	}
	return fmt.Sprintf("the trunk manifest of %s is not valid: %v", provider.Module, err)
}

func whyOfferGone(provider mesh.Ref, provision string) string {
	return fmt.Sprintf("%s no longer offers %s", provider.Module, provision)
}

// The notes a retiring key's why may carry after whyRetiring; each starts
// with "; " and is taken off again when it no longer holds.
const (
	noteAfterDependents = "; it is asked about once the keys that depend on it are retired: "
	noteApproved        = "; approved with yes, but "
)

// whyAfterDependents is added to the why of a retiring key that deps still
// depend on: it is not asked about until they are retired.
func whyAfterDependents(deps []string) string {
	return noteAfterDependents + strings.Join(deps, ", ")
}

// AfterDependents returns the keys a retiring key's why says it waits
// for before it is asked about ("k1, k2"), and whether it says so.
func AfterDependents(why string) (string, bool) {
	_, deps, ok := strings.Cut(why, noteAfterDependents)
	return deps, ok
}

// withoutAfterDependents takes off what whyAfterDependents added.
func withoutAfterDependents(why string) string {
	base, _, _ := strings.Cut(why, noteAfterDependents)
	return base
}

// withoutNotes takes off what whyAfterDependents and the whyApproved texts
// added.
func withoutNotes(why string) string {
	base, _, _ := strings.Cut(withoutAfterDependents(why), noteApproved)
	return base
}

// whyPromiseChanged is the why an open ask of key is withdrawn with when
// what its Remove said no longer holds: it is asked anew.
func whyPromiseChanged(key string, provider mesh.Ref) string {
	return "what " + provider.Module + " on " + provider.Node + " can remove for the key " + key +
		" changed since it was asked (it left its node, or its entry came or went): it is asked anew"
}

func whyYesBeforeDependents(key string, w *mesh.Warrant, deps []string) string {
	return fmt.Sprintf("the warrant %q of ask %s for key %s is not taken: %s still depend on it; "+
		"it is asked again once they are retired", w.Option, w.Ask, key, strings.Join(deps, ", "))
}

func whyApprovedNotRemoved(provider mesh.Ref, entryWhy string) string {
	return fmt.Sprintf("%s%s on %s has not removed it yet; its entry says: %s", noteApproved, provider.Module, provider.Node, entryWhy)
}

func whyApprovedNoHave(provider mesh.Ref) string {
	return fmt.Sprintf("%s%s on %s is not running (it has no have), so it does not remove its entry in %s yet",
		noteApproved, provider.Module, provider.Node, mesh.BoundBucket(provider.Module))
}

func whyApprovedNotRunning(provider mesh.Ref, h mesh.Have) string {
	return fmt.Sprintf("%s%s on %s is %s, not running, so it does not remove its entry in %s yet",
		noteApproved, provider.Module, provider.Node, h.Phase, mesh.BoundBucket(provider.Module))
}

func whyApprovedHaveUndecodable(provider mesh.Ref, err error) string {
	return fmt.Sprintf("%sthe have of %s on %s cannot be decoded (%v), so it may not remove its entry in %s",
		noteApproved, provider.Module, provider.Node, err, mesh.BoundBucket(provider.Module))
}

func problemNoName(node, why string) string {
	return fmt.Sprintf("a module with no name is placed on %s, so no refusal can name it: %s", node, why)
}
