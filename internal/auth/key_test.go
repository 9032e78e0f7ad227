package auth

import (
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// TestCredsUserKeyAsTheLibrary checks credsUserKey against
// jwt.ParseDecoratedUserNKey: the same key from a file as Gen writes it,
// with CRLF line ends, and from a bare seed; both refuse a file with no
// user seed.
func TestCredsUserKeyAsTheLibrary(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	acc, _ := nkeys.CreateAccount()
	token, err := jwt.NewUserClaims(pub).Encode(acc)
	if err != nil {
		t.Fatal(err)
	}
	file, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	crlf := []byte{}
	for _, c := range file {
		if c == '\n' {
			crlf = append(crlf, '\r')
		}
		crlf = append(crlf, c)
	}
	for name, b := range map[string][]byte{"file": file, "crlf": crlf, "bare": append(append([]byte{}, seed...), '\n')} {
		lib, err := jwt.ParseDecoratedUserNKey(b)
		if err != nil {
			t.Fatalf("%s: the library: %v", name, err)
		}
		ours, err := credsUserKey(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lp, _ := lib.PublicKey()
		op, _ := ours.PublicKey()
		if op != lp || op != pub {
			t.Errorf("%s: credsUserKey gave %s, the library %s; want %s", name, op, lp, pub)
		}
	}
	accSeed, _ := acc.Seed()
	for name, b := range map[string][]byte{"empty": nil, "jwt only": []byte(token), "account seed": accSeed} {
		if _, err := jwt.ParseDecoratedUserNKey(b); err == nil {
			t.Errorf("%s: the library takes it", name)
		}
		if _, err := credsUserKey(b); err == nil {
			t.Errorf("%s: credsUserKey takes it", name)
		}
	}
}
