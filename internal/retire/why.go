package retire

import (
	"fmt"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// WhyRetired is the why the seat says when it deletes the key k of p,
// approved with "yes": what its provider removed, as how says (a credential
// only where there is one), and what is left to clean by hand when its
// provider left with it.
func WhyRetired(k mesh.ProvisionKey, p mesh.Provision, how Removal) string {
	at := p.Provider.Module + " on " + p.Provider.Node
	switch how {
	case RemovesNothing:
		return "retired on the operator's warrant: " + at + " answers " + k.Provision +
			" by running and keeps nothing for " + p.Consumer.Module + ", so nothing was removed"
	case NothingGiven:
		return "retired on the operator's warrant: " + at + " kept no entry for it, so there was nothing to remove"
	case ProviderGone:
		return "retired on the operator's warrant: " + at + " left " + p.Provider.Node +
			" with its entry, and nothing removed it: " + CleanByHand(k, p)
	}
	if k.Provision == mesh.CredentialProvision {
		return "retired on the operator's warrant: " + at + " removed the credential"
	}
	return "retired on the operator's warrant: " + at + " removed what it set up for " + p.Consumer.Module
}

// CleanByHand says what is left when the provider of key k left its node
// with its entry: the entry and what it made.
func CleanByHand(k mesh.ProvisionKey, p mesh.Provision) string {
	made := "what it set up for " + p.Consumer.Module + ", such as a login"
	if k.Provision == mesh.CredentialProvision {
		made = "the credential it keeps in its store"
	}
	return "clean by hand its entry " + k.String() + " in " + mesh.BoundBucket(p.Provider.Module) + " and " + made
}

// describeNoRemoval writes the texts of the ask for a key whose provider
// removes nothing on yes (how is not [RemovesEntry]).
func describeNoRemoval(key mesh.ProvisionKey, p mesh.Provision, how Removal) texts {
	consumer, cnode := p.Consumer.Module, p.Consumer.Node
	if consumer == "" {
		consumer, cnode = key.Consumer, key.Node
	}
	at := p.Provider.Module + " on " + p.Provider.Node
	what := key.Provision + paren(key.Local)
	no := "Nothing is removed: the key stays retiring, and you are not asked again until it changes."
	head := describe(key, p).headline // the question stays; what yes does is what differs
	needs := fmt.Sprintf("%s on %s no longer needs the %s of %s (key %s). ", consumer, cnode, what, at, key)
	stays := fmt.Sprintf(" The %s itself and its data stay where they are.", key.Provision)
	if key.Provision == mesh.CredentialProvision {
		stays = " What the credential gives access to and its data stay where they are."
	}
	switch how {
	case RemovesNothing:
		return texts{
			headline: head,
			explanation: needs + fmt.Sprintf("%s answers it by running and keeps nothing for %s, so nothing is removed: "+
				"if you agree, the key is dropped and %s keeps running as it is.", at, consumer, p.Provider.Module) + stays,
			yes: fmt.Sprintf("The key is dropped; nothing of %s is removed.", at),
			no:  no,
		}
	case NothingGiven:
		return texts{
			headline: head,
			explanation: needs + fmt.Sprintf("%s keeps no entry for it (it never answered it, or removed it already), "+
				"so there is nothing for it to remove: if you agree, the key is dropped.", at) + stays,
			yes: fmt.Sprintf("The key is dropped; %s has nothing to remove for it.", at),
			no:  no,
		}
	}
	return texts{
		headline: head,
		explanation: needs + fmt.Sprintf("%s is no longer placed on %s, so nothing running can remove what it set up "+
			"for %s. If you agree, the key is dropped; %s.", p.Provider.Module, p.Provider.Node, consumer, CleanByHand(key, p)) + stays,
		yes: fmt.Sprintf("The key is dropped; nothing removes what %s set up: %s.", at, CleanByHand(key, p)),
		no:  no,
	}
}

// The whys of [Decide]. Each names the key, and the ask and option where
// there is one; every refusal ends by saying the key is left as it was.
const (
	whyNotRetiring   = "key %s is %s, not retiring: there is nothing to decide"
	whyNoAsk         = "key %s is retiring but has raised no ask yet"
	whyDecided       = "key %s already holds the warrant %q of ask %s"
	whyNoRecord      = "ask %s of key %s is not recorded by the ask router yet"
	whyOpen          = "ask %s of key %s is still open"
	whyChosen        = "ask %s of key %s was answered %q by %s at %s"
	whyExpired       = "ask %s of key %s expired with no choice; it is cleared and asked again when the key changes"
	whyWithdrawn     = "ask %s of key %s was withdrawn by %s (%s) with no choice; it is cleared and asked again when the key changes"
	whyOtherRecord   = "the record read for ask %s of key %s holds ask %q; the key is left as it was"
	whyOtherAbout    = "the record of ask %s for key %s is about %q, not %q; the key is left as it was"
	whyOtherAsker    = "the warrant of ask %s for key %s is from asker %q, not %q; the key is left as it was"
	whyOtherAskAsker = "ask %s of key %s was raised by %q, not %q; the key is left as it was"
	whyOtherAskID    = "the record of ask %s for key %s holds a warrant for ask %q; the key is left as it was"
	whyNoWarrant     = "ask %s of key %s is answered but its record holds no warrant; the key is left as it was"
	whyOutcome       = "ask %s of key %s is %s but its warrant's outcome is %q; the key is left as it was"
	whyNotOffered    = "the warrant of ask %s for key %s chose %q, which the ask never offered; the key is left as it was"
	whyBinds         = "the warrant of ask %s for key %s chose %q but binds %q, not this act's digest %s; the key is left as it was"
	whyNobody        = "the warrant of ask %s for key %s chose %q but names no one who answered; the key is left as it was"
	whyByKind        = "the warrant of ask %s for key %s chose %q by an identity of kind %q, not %q (an operator's NATS user); the key is left as it was"
	whyByTwo         = "the warrant of ask %s for key %s chose %q by %q, whose identity is %q: it names two users; the key is left as it was"
	whyByParty       = "the warrant of ask %s for key %s chose %q by the user %q, which is none of the operators' (it is the product's own or a node's client); the key is left as it was"
	whyNoTime        = "the warrant of ask %s for key %s chose %q but says no time; the key is left as it was"
	whyFuture        = "the warrant of ask %s for key %s chose %q at %s, after the seat's now %s: it cannot be true; the key is left as it was"
	whyNoRaised      = "the warrant of ask %s for key %s chose %q but its ask id says no time it was raised; the key is left as it was"
	whyBeforeRaised  = "the warrant of ask %s for key %s chose %q at %s, before the ask was raised at %s: it cannot be true; the key is left as it was"
	whyAfterExpiry   = "the warrant of ask %s for key %s chose %q at %s, not before the ask expired at %s: it cannot be true; the key is left as it was"
	whySigned        = "the warrant of ask %s for key %s chose %q by %q, but no operator signed it: %s; the key is left as it was"
	whyRecordState   = "the record of ask %s for key %s is in the unknown state %q; the key is left as it was"
)

// whyVanished is added to the why of a retiring key whose ask's record
// vanished: see [Vanished].
const whyVanished = "its ask %s vanished from " + mesh.RecordsBucket + " before anyone answered it, so it was asked again"

// Vanished returns the why of a retiring key whose ask id vanished from
// mesh-asks_records before anyone answered it: why (without what an earlier
// vanished ask added) followed by "; its ask <id> vanished from
// mesh-asks_records before anyone answered it, so it was asked again".
func Vanished(why, id string) string {
	base, _, _ := strings.Cut(why, "; its ask ")
	return base + "; " + fmt.Sprintf(whyVanished, id)
}
