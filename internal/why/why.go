package why

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The texts of the steps.
const (
	saysSeen           = "walked above"
	saysNoProvision    = "no such provision is kept (depended on, but the seat has not written it)"
	saysNoAsk          = "no ask raised yet: the seat raises one at the key's next composition"
	saysAskNotRecorded = "its ask is not recorded by the ask router (is mesh-asks running?)"
	roleProvider       = "provider"
	roleConsumer       = "consumer"
)

// StateRetired is the state of a walk's first step when the key asked
// about was retired: the seat deleted it on the operator's yes, and the
// next step is that ask and its answer.
const StateRetired = "retired"

// saysRetired says what became of a key deleted on the operator's yes to
// ask a: what its Remove option said it does; or, when pr (its provider,
// named by a) still keeps its entry, that it left its node with it and
// what the operator cleans by hand (clean, from [retire.CleanByHand]).
func saysRetired(a mesh.Ask, pr mesh.Ref, kept bool, clean string) string {
	if kept {
		return "no longer kept: the seat deleted it on the operator's warrant, but " + pr.Module + " on " + pr.Node +
			" left " + pr.Node + " with its entry and nothing removed it: " + clean
	}
	s := "no longer kept: the seat deleted it on the operator's warrant"
	if o, ok := a.Option("yes"); ok && o.Does != "" {
		s += "; its Remove said: " + o.Does
	}
	return s
}

// saysAfterDependents says that a retiring key is asked about only once
// the keys that depend on it (deps) are retired.
func saysAfterDependents(deps string) string {
	return "not asked yet: it is asked about once the keys that depend on it are retired: " + deps
}

// saysHeldKey says why the seat keeps no provision at k: its consumer is
// held (r), and named says whether the refusal names k.
func saysHeldKey(k mesh.ProvisionKey, r mesh.Refusal, named bool) string {
	s := "not kept: " + k.Consumer + " on " + k.Node + " is held, so the seat writes none of its new keys"
	if named {
		s += "; its refusal is about this key"
	}
	return s
}

// saysRemovedBy says which ask, answered by whom and when, removed a key.
func saysRemovedBy(r mesh.Record) string {
	w := r.Warrant
	return "removed on the answer " + w.Option + " of " + or(w.By.Who, w.By.Identity) + " at " +
		w.At.UTC().Format("2006-01-02 15:04Z") + " to " + r.Ask.ID + ": " + r.Ask.Headline
}

// saysEntryLost says that the provider removed its entry; last is what it
// said last, when known.
func saysEntryLost(pr mesh.Ref, last string) string {
	s := "no entry: " + pr.Module + " on " + pr.Node + " removed it"
	if last != "" {
		return s + " (it said last: " + last + ")"
	}
	return s + " (the key's why says when, and what it said last)"
}

func saysProvision(p mesh.Provision) string {
	if p.State == mesh.Provided {
		s := "provided by " + p.Provider.Module + " on " + p.Provider.Node
		if p.Reference != nil {
			s += fmt.Sprintf(" (%s, generation %d)", p.Reference.ID, p.Reference.Generation)
		}
		if p.Why != "" {
			s += "; " + p.Why // its provider's entry says more (a rotation not yet in force)
		}
		return s
	}
	return p.Why
}

func saysNoTrunk(pr mesh.Ref) string {
	return "the provider " + pr.Module + " has no trunk manifest (mesh-indexer_modules has no key " + pr.Module + ")"
}

func saysBadManifest(pr mesh.Ref, digest string, err error) string {
	return fmt.Sprintf("the provider %s's trunk manifest %s cannot be read: %v", pr.Module, digest, err)
}

// saysProviderLeft says that the provider is no longer placed on its node;
// nodes are where it is placed now.
func saysProviderLeft(pr mesh.Ref, nodes []string) string {
	if len(nodes) == 0 {
		return "the provider " + pr.Module + " is placed on no node any more: nothing answers this key"
	}
	return "the provider " + pr.Module + " is no longer placed on " + pr.Node + " (it is placed on " +
		strings.Join(nodes, ", ") + "): nothing answers this key"
}

