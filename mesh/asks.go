package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Ask is what a module publishes on "asks.<module>" when it needs an
// operator's decision, and what the ask router keeps in a [Record].
type Ask struct {
	ID          string      `json:"id"`
	Headline    string      `json:"headline"`
	Explanation string      `json:"explanation"`
	Who         string      `json:"who"`
	Expires     time.Time   `json:"expires"`
	OnExpiry    string      `json:"on-expiry"`
	About       string      `json:"about"`
	Details     string      `json:"details,omitempty"`
	Options     []AskOption `json:"options"`
	Asker       string      `json:"asker,omitempty"` // the module that raised it (the router fills it from the subject)
}

// AskOption is one choice of an [Ask]. Binds is the SHA-256 digest (hex) of
// the canonical JSON of the act the option approves (see [ActDigest]).
type AskOption struct {
	ID    string `json:"id"`
	Label string `json:"label"`
	Does  string `json:"does"`
	Level string `json:"level"`
	Binds string `json:"binds"`
}

// Option returns the option of the ask with the given id, and whether there
// is one.
func (a Ask) Option(id string) (AskOption, bool) {
	for _, o := range a.Options {
		if o.ID == id {
			return o, true
		}
	}
	return AskOption{}, false
}

// Identity says who answered an ask: a person's or component's name, the
// kind of identity (for example "nats-user"), and the identity itself.
//
// On a mesh with accounts, an operator's answer carries its proof, which the
// router copies into the record's warrant: JWT, the operator's user JWT in
// mesh-requests, and Sig, the signature of the chosen option's binds digest
// (its hex text) by that user's nkey, unpadded URL-safe base64. The router
// cannot make them; the seat checks them before it takes the warrant, and
// keeps neither in the key's warrant.
type Identity struct {
	Who      string `json:"who"`
	Kind     string `json:"kind"`
	Identity string `json:"identity"`
	JWT      string `json:"jwt,omitempty"`
	Sig      string `json:"sig,omitempty"`
}

// Record states.
const (
	RecordOpen     = "open"
	RecordAnswered = "answered"
	RecordExpired  = "expired"
)

// Outcomes of a [RecordWarrant].
const (
	OutcomeChosen  = "chosen"
	OutcomeExpired = "expired"
)

// KindNATSUser is the Kind of the By of a [RecordWarrant] chosen by a
// person: the ask router writes {"who":<user>,"kind":"nats-user",
// "identity":<user>} for the NATS user who sent the answer.
const KindNATSUser = "nats-user"

// KindWithdrawn is the Kind of the By of a [RecordWarrant] whose asker
// withdrew its open ask (outcome [OutcomeExpired], By naming the asker; the
// warrant's Why says why).
const KindWithdrawn = "withdrawn"

// Record is the value at <ask id> in [RecordsBucket], written by the ask
// router only.
type Record struct {
	State   string         `json:"state"`
	Ask     Ask            `json:"ask"`
	Warrant *RecordWarrant `json:"warrant,omitempty"`
}

// RecordWarrant is how an ask ended: chosen (with the option and what it
// binds, who chose it and when) or expired (by the router's clock, or
// withdrawn by its asker: By.Kind [KindWithdrawn], with the asker's Why).
type RecordWarrant struct {
	Asker   string    `json:"asker"`
	Ask     string    `json:"ask"`
	Outcome string    `json:"outcome"`
	Option  string    `json:"option,omitempty"`
	Binds   string    `json:"binds,omitempty"`
	By      Identity  `json:"by"`
	At      time.Time `json:"at"`
	Why     string    `json:"why,omitempty"` // why the asker withdrew the ask; empty otherwise
}

// RetireAct is the act an option of a retiring key's ask approves:
// {"verb":"mesh-provisioner.retire","provision":<key>,"ask":<id>,"option":<option id>}.
type RetireAct struct {
	Verb      string `json:"verb"`
	Provision string `json:"provision"`
	Ask       string `json:"ask"`
	Option    string `json:"option"`
}

// ActDigest returns the hex SHA-256 of the canonical JSON of the retire act
// for key, ask and option. Canonical JSON here is the object with its keys
// sorted and no white space, as encoding/json writes a map.
func ActDigest(key, ask, option string) string {
	b, _ := json.Marshal(map[string]string{
		"verb": RetireVerb, "provision": key, "ask": ask, "option": option,
	})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
