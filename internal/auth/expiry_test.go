package auth_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/nats-io/jwt/v2"
)

// TestJWTLivesItsExpiryFromItsIssue: a user JWT lives exactly the expiry
// from the issue time it names, even when the act's time is seconds before
// the signing (a loaded machine: the JWT library sets the issue time as it
// signs). The expiry was counted from the act's time, so a second that
// ticked in between left a JWT of --expiry 6s living 5 s
// (TestNodeLeaveKeepsTheExpiry failed so under load); here the act's time
// is 2 s behind the clock.
func TestJWTLivesItsExpiryFromItsIssue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := meshfile.Parse("test.yaml", []byte(testMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, operators))
	if err != nil {
		t.Fatal(err)
	}
	const life = 6 * time.Second
	res, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js"), Expiry: life, Now: time.Now().Add(-2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"client-n1", access.DefaultOperator} {
		token, err := jwt.ParseDecoratedJWT(mustRead(t, res.Creds[user]))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		uc, err := jwt.DecodeUserClaims(token)
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		if got := time.Duration(uc.Expires-uc.IssuedAt) * time.Second; got != life {
			t.Errorf("%s's JWT issued at %d expires at %d: lives %v; want %v", user, uc.IssuedAt, uc.Expires, got, life)
		}
	}
}
