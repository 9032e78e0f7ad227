package retire

import (
	"fmt"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Verdict is what [Decide] says the seat does with a retiring key.
type Verdict string

// The verdicts of [Decide].
const (
	// Wait: nothing to do yet. The key is not retiring, has no ask, already
	// holds a warrant, or its ask is not recorded or still open.
	Wait Verdict = "wait"
	// Warrant: write [Decision.Warrant] into the key.
	Warrant Verdict = "warrant"
	// Clear: the ask expired (or was withdrawn) with no choice; clear the key's ask so that it
	// is asked again at the key's next change.
	Clear Verdict = "clear"
	// Refuse: the record does not warrant this act for this key (tampered or
	// mismatched). The key is left as it was; the why is said.
	Refuse Verdict = "refuse"
)

// Decision is what to do with one retiring key after its ask's record
// changed. Why always says what was decided and why, naming the key, the
// ask and the option; Warrant is set only with the verdict [Warrant].
type Decision struct {
	Verdict Verdict
	Warrant *mesh.Warrant
	Why     string
}

// Decide decides for the provision p at key (its value in
// mesh-provisioner_provisions) from rec, the ask router's record at p.Ask in
// mesh-asks_records (the zero Record when there is none yet). asker is the
// module that raised the ask ([Asker] for the seat).
//
// Only a retiring key with an ask and no warrant yet is decided. A record
// of another ask, or of an ask about another key (two keys whose ids collide,
// such as a-b.c and a.b-c asked in the same second), is refused. A record
// still open, or not there, is [Wait]. An expired record (also one its asker
// withdrew) is [Clear]. An
// answered record is a [Warrant] only when its warrant names asker and this
// ask, chose an option that both the ask and [Ask] offer ([Yes] or [No]),
// binds [mesh.ActDigest] of (key, ask, option) and names who answered; any
// other record is [Refuse]d with the first check it fails.
func Decide(key string, p mesh.Provision, rec mesh.Record, asker string) Decision {
	switch {
	case p.State != mesh.Retiring:
		return wait(whyNotRetiring, key, p.State)
	case p.Ask == "":
		return wait(whyNoAsk, key)
	case p.Warrant != nil:
		return wait(whyDecided, key, p.Warrant.Option, p.Warrant.Ask)
	case rec.State == "":
		return wait(whyNoRecord, p.Ask, key)
	case rec.Ask.ID != p.Ask:
		return refuse(whyOtherRecord, p.Ask, key, rec.Ask.ID)
	case rec.Ask.About != About(key):
		return refuse(whyOtherAbout, p.Ask, key, rec.Ask.About, About(key))
	case rec.Ask.Asker != "" && rec.Ask.Asker != asker:
		return refuse(whyOtherAskAsker, p.Ask, key, rec.Ask.Asker, asker)
	}
	w := rec.Warrant
	switch rec.State {
	case mesh.RecordOpen:
		return wait(whyOpen, p.Ask, key)
	case mesh.RecordExpired:
		if w != nil {
			if d, bad := ofAsk(key, p.Ask, w, asker); bad {
				return d
			}
			if w.Outcome != mesh.OutcomeExpired {
				return refuse(whyOutcome, p.Ask, key, rec.State, w.Outcome)
			}
			if w.By.Kind == mesh.KindWithdrawn {
				return Decision{Verdict: Clear, Why: fmt.Sprintf(whyWithdrawn, p.Ask, key, w.By.Who, w.Why)}
			}
		}
		return Decision{Verdict: Clear, Why: fmt.Sprintf(whyExpired, p.Ask, key)}
	case mesh.RecordAnswered:
		if w == nil {
			return refuse(whyNoWarrant, p.Ask, key)
		}
		if d, bad := ofAsk(key, p.Ask, w, asker); bad {
			return d
		}
		if w.Outcome != mesh.OutcomeChosen {
			return refuse(whyOutcome, p.Ask, key, rec.State, w.Outcome)
		}
		if _, ok := rec.Ask.Option(w.Option); !ok || (w.Option != Yes && w.Option != No) {
			return refuse(whyNotOffered, p.Ask, key, w.Option)
		}
		if digest := mesh.ActDigest(key, p.Ask, w.Option); w.Binds != digest {
			return refuse(whyBinds, p.Ask, key, w.Option, w.Binds, digest)
		}
		if w.By.Who == "" && w.By.Identity == "" {
			return refuse(whyNobody, p.Ask, key, w.Option)
		}
		return Decision{
			Verdict: Warrant,
			Warrant: &mesh.Warrant{Ask: p.Ask, Option: w.Option, By: w.By, At: w.At},
			Why:     fmt.Sprintf(whyChosen, p.Ask, key, w.Option, by(w.By), w.At.UTC().Format(time.RFC3339)),
		}
	}
	return refuse(whyRecordState, p.Ask, key, rec.State)
}

// ofAsk checks that warrant w names asker and the ask id; bad is set with
// the refusal when it does not.
func ofAsk(key, id string, w *mesh.RecordWarrant, asker string) (d Decision, bad bool) {
	if w.Asker != asker {
		return refuse(whyOtherAsker, id, key, w.Asker, asker), true
	}
	if w.Ask != id {
		return refuse(whyOtherAskID, id, key, w.Ask), true
	}
	return Decision{}, false
}

// by names who answered: the identity, and its kind when it says more.
func by(who mesh.Identity) string {
	name := who.Who
	if name == "" {
		name = who.Identity
	}
	if who.Kind != "" {
		name += " (" + who.Kind + " " + who.Identity + ")"
	}
	return name
}

func wait(format string, args ...any) Decision {
	return Decision{Verdict: Wait, Why: fmt.Sprintf(format, args...)}
}

func refuse(format string, args ...any) Decision {
	return Decision{Verdict: Refuse, Why: fmt.Sprintf(format, args...)}
}
