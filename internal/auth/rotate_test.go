package auth_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
)

// partyFiles returns the paths of every credentials file of the party p in
// dir: one per account it has a user in (storage first) and, for an
// operator, its system user's.
func partyFiles(dir string, p access.Party) []string {
	var out []string
	for _, in := range p.Accounts() {
		out = append(out, auth.AccountCredsPath(dir, in, p.User))
	}
	if p.Has(access.Operator) {
		out = append(out, auth.SystemCredsPath(dir, p.User))
	}
	return out
}

// accountRecords returns the bytes of every account's record in dir
// (dir/accounts/<name>.jwt), by account name.
func accountRecords(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, name := range []string{auth.SystemAccountName, string(access.Storage), string(access.Services), string(access.Requests)} {
		out[name] = mustRead(t, filepath.Join(dir, auth.AccountsDir, name+".jwt"))
	}
	return out
}

// TestRotateRevokesEveryAccount is F3 of the attacker's review: rotating a
// party gave a new key to its user of the mesh account alone, so its
// mesh-requests user (an operator's, which answers asks) and its
// mesh-services user (the vault's, which answers secrets) kept their old
// keys. For an operator, a node's client and the vault in turn, Rotate
// writes every file of the party anew (each account it has a user in, and
// an operator's system user) under a new key; once pushed, the server
// refuses each old file and takes each new one. The accounts the party has
// no user in are not signed anew; another party's files (a second operator,
// the other node's client) are kept byte for byte and still connect.
func TestRotateRevokesEveryAccount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, parties := gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	byUser := map[string]access.Party{}
	for _, p := range parties {
		byUser[p.User] = p
	}
	others := append(partyFiles(dir, byUser["alice"]), partyFiles(dir, byUser["client-n2"])...)
	kept := map[string][]byte{}
	for _, path := range others {
		kept[path] = mustRead(t, path)
	}
	for _, tc := range []struct {
		user string
		// in are the accounts whose files the party has; the system
		// account's for an operator.
		in []string
	}{
		{"operator", []string{"mesh", "mesh-requests", "SYS"}},
		{"client-n1", []string{"mesh", "mesh-requests"}},
		{access.VaultUser, []string{"mesh", "mesh-services", "mesh-requests"}},
	} {
		p := byUser[tc.user]
		files := partyFiles(dir, p)
		if len(files) != len(tc.in) {
			t.Fatalf("%s has the files %v; want one in each of %v", tc.user, files, tc.in)
		}
		old := map[string]string{} // each file's path: a copy of it before the rotation
		for _, path := range files {
			old[path] = copyFile(t, path)
			if refused(t, srv.URL(), old[path]) {
				t.Fatalf("%s's %s is refused before its rotation", tc.user, path)
			}
		}
		before := accountRecords(t, dir)
		issued, err := res.Authority.Rotate(p)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, is := range issued {
			paths = append(paths, is.Path)
		}
		if !slices.Equal(paths, files) {
			t.Errorf("Rotate(%s) issued %v; want every file of the party %v", tc.user, paths, files)
		}
		after := accountRecords(t, dir)
		for name, b := range after {
			if changed := !bytes.Equal(b, before[name]); changed != slices.Contains(tc.in, name) {
				t.Errorf("Rotate(%s): the account %s signed anew %v; want %v (the party has a user there: %v)",
					tc.user, name, changed, !changed, slices.Contains(tc.in, name))
			}
		}
		jwts, err := res.Authority.Accounts()
		if err != nil {
			t.Fatal(err)
		}
		if again := accountRecords(t, dir); !equalRecords(again, after) {
			t.Errorf("Accounts after Rotate(%s) signed an account anew; want the JWTs Rotate signed", tc.user)
		}
		push(t, srv.URL(), res.Authority, jwts)
		for _, path := range files {
			oldPub, _ := auth.PublicKey(old[path])
			newPub, err := auth.PublicKey(path)
			if err != nil || newPub == oldPub {
				t.Errorf("after Rotate(%s), %s holds the key %s (%v); want a new one, not %s", tc.user, path, newPub, err, oldPub)
			}
			o, n := userOf(t, old[path]), userOf(t, path)
			if n.Name != o.Name || !reflect.DeepEqual(n.User, o.User) {
				t.Errorf("after Rotate(%s), %s says %+v; want what the old one said (permissions, limits) %+v", tc.user, path, n.User, o.User)
			}
			if !refused(t, srv.URL(), old[path]) {
				t.Errorf("%s's old %s connects after its rotation was pushed", tc.user, path)
			}
			if refused(t, srv.URL(), path) {
				t.Errorf("%s's new %s is refused", tc.user, path)
			}
			revoked := false
			for _, token := range jwts {
				ac, err := jwt.DecodeAccountClaims(token)
				if err == nil && ac.IsClaimRevoked(&jwt.UserClaims{ClaimsData: jwt.ClaimsData{Subject: oldPub, IssuedAt: 1}}) {
					revoked = true
				}
			}
			if !revoked {
				t.Errorf("no account pushed revokes %s's old key %s of %s", tc.user, oldPub, path)
			}
		}
		for _, path := range others {
			if !bytes.Equal(mustRead(t, path), kept[path]) {
				t.Errorf("Rotate(%s) changed %s, another party's", tc.user, path)
			}
			if refused(t, srv.URL(), path) {
				t.Errorf("after Rotate(%s), another party's %s is refused", tc.user, path)
			}
		}
	}
}

// userOf returns the claims of the user JWT of the credentials file at
// path.
func userOf(t *testing.T, path string) *jwt.UserClaims {
	t.Helper()
	token, err := jwt.ParseDecoratedJWT(mustRead(t, path))
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	return uc
}

func equalRecords(a, b map[string][]byte) bool {
	for name, x := range a {
		if !bytes.Equal(x, b[name]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestRotateDropsTheFilesLeftForLater: a Gen left client-n1's files for
// later and its process stopped before writing them (the record of
// LaterFile names them); Rotate writes the party's new files and drops its
// names from the record, so that Mend does not write its old keys back over
// them. Another party's names stay in the record.
func TestRotateDropsTheFilesLeftForLater(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, parties := gen(t, dir)
	later := func(user string) bool { return user == "client-n1" || user == "client-n2" }
	for _, p := range parties {
		if later(p.User) {
			for _, path := range partyFiles(dir, p) {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	res, err := auth.Gen(dir, parties, auth.Options{Source: "test.yaml", StoreDir: filepath.Join(dir, "js"), Later: later})
	if err != nil {
		t.Fatal(err)
	}
	// The process stops here: WriteLater is never called.
	var n1 access.Party
	for _, p := range parties {
		if p.User == "client-n1" {
			n1 = p
		}
	}
	issued, err := res.Authority.Rotate(n1)
	if err != nil {
		t.Fatal(err)
	}
	rotated := map[string][]byte{}
	for _, is := range issued {
		rotated[is.Path] = mustRead(t, is.Path)
	}
	written, err := auth.Mend(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(written, []string{"client-n2", "mesh-requests/client-n2"}) {
		t.Errorf("Mend after Rotate(client-n1) wrote %v; want client-n2's files alone", written)
	}
	for path, b := range rotated {
		if !bytes.Equal(mustRead(t, path), b) {
			t.Errorf("Mend wrote %s over the file Rotate wrote", path)
		}
	}
}
