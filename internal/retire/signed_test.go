package retire_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// keys are an account's keys as auth gen makes them: the account's own
// and the signing key that signs its users.
type keys struct {
	account, signing nkeys.KeyPair
}

func newKeys(t *testing.T) keys {
	t.Helper()
	acc, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	sk, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	return keys{acc, sk}
}

func pub(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// user returns a user key and its JWT named name, allowed to publish
// allow, issued for k's account by signer, expiring at expires (zero:
// never).
func (k keys) user(t *testing.T, name string, allow []string, signer nkeys.KeyPair, expires time.Time) (nkeys.KeyPair, string) {
	t.Helper()
	u, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	uc := jwt.NewUserClaims(pub(t, u))
	uc.Name = name
	uc.IssuerAccount = pub(t, k.account)
	uc.Pub.Allow.Add(allow...)
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
	token, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	return u, token
}

func TestDecideChecksTheOperatorsSignature(t *testing.T) {
	k, p := gitea()
	key := k.String()
	ask := retire.Ask(k, p, now, time.Hour)
	p.Ask = ask.ID
	at := now.Add(10 * time.Minute)
	seen := at.Add(time.Minute)
	requests := newKeys(t)
	_, seatJWT := requests.user(t, "mesh-provisioner", []string{"asks.mesh-provisioner"}, requests.signing, time.Time{})
	trust := retire.Trust{Now: seen, Answerers: retire.AnswerersOf(seatJWT)}
	answer := []string{"mesh-asks.answer.alice", "mesh-asks.list"}
	alice, aliceJWT := requests.user(t, "alice", answer, requests.signing, time.Time{})

	sign := func(kp nkeys.KeyPair, binds string) string {
		sig, err := kp.Sign([]byte(binds))
		if err != nil {
			t.Fatal(err)
		}
		return retire.Sign(sig)
	}
	yesBinds := mesh.ActDigest(key, ask.ID, "yes")
	// record returns the record answered yes by alice with token and sig.
	record := func(token, sig string) mesh.Record {
		return mesh.Record{State: mesh.RecordAnswered, Ask: ask, Warrant: &mesh.RecordWarrant{
			Asker: retire.Asker, Ask: ask.ID, Outcome: mesh.OutcomeChosen, Option: "yes", Binds: yesBinds,
			By: mesh.Identity{Who: "alice", Kind: "nats-user", Identity: "alice", JWT: token, Sig: sig}, At: at,
		}}
	}

	// The operator's own answer: taken, and the key's warrant keeps no proof.
	d := retire.Decide(key, p, record(aliceJWT, sign(alice, yesBinds)), retire.Asker, trust)
	want := mesh.Warrant{Ask: ask.ID, Option: "yes", By: mesh.Identity{Who: "alice", Kind: "nats-user", Identity: "alice"}, At: at}
	if d.Verdict != retire.Warrant || d.Warrant == nil || *d.Warrant != want {
		t.Fatalf("Decide(signed by alice) = %q %+v (%s); want the warrant %+v", d.Verdict, d.Warrant, d.Why, want)
	}
	// With no accounts (no Answerers) the router's word is taken.
	if d := retire.Decide(key, p, record("", ""), retire.Asker, retire.Trust{Now: seen}); d.Verdict != retire.Warrant {
		t.Errorf("Decide(unsigned, no accounts) = %q (%s); want warrant", d.Verdict, d.Why)
	}

	otherAsk := retire.Ask(k, p, now.Add(-time.Hour), time.Hour)
	client, clientJWT := requests.user(t, "alice", []string{"mesh-vault.secret.gitea"}, requests.signing, time.Time{})
	expired, expiredJWT := requests.user(t, "alice", answer, requests.signing, at.Add(30*time.Second))
	other := newKeys(t)
	stranger, strangerJWT := other.user(t, "alice", answer, other.signing, time.Time{})
	forger, _ := nkeys.CreateAccount() // claims the account but is none of its keys
	forged, forgedJWT := requests.user(t, "alice", answer, forger, time.Time{})
	bob, bobJWT := requests.user(t, "bob", []string{"mesh-asks.answer.bob"}, requests.signing, time.Time{})
	for _, c := range []struct {
		name string
		rec  mesh.Record
		why  string
	}{
		{"unsigned: the router's own word", record("", ""),
			"it carries no signature (by.jwt and by.sig), and the router's word alone is not taken"},
		{"a signature copied from another ask", record(aliceJWT, sign(alice, mesh.ActDigest(key, otherAsk.ID, "yes"))),
			"its signature does not verify over the digest " + yesBinds},
		{"a signature copied from the option no", record(aliceJWT, sign(alice, mesh.ActDigest(key, ask.ID, "no"))),
			"its signature does not verify over the digest " + yesBinds},
		{"an expired user JWT", record(expiredJWT, sign(expired, yesBinds)), "its user JWT expired at 2026-11-30T03:40:30Z"},
		{"a user JWT that is no operator's", record(clientJWT, sign(client, yesBinds)),
			"its user JWT may not publish mesh-asks.answer.alice: it is no operator's"},
		{"a user JWT of another account", record(strangerJWT, sign(stranger, yesBinds)), "its user JWT is of the account " + pub(t, other.account)},
		{"a user JWT signed by a key of the router's", record(forgedJWT, sign(forged, yesBinds)),
			"its user JWT is signed by " + pub(t, forger) + ", which is neither that account's key nor its signing key"},
		{"another operator's JWT under alice's name", record(bobJWT, sign(bob, yesBinds)), `its user JWT names the user "bob"`},
		{"a JWT that does not decode", record("eyJ0eXAiOiJKV1QifQ.e30.e30", sign(alice, yesBinds)), "its user JWT does not decode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := retire.Decide(key, p, c.rec, retire.Asker, trust)
			head := "the warrant of ask " + ask.ID + ` for key ace.gitea.database.main chose "yes" by "alice", but no operator signed it: `
			if d.Verdict != retire.Refuse || !strings.HasPrefix(d.Why, head+c.why) || !strings.HasSuffix(d.Why, "; the key is left as it was") {
				t.Errorf("Decide = %q %q\nwant refuse %q", d.Verdict, d.Why, head+c.why+"...")
			}
		})
	}
}
