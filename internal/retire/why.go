package retire

import (
	"fmt"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// WhyRetired is the why the seat says when it deletes a key approved with
// "yes" whose provider's entry is gone.
const WhyRetired = "retired: its provider removed its credential on the operator's warrant"

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