func saysNoOffer(pr mesh.Ref, provision string) string {
	return "the provider " + pr.Module + "'s trunk manifest no longer offers " + provision
}

func saysEntryUndecodable(pr mesh.Ref, err error) string {
	return fmt.Sprintf("%s on %s wrote an entry that does not decode: %v", pr.Module, pr.Node, err)
}

func saysNoEntry(pr mesh.Ref, readsPlans bool) string {
	if !readsPlans {
		return "no entry from " + pr.Module + " on " + pr.Node + ", and its manifest does not read mesh-provisioner.plans: its helper will never answer"
	}
	return "no entry from " + pr.Module + " on " + pr.Node + " yet (is its provider running?)"
}

func saysEntry(pr mesh.Ref, state mesh.State, why string) string {
	if state == "" {
		state = "no state"
	}
	s := pr.Module + " on " + pr.Node + " says " + string(state)
	if why != "" {
		s += ": " + why
	}
	return s
}

func saysEntryKept(pr mesh.Ref) string {
	return pr.Module + " on " + pr.Node + " still keeps its entry: the key is deleted once it removes it"
}

func saysHaveUndecodable(pr mesh.Ref, err error) string {
	return fmt.Sprintf("the have of %s on %s does not decode: %v", pr.Module, pr.Node, err)
}

func saysNoHave(pr mesh.Ref) string {
	return "no have: " + pr.Module + " does not run on " + pr.Node + " (node-engine_have has no key " + pr.Node + "." + pr.Module + ")"
}

func saysHave(pr mesh.Ref, h mesh.Have, want string, hasWant bool) string {
	s := fmt.Sprintf("%s on %s is %s, health %s, at build %s", pr.Module, pr.Node, h.Phase, h.Health, or(h.Fingerprint, "-"))
	if hasWant && h.Fingerprint != want {
		s += " (its want names " + want + ")"
	}
	if h.Detail != "" {
		s += ": " + h.Detail
	}
	return s
}

func saysWarrant(p mesh.Provision, w mesh.Warrant) string {
	by := or(w.By.Who, w.By.Identity)
	if w.Option == "yes" {
		return "the operator " + strconv.Quote(by) + " answered yes (remove) to " + w.Ask + ": waiting for " + p.Provider.Module + " on " + p.Provider.Node + " to remove its entry"
	}
	return "kept: the operator " + strconv.Quote(by) + " answered " + w.Option + " to " + w.Ask + "; it is not asked again while nothing changes (unkeep asks again)"
}

func saysRecord(r mesh.Record) string {
	switch r.State {
	case mesh.RecordOpen:
		return "open for the operator until " + r.Ask.Expires.UTC().Format("2006-01-02 15:04Z") + ": " + r.Ask.Headline + " (answer " + r.Ask.ID + " yes|no)"
	case mesh.RecordExpired:
		s := "expired with no answer: asked again at the key's next change"
		if r.Warrant != nil && r.Warrant.Why != "" {
			s = "withdrawn: " + r.Warrant.Why
		}
		return s
	}
	if r.Warrant != nil {
		return "answered " + r.Warrant.Option + " by " + or(r.Warrant.By.Who, r.Warrant.By.Identity) + ": the seat takes the warrant at its next judging"
	}
	return "the ask is " + r.State
}

func saysRefusal(r mesh.Refusal, role string) string {
	s := r.Module + " on " + r.Node + " is held: " + r.Why
	if role != "" {
		s = "the " + role + " " + s
	}
	return s
}

func saysPlanUndecodable(err error) string { return fmt.Sprintf("the plan does not decode: %v", err) }

func saysPlan(p mesh.Plan, waiting int) string {
	s := fmt.Sprintf("plan of %s on %s at build %s, %d provisions", p.Module, p.Node, p.Fingerprint, len(p.Provisions))
	if waiting == 0 {
		return s + ", every one provided"
	}
	return s + fmt.Sprintf(", %d not provided", waiting)
}

func decodePlan(b []byte) (mesh.Plan, error) {
	var p mesh.Plan
	err := json.Unmarshal(b, &p)
	return p, err
}

func or(s, otherwise string) string {
	if strings.TrimSpace(s) == "" {
		return otherwise
	}
	return s
}
