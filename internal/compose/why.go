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

func whyProviderNowhere(r mesh.Requirement) string {
	return fmt.Sprintf("it requires %s from %s, which is placed on no node", r.Provision, r.From)
}

func whyProviderNotOn(r mesh.Requirement) string {
	return fmt.Sprintf("it requires %s from %s on %s, where %s is not placed", r.Provision, r.From, r.On, r.From)
}

func whyProviderSeveral(r mesh.Requirement, nodes []string) string {
	return fmt.Sprintf("it requires %s from %s, which is placed on several nodes (%s) and none is chosen: pin one with \"on\"",
		r.Provision, r.From, strings.Join(nodes, ", "))
}

func whyProviderNoManifest(r mesh.Requirement, err error) string {
	if err == ErrNoManifest {
		return fmt.Sprintf("it requires %s from %s, whose trunk manifest is not known", r.Provision, r.From)
	}
	return fmt.Sprintf("it requires %s from %s, whose trunk manifest is not valid: %v", r.Provision, r.From, err)
}

func whyNoOffer(r mesh.Requirement, m *mesh.Manifest) string {
	var names []string
	for _, o := range m.Provides {
		names = append(names, o.Name)
	}
	offers := "nothing"
	if len(names) > 0 {
		offers = strings.Join(names, ", ")
	}
	return fmt.Sprintf("it requires %s from %s, which offers no such provision (it offers %s)", r.Provision, r.From, offers)
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
// purged at about now; last is what the entry said.
func whyEntryLost(provider mesh.Ref, last mesh.Entry, now time.Time) string {
	return lostPrefix(provider) + now.UTC().Format(time.RFC3339) + " (it said last: " + Said(last) + ")"
}

// isWhyEntryLost reports whether why is a [whyEntryLost] of provider; it
// makes no string (a settled mesh asks it of every key with no entry).
func isWhyEntryLost(why string, provider mesh.Ref) bool {
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

func whyYesBeforeDependents(key string, w *mesh.Warrant, deps []string) string {
	return fmt.Sprintf("the warrant %q of ask %s for key %s is not taken: %s still depend on it; "+
		"it is asked again once they are retired", w.Option, w.Ask, key, strings.Join(deps, ", "))
}

func whyApprovedNotPlaced(provider mesh.Ref) string {
	return fmt.Sprintf("%s%s is not placed on %s any more, so nobody removes its entry in %s: "+
		"place it there again, or delete the entry", noteApproved, provider.Module, provider.Node, mesh.BoundBucket(provider.Module))
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
