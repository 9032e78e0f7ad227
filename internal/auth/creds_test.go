package auth_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

// TestCredsFilesAsFormatUserConfig checks every credentials file Gen
// writes (on its own, over every core) against what jwt.FormatUserConfig
// writes for the same JWT and seed, byte for byte, and that each JWT
// verifies, is signed by the account, names its user and is for the
// public key of the file's seed; then that Gen again keeps every key.
func TestCredsFilesAsFormatUserConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, parties := gen(t, dir)
	conf, err := os.ReadFile(res.Include)
	if err != nil {
		t.Fatal(err)
	}
	signer := seedPub(t, filepath.Join(dir, auth.KeysDir, "account-signing.nk"))
	// The operator, the system account and the mesh's three accounts
	// (storage, services, requests), and the four accounts' signing keys.
	if len(res.Creds) != len(parties) || len(res.Made) != len(parties)+9 {
		t.Fatalf("Gen wrote %d credentials files and made %d keys; want %d and %d", len(res.Creds), len(res.Made), len(parties), len(parties)+9)
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
		if !strings.Contains(string(conf), uc.IssuerAccount+":") || uc.Issuer != signer {
			t.Errorf("%s's JWT is signed by %s of %s, not the signing key %s of the configuration's account", p.User, uc.Issuer, uc.IssuerAccount, signer)
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
	if len(again.Made) != 0 || len(again.Kept) != len(parties) {
		t.Errorf("Gen again made %v and kept %d users' keys; want none made, %d kept", again.Made, len(again.Kept), len(parties))
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

// TestGenLeavesFilesForLater runs Gen with Options.Later picking the node
// clients: the configuration and every other party's file are written when
// it returns, the clients' are not (recorded in LaterFile instead); once
// Result.WriteLater returns nil every client's file is there too, the
// record is gone, and a second Gen keeps every key.
func TestGenLeavesFilesForLater(t *testing.T) {
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
	later := func(user string) bool { return strings.HasPrefix(user, "client-") }
	res, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js"), Later: later})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(res.Config); err != nil {
		t.Errorf("no configuration when Gen returns: %v", err)
	}
	clients := 0
	for _, p := range parties {
		_, err := os.Stat(res.Creds[p.User])
		switch {
		case later(p.User):
			clients++
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s's credentials when Gen returns: %v; want none yet (left for later)", p.User, err)
			}
		case err != nil:
			t.Errorf("%s's credentials not written when Gen returns: %v", p.User, err)
		}
	}
	if clients != 2 {
		t.Fatalf("the test mesh has %d clients; want 2", clients)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.LaterFile)); err != nil {
		t.Errorf("no record of the files left for later when Gen returns: %v", err)
	}
	if err := res.WriteLater(); err != nil {
		t.Fatalf("WriteLater: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.LaterFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the record of the files left for later after WriteLater: %v; want it gone", err)
	}
	pubs := map[string]string{}
	for _, p := range parties {
		b, err := os.ReadFile(res.Creds[p.User])
		if err != nil {
			t.Fatalf("%s's credentials after WriteLater: %v", p.User, err)
		}
		kp, err := jwt.ParseDecoratedUserNKey(b)
		if err != nil {
			t.Fatalf("%s: %v", p.User, err)
		}
		pubs[p.User], _ = kp.PublicKey()
	}
	if err := res.WriteLater(); err != nil {
		t.Errorf("WriteLater again: %v; want nil (written once)", err)
	}
	again, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js"), Later: later})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.LaterFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Gen again with every file current left a record: %v; want none (nothing to write)", err)
	}
	if err := again.WriteLater(); err != nil {
		t.Fatal(err)
	}
	if len(again.Made) != 0 {
		t.Errorf("Gen again made %v; want every key kept", again.Made)
	}
	for _, p := range parties {
		b, _ := os.ReadFile(again.Creds[p.User])
		if kp, err := jwt.ParseDecoratedUserNKey(b); err != nil {
			t.Errorf("%s: %v", p.User, err)
		} else if pub, _ := kp.PublicKey(); pub != pubs[p.User] {
			t.Errorf("Gen again changed %s's key", p.User)
		}
	}
	if err := (&auth.Result{}).WriteLater(); err != nil {
		t.Errorf("WriteLater of a Gen that left nothing: %v", err)
	}
}

