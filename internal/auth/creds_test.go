package auth_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
)

// TestCredsFilesAsFormatUserConfig checks every credentials file Gen
// writes (on its own, over every core) against what jwt.FormatUserConfig
// writes for the same JWT and seed, byte for byte, and that each JWT
// verifies, is signed by the account, names its user and is for the
// public key of the file's seed; then that Gen again keeps every key.
func TestCredsFilesAsFormatUserConfig(t *testing.T) {
	dir := t.TempDir()
	res, parties := gen(t, dir)
	conf, err := os.ReadFile(res.Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Creds) != len(parties) || len(res.Made) != len(parties)+3 {
		t.Fatalf("Gen wrote %d credentials files and made %d keys; want %d and %d", len(res.Creds), len(res.Made), len(parties), len(parties)+3)
	}
	pubs := map[string]string{} // user -> public key
	for _, p := range parties {
		path := res.Creds[p.User]
		if path != filepath.Join(dir, p.User+auth.CredsExt) {
			t.Errorf("%s's credentials at %q", p.User, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		token, err := jwt.ParseDecoratedJWT(b)
		if err != nil {
			t.Fatalf("%s: %v", p.User, err)
		}
		kp, err := jwt.ParseDecoratedUserNKey(b)
		if err != nil {
			t.Fatalf("%s: %v", p.User, err)
		}
		seed, _ := kp.Seed()
		want, err := jwt.FormatUserConfig(token, seed)
		if err != nil {
			t.Fatalf("%s: %v", p.User, err)
		}
		if string(b) != string(want) {
			t.Errorf("%s's credentials file\n%s\nwant (jwt.FormatUserConfig)\n%s", p.User, b, want)
		}
		uc, err := jwt.DecodeUserClaims(token)
		if err != nil {
			t.Fatalf("%s: %v", p.User, err)
		}
		pub, _ := kp.PublicKey()
		pubs[p.User] = pub
		if uc.Subject != pub || uc.Name != p.User {
			t.Errorf("%s's JWT is for %s named %q; want %s named %q", p.User, uc.Subject, uc.Name, pub, p.User)
		}
		if !strings.Contains(string(conf), uc.Issuer) || uc.Issuer[0] != 'A' {
			t.Errorf("%s's JWT is signed by %s, not the configuration's account", p.User, uc.Issuer)
		}
		perm := p.Permissions()
		if !slices.Equal(uc.Pub.Allow, perm.Publish) || !slices.Equal(uc.Sub.Allow, perm.Subscribe) || (uc.Resp != nil) != perm.Responses {
			t.Errorf("%s's JWT allows publish %v, subscribe %v, responses %v; want %v, %v, %v",
				p.User, uc.Pub.Allow, uc.Sub.Allow, uc.Resp != nil, perm.Publish, perm.Subscribe, perm.Responses)
		}
	}
	again, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Made) != 0 || len(again.Kept) != len(parties)+3 {
		t.Errorf("Gen again made %v and kept %d keys; want none made, %d kept", again.Made, len(again.Kept), len(parties)+3)
	}
	for _, p := range parties {
		b, err := os.ReadFile(again.Creds[p.User])
		if err != nil {
			t.Fatal(err)
		}
		kp, err := jwt.ParseDecoratedUserNKey(b)
		if err != nil {
			t.Fatal(err)
		}
		if pub, _ := kp.PublicKey(); pub != pubs[p.User] {
			t.Errorf("Gen again changed %s's key", p.User)
		}
	}
}
