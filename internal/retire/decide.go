package retire

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Skew is how far the clocks of the ask router and the seat may differ: a
// warrant dated up to Skew after the seat's now, or up to Skew before its
// ask was raised, is still taken.
const Skew = 30 * time.Second

// Trust is what the seat knows when it judges a warrant ([Decide]).
type Trust struct {
	// Now is the seat's clock. A warrant dated more than [Skew] after it
	// cannot be true.
	Now time.Time
	// Answerers, when set, is who may sign an answer: a warrant is taken
	// only with an operator's signature ([Answerers]). Nil means the mesh
	// runs with no accounts (up --no-auth): no JWT exists, and the
	// router's word is taken.
	Answerers *Answerers
}

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
// module that raised the ask ([Asker] for the seat); t is what the seat
// knows to judge a warrant by.
//
// Only a retiring key with an ask and no warrant yet is decided. A record
// of another ask, or of an ask about another key (two keys whose ids collide,
// such as a-b.c and a.b-c asked in the same second), is refused. A record
// still open, or not there, is [Wait]. An expired record (also one its asker
// withdrew) is [Clear]. An
// answered record is a [Warrant] only when its warrant names asker and this
// ask, chose an option that both the ask and [Ask] offer ([Yes] or [No]),
// binds [mesh.ActDigest] of (key, ask, option), names who answered as a NATS
// user that may be an operator's ([access.MayBeOperator]: not the seat, the
// router, the vault or a node's client), and is dated when it could have
// been made: not more than [Skew] after t.Now, not before the ask was raised
// (the time its id ends with, less [Skew]), and before the ask expired; and,
// with t.Answerers, signed by an operator (see [Answerers]: by.jwt an
// unexpired user JWT of the account operators answer in that may publish
// its answer verb, by.sig its key's signature of the option's binds). Any
// other record is [Refuse]d with the first check it fails.
func Decide(key string, p mesh.Provision, rec mesh.Record, asker string, t Trust) Decision {
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
		if d, bad := byOperator(key, p.Ask, w); bad {
			return d
		}
		if d, bad := dated(key, rec, w, t.Now); bad {
			return d
		}
		if d, bad := signed(key, p.Ask, w, t.Answerers, t.Now); bad {
			return d
		}
		return Decision{
			Verdict: Warrant,
			Warrant: &mesh.Warrant{Ask: p.Ask, Option: w.Option, By: named(w.By), At: w.At},
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

// byOperator checks that the warrant w of ask id names a NATS user who may
// be an operator; bad is set with the refusal when it does not.
func byOperator(key, id string, w *mesh.RecordWarrant) (d Decision, bad bool) {
	switch b := w.By; {
	case b.Kind != mesh.KindNATSUser:
		return refuse(whyByKind, id, key, w.Option, b.Kind, mesh.KindNATSUser), true
	case b.Who != b.Identity:
		return refuse(whyByTwo, id, key, w.Option, b.Who, b.Identity), true
	case !access.MayBeOperator(b.Identity):
		return refuse(whyByParty, id, key, w.Option, b.Identity), true
	}
	return Decision{}, false
}

// dated checks that the warrant w of the record rec could have been made
// by the seat's clock now: not after now (give or take [Skew]), not before
// its ask was raised, and before its ask expired; bad is set with the
// refusal when it could not.
func dated(key string, rec mesh.Record, w *mesh.RecordWarrant, now time.Time) (d Decision, bad bool) {
	id, at := rec.Ask.ID, w.At.UTC()
	raised, ok := Raised(id)
	switch {
	case w.At.IsZero():
		return refuse(whyNoTime, id, key, w.Option), true
	case w.At.After(now.Add(Skew)):
		return refuse(whyFuture, id, key, w.Option, stamp(at), stamp(now)), true
	case !ok:
		return refuse(whyNoRaised, id, key, w.Option), true
	case w.At.Before(raised.Add(-Skew)):
		return refuse(whyBeforeRaised, id, key, w.Option, stamp(at), stamp(raised)), true
	case !w.At.Before(rec.Ask.Expires):
		return refuse(whyAfterExpiry, id, key, w.Option, stamp(at), stamp(rec.Ask.Expires)), true
	}
	return Decision{}, false
}

// Raised returns when the ask id was raised, as the unix time in seconds
// its id ends with ([ID]: "retire-<key>-<unix time>"), and false when it
// ends with none.
func Raised(id string) (time.Time, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

// stamp writes t in UTC, to the second (RFC 3339).
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// named returns who answered without the proof the router's record keeps
// (by.jwt and by.sig): what the key's warrant says.
func named(who mesh.Identity) mesh.Identity {
	return mesh.Identity{Who: who.Who, Kind: who.Kind, Identity: who.Identity}
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
