package retire

import (
	"encoding/base64"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// answerPrefix is the subject prefix of the ask router's answer verb,
// "mesh-asks.answer.<user>": an operator's user JWT in the requests account
// allows it to publish its own.
const answerPrefix = "mesh-asks.answer."

// Answerers is what the seat knows of who may answer asks on a mesh with
// accounts: the account operators ask the answer verb in (mesh-requests)
// and the keys that sign its users' JWTs. The seat learns it from its own
// user JWT in that account ([AnswerersOf]).
type Answerers struct {
	// Account is the public key ("A...") of the account operators answer
	// in.
	Account string
	// Issuers are the public keys that sign that account's users: the
	// account's own key and the signing key that signed the seat's user.
	Issuers []string
	// Err, when set, says why the seat cannot tell an operator's
	// signature: every answered warrant is then refused with it.
	Err error
}

// AnswerersOf returns the [Answerers] of the account that issued userJWT
// (the seat's own user JWT in the requests account). A JWT that does not
// decode gives Answerers whose Err says so.
func AnswerersOf(userJWT string) *Answerers {
	uc, err := jwt.DecodeUserClaims(userJWT)
	if err != nil {
		return &Answerers{Err: fmt.Errorf("retire: the seat's own user JWT does not decode: %w", err)}
	}
	acc := uc.IssuerAccount
	if acc == "" {
		acc = uc.Issuer
	}
	return &Answerers{Account: acc, Issuers: slices.Compact([]string{acc, uc.Issuer})}
}

// Sign returns the signature an operator's answer carries in by.sig: sig,
// the nkey signature of the chosen option's binds digest (its hex text, as
// bytes), made with the operator's user key, in unpadded URL-safe base64.
func Sign(sig []byte) string { return base64.RawURLEncoding.EncodeToString(sig) }

// signed checks that the warrant w of ask id carries an operator's
// signature that a (nil: the mesh has no accounts) knows at now: by.jwt an
// unexpired user JWT issued by a's account through one of its issuers,
// naming by.identity and allowing it to publish "mesh-asks.answer.<name>";
// by.sig the signature of w.Binds by that JWT's user key. bad is set with
// the refusal when it does not.
func signed(key, id string, w *mesh.RecordWarrant, a *Answerers, now time.Time) (d Decision, bad bool) {
	if a == nil {
		return Decision{}, false
	}
	no := func(format string, args ...any) (Decision, bool) {
		return refuse(whySigned, id, key, w.Option, w.By.Identity, fmt.Sprintf(format, args...)), true
	}
	if a.Err != nil {
		return no("the seat cannot check it: %v", a.Err)
	}
	if w.By.JWT == "" || w.By.Sig == "" {
		return no("it carries no signature (by.jwt and by.sig), and the router's word alone is not taken")
	}
	uc, err := jwt.DecodeUserClaims(w.By.JWT)
	if err != nil {
		return no("its user JWT does not decode: %v", err)
	}
	acc := uc.IssuerAccount
	if acc == "" {
		acc = uc.Issuer
	}
	switch sec := now.Unix(); {
	case acc != a.Account:
		return no("its user JWT is of the account %s, not %s where operators answer", acc, a.Account)
	case !slices.Contains(a.Issuers, uc.Issuer):
		return no("its user JWT is signed by %s, which is neither that account's key nor its signing key", uc.Issuer)
	case uc.Expires > 0 && sec >= uc.Expires:
		return no("its user JWT expired at %s", stamp(time.Unix(uc.Expires, 0)))
	case uc.NotBefore > 0 && sec < uc.NotBefore:
		return no("its user JWT is valid only from %s", stamp(time.Unix(uc.NotBefore, 0)))
	case uc.Name != w.By.Identity:
		return no("its user JWT names the user %q", uc.Name)
	case !slices.Contains(uc.Pub.Allow, answerPrefix+token.Escape(uc.Name)):
		return no("its user JWT may not publish %s: it is no operator's", answerPrefix+token.Escape(uc.Name))
	}
	sig, err := base64.RawURLEncoding.DecodeString(w.By.Sig)
	if err != nil {
		return no("its signature is not base64: %v", err)
	}
	pub, err := nkeys.FromPublicKey(uc.Subject)
	if err != nil {
		return no("its user JWT's key %s is not a user key: %v", uc.Subject, err)
	}
	if err := pub.Verify([]byte(w.Binds), sig); err != nil {
		return no("its signature does not verify over the digest %s with the key %s", w.Binds, uc.Subject)
	}
	return Decision{}, false
}