// TestMendWritesWhatGenLeftForLater runs Gen with Options.Later and never
// WriteLater, as a process stopped before it did: Mend writes each client's
// file, and each connects as its user to a real server run on Gen's
// configuration. A second Mend over the same record writes nothing; a Gen
// with nothing left for later removes an earlier Gen's record, so that Mend
// never writes a file from it. When a module moves from n2 to n1, Gen signs
// both clients anew and records them while their old files exist: Mend
// writes the newly signed ones over them.
func TestMendWritesWhatGenLeftForLater(t *testing.T) {
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
	later := func(user string) bool { return strings.HasPrefix(user, "client-") }
	opts := auth.Options{StoreDir: filepath.Join(dir, "js"), Later: later}
	res, err := auth.Gen(dir, parties, opts)
	if err != nil {
		t.Fatal(err)
	}
	var clients, files []string // files: of the clients' storage and requests users
	for _, p := range parties {
		if later(p.User) {
			clients = append(clients, p.User)
			files = append(files, p.User, string(access.Requests)+"/"+p.User)
		}
	}
	slices.Sort(files)
	record := filepath.Join(dir, auth.LaterFile)
	recorded, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	written, err := auth.Mend(dir)
	if err != nil || !slices.Equal(written, files) {
		t.Fatalf("Mend = %v, %v; want %v", written, err, files)
	}
	if _, err := os.Stat(record); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the record after Mend: %v; want it gone", err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: filepath.Join(dir, "js"), Listen: "127.0.0.1:0", ConfigFile: res.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	for _, user := range clients {
		nc, _, err := busDial(bus.Dial{URL: s.URL(), Name: user, Creds: res.Creds[user]})
		if err != nil {
			t.Errorf("%s connects with its mended credentials: %v", user, err)
			continue
		}
		nc.Close()
	}
	// Mend again over the same record (as after a stop between writing the
	// files and removing the record): every file holds the record's bytes
	// already, so none is written, and the record is removed.
	stat := map[string]os.FileInfo{}
	for _, user := range clients {
		if stat[user], err = os.Stat(res.Creds[user]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(record, recorded, 0o600); err != nil {
		t.Fatal(err)
	}
	if written, err := auth.Mend(dir); err != nil || len(written) != 0 {
		t.Errorf("Mend again over the same record = %v, %v; want nothing written", written, err)
	}
	for _, user := range clients {
		if fi, err := os.Stat(res.Creds[user]); err != nil || !os.SameFile(fi, stat[user]) {
			t.Errorf("%s's file after Mend again: %v; want the same file, not written again", user, err)
		}
	}
	if _, err := os.Stat(record); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the record after Mend again: %v; want it gone", err)
	}

	// Left for later again (new keys: the files are gone), then Gen with
	// every file written at once.
	for _, user := range clients {
		if err := os.Remove(res.Creds[user]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := auth.Gen(dir, parties, opts); err != nil {
		t.Fatal(err)
	}
	now, err := auth.Gen(dir, parties, auth.Options{StoreDir: opts.StoreDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.LaterFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the record after a Gen that left nothing for later: %v; want it gone", err)
	}
	for _, user := range clients {
		if _, err := os.Stat(now.Creds[user]); err != nil {
			t.Errorf("%s's credentials after a Gen that left nothing for later: %v", user, err)
		}
	}
	if written, err := auth.Mend(dir); err != nil || len(written) != 0 {
		t.Errorf("Mend after a Gen that left nothing for later = %v, %v; want nothing written", written, err)
	}

	// The module n moves from n2 to n1: Gen signs both clients' JWTs anew
	// (their permissions follow what is placed on their node), records them
	// for later and never writes them. Their files exist, with the old
	// JWTs; Mend writes the record's over them, so that n2's client keeps
	// no right it lost.
	moved := strings.Replace(testMesh, "n1: [mesh-vault, a, m]\n  n2: [b, n]", "n1: [mesh-vault, a, m, n]\n  n2: [b]", 1)
	if moved == testMesh {
		t.Fatal("the test mesh's placement is not where the test moves n")
	}
	mf, err := meshfile.Parse("moved.yaml", []byte(moved))
	if err != nil {
		t.Fatal(err)
	}
	movedParties, err := access.Parties(auth.MeshOf(mf, operators))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Gen(dir, movedParties, opts); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatalf("the record of a Gen that signed the clients anew: %v", err)
	}
	var pending map[string]string
	if err := json.Unmarshal(b, &pending); err != nil {
		t.Fatal(err)
	}
	var stale []string
	for user, creds := range pending {
		if have, err := os.ReadFile(laterPath(dir, user)); err != nil {
			t.Fatal(err)
		} else if string(have) != creds {
			stale = append(stale, user)
		}
	}
	slices.Sort(stale)
	// n moved: both clients' users differ, the requests users (they ask
	// the secrets of the modules placed on their node) and the storage
	// users (they write the applied keys of those modules).
	if want := []string{"client-n1", "client-n2", "mesh-requests/client-n1", "mesh-requests/client-n2"}; !slices.Equal(stale, want) {
		t.Fatalf("users whose file differs from the record after the move = %v; want %v", stale, want)
	}
	written, err = auth.Mend(dir)
	if err != nil || !slices.Equal(written, stale) {
		t.Errorf("Mend after the move = %v, %v; want %v", written, err, stale)
	}
	for user, creds := range pending {
		if have, err := os.ReadFile(laterPath(dir, user)); err != nil || string(have) != creds {
			t.Errorf("%s's file after Mend: %v; want the record's newly signed credentials", user, err)
		}
	}
}

// TestGenAgainLeavesCurrentFiles runs Gen twice over the same parties: the
// second run rewrites no credentials file (each is the same file, byte for
// byte). A file whose JWT grants other permissions, and one signed by
// another account, are signed and written again with the party's own.
func TestGenAgainLeavesCurrentFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, parties := gen(t, dir)
	stat := map[string]os.FileInfo{}
	before := map[string]string{}
	for user, path := range first.Creds {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		stat[user] = fi
		b, _ := os.ReadFile(path)
		before[user] = string(b)
	}
	// A kept file whose mode was opened up is made 0600 again.
	loose := first.Creds[parties[0].User]
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(loose); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a kept credentials file made 0644: after Gen again %v (%v); want 0600", fi.Mode().Perm(), err)
	}
	for user, path := range again.Creds {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if !os.SameFile(fi, stat[user]) || string(b) != before[user] {
			t.Errorf("Gen again wrote %s's credentials anew; want the same file", user)
		}
	}

	// Two users' files made stale: one grants more, one is signed by
	// another account.
	accSeed, err := os.ReadFile(filepath.Join(dir, auth.KeysDir, "account.nk"))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(accSeed))))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateAccount()
	stale := map[string]nkeys.KeyPair{parties[0].User: acc, parties[1].User: other}
	for user, signer := range stale {
		b, _ := os.ReadFile(first.Creds[user])
		kp, err := jwt.ParseDecoratedUserNKey(b)
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		uc := jwt.NewUserClaims(pub)
		uc.Name = user
		uc.Pub.Allow.Add(">")
		token, err := uc.Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		file, err := jwt.FormatUserConfig(token, seed)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(first.Creds[user], file, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	third, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Made) != 0 {
		t.Errorf("Gen made keys %v; want every key kept", third.Made)
	}
	accPub, _ := acc.PublicKey()
	signer := seedPub(t, filepath.Join(dir, auth.KeysDir, "account-signing.nk"))
	for _, p := range parties {
		b, err := os.ReadFile(third.Creds[p.User])
		if err != nil {
			t.Fatal(err)
		}
		token, err := jwt.ParseDecoratedJWT(b)
		if err != nil {
			t.Fatal(err)
		}
		uc, err := jwt.DecodeUserClaims(token)
		if err != nil {
			t.Fatalf("%s: %v", p.User, err)
		}
		perm := p.Permissions()
		if uc.Issuer != signer || uc.IssuerAccount != accPub || !slices.Equal(uc.Pub.Allow, perm.Publish) || !slices.Equal(uc.Sub.Allow, perm.Subscribe) {
			t.Errorf("%s's JWT after Gen: issuer %s of %s, publish %v; want %s of %s, %v", p.User, uc.Issuer, uc.IssuerAccount, uc.Pub.Allow, signer, accPub, perm.Publish)
		}
		if _, made := stale[p.User]; !made && string(b) != before[p.User] {
			t.Errorf("%s's file was written again; it was current", p.User)
		}
	}
}

// seedPub returns the public key of the seed in the file at path.
func seedPub(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// laterPath returns the path of a file named in [auth.LaterFile]: "<user>"
// or "<account>/<user>".
func laterPath(dir, name string) string {
	if acc, user, ok := strings.Cut(name, "/"); ok {
		return auth.AccountCredsPath(dir, access.Account(acc), user)
	}
	return auth.CredsPath(dir, name)
}
