// Package auth makes the NATS users of a mesh from the parties of package
// access, with NATS's own decentralized authentication: an operator, one
// account for the mesh (JetStream enabled) and a system account, each an
// nkey signing a JWT; one user per party whose JWT carries the party's
// permissions, written as a standard credentials file (".creds", read by
// nats.go's UserCredentials and the nats CLI's --creds). The server's
// configuration trusts the operator and preloads the accounts (resolver
// MEMORY), so it holds no secret.
//
// [Gen] writes it all into a directory and keeps the keys it finds there:
// running it again signs a user's JWT anew when its permissions in the
// current mesh differ from those its file holds (or the account's key
// does), and makes keys only for new parties; a party that is gone is
// revoked in the account.
package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Files of a directory written by [Gen].
const (
	// ConfigFile is the nats-server configuration.
	ConfigFile = "nats-server.conf"
	// KeysDir holds the seeds of the operator and the accounts (mode 0600).
	KeysDir = "keys"
	// RevokedDir holds the credentials of parties no longer in the mesh,
	// revoked in the account.
	RevokedDir = "revoked"
	// CredsExt ends every credentials file: "<user>.creds".
	CredsExt = ".creds"
	// LaterFile records the credentials files [Gen] left for later
	// ([Options.Later]) until [Result.WriteLater] has written every one:
	// a JSON object {"<user>": "<the text of its credentials file>"},
	// mode 0600 (it holds their seeds, as the files do). [Mend] writes
	// the files of a record whose writer stopped first.
	LaterFile = "later-creds.json"
)

// MaxControlLine is the server's limit on a protocol line, in bytes,
// written into the configuration: a user's JWT (with its permissions) is
// sent in the CONNECT line.
const MaxControlLine = 64 * 1024

// AccountName is the name of the mesh's account.
const AccountName = "mesh"

// Options configures [Gen].
type Options struct {
	// StoreDir is the JetStream store directory written into the
	// configuration. Empty means "<dir>/jetstream".
	StoreDir string
	// Source names what the parties come from (the mesh file), for the
	// configuration's header.
	Source string
	// Now is the time of the revocations; zero means time.Now().
	Now time.Time
	// Later, if set, picks the users whose credentials files Gen leaves
	// for [Result.WriteLater] to write after it returns (a caller runs it
	// on a goroutine of its own): files nothing reads before they are
	// written, such as the node clients' when up runs none. Making a file
	// is the largest part of Gen on a disk slow to make them. Gen records
	// them in [LaterFile] first, so that a process stopped before
	// WriteLater is done leaves what [Mend] needs to write them.
	Later func(user string) bool
}

// Result says what [Gen] wrote.
type Result struct {
	// Config is the path of the nats-server configuration.
	Config string
	// Creds holds the path of each party's credentials file, by user.
	Creds map[string]string
	// Made lists the users whose keys are new, and "operator key",
	// "account key" or "system key" when those are; Kept those whose keys
	// were found and kept.
	Made, Kept []string
	// Revoked lists the users whose credentials were found in the
	// directory but who are no longer parties: moved to RevokedDir and
	// revoked in the account.
	Revoked []string

	// write writes the files left for later, once; laterErr is then the
	// first error writing one.
	write    sync.Once
	later    func() error
	laterErr error
}

// WriteLater writes the credentials files Gen left for later
// ([Options.Later]), then removes their record ([LaterFile]), and returns
// the first error writing one (the record is kept then). It writes them
// once: a concurrent call waits for that write, and a later one returns
// its error. It returns nil at once when Gen left none. It is safe for
// concurrent use.
func (r *Result) WriteLater() error {
	r.write.Do(func() {
		if r.later != nil {
			r.laterErr = r.later()
		}
	})
	return r.laterErr
}

// MeshOf returns the [access.Mesh] of a mesh file, with operators as its
// operators' users.
func MeshOf(f *meshfile.File, operators []string) access.Mesh {
	m := access.Mesh{Nodes: slices.Clone(f.Nodes), Placement: map[string][]string{}, Operators: slices.Clone(operators)}
	for i := range f.Modules {
		mod := &f.Modules[i]
		m.Modules = append(m.Modules, mod.Name)
		if mod.Trunk().Manifest.KeepsEntries() {
			m.Providers = append(m.Providers, mod.Name)
		}
	}
	for n, ms := range f.Placement {
		m.Placement[n] = slices.Clone(ms)
	}
	return m
}

// CredsPath returns the path of user's credentials file in dir.
func CredsPath(dir, user string) string { return filepath.Join(dir, user+CredsExt) }

// Gen writes into dir (created, mode 0700) the nats-server configuration
// [ConfigFile] and one credentials file per party "<user>.creds" (mode
// 0600), each user's JWT carrying [access.Party.Permissions]. Seeds of the
// operator, the account and the system account are kept in dir/keys (mode
// 0600); existing seeds and users' keys are kept, never rotated, and a
// user's file that holds the JWT Gen would sign (the same key, name and
// permissions, signed by the account) is left as it is. A
// credentials file of a user that is not among parties is moved to
// dir/revoked and its key revoked in the account. It returns an error when
// a file cannot be read or written, or a key found there is not valid
// (nothing is overwritten then). The files of the users opts.Later picks
// are written by [Result.WriteLater], after Gen returns; a record of them
// left by an earlier Gen is replaced (or removed when none is left).
func Gen(dir string, parties []access.Party, opts Options) (*Result, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.StoreDir == "" {
		opts.StoreDir = filepath.Join(dir, "jetstream")
	}
	abs, err := filepath.Abs(opts.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("auth: store directory: %w", err)
	}
	opts.StoreDir = abs
	for _, d := range []string{dir, filepath.Join(dir, KeysDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	res := &Result{Config: filepath.Join(dir, ConfigFile), Creds: map[string]string{}}
	key := func(name string, prefix nkeys.PrefixByte) (nkeys.KeyPair, error) {
		kp, made, err := loadOrMake(filepath.Join(dir, KeysDir, name+".nk"), prefix)
		if err == nil {
			res.note(name+" key", made)
		}
		return kp, err
	}
	op, err := key("operator", nkeys.PrefixByteOperator)
	if err != nil {
		return nil, err
	}
	acc, err := key("account", nkeys.PrefixByteAccount)
	if err != nil {
		return nil, err
	}
	sys, err := key("system", nkeys.PrefixByteAccount)
	if err != nil {
		return nil, err
	}
	opPub, accPub, sysPub := publicKey(op), publicKey(acc), publicKey(sys)

	// Users: keep each party's key, sign its permissions; over every core
	// (a mesh of 1000 nodes has over 1000 users).
	sign, err := signerOf(acc, accPub)
	if err != nil {
		return nil, err
	}
	users := map[string]bool{}
	for _, p := range parties {
		users[p.User] = true
	}
	type signed struct {
		path  string
		made  bool
		creds []byte
	}
	out := make([]signed, len(parties))
	err = each(len(parties), func(i int) error {
		p := parties[i]
		path := CredsPath(dir, p.User)
		uk, made, err := userKey(path)
		if err != nil {
			return err
		}
		creds, err := userCreds(uk, sign, p)
		if err != nil {
			return err
		}
		out[i] = signed{path, made, creds}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, p := range parties {
		res.note(p.User, out[i].made)
	}

	// Parties that are gone: revoke, move aside.
	revoked, err := revokeGone(dir, users, res)
	if err != nil {
		return nil, err
	}

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "mesh-provisioner"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("auth: operator: %w", err)
	}
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
		Streams: jwt.NoLimit, Consumer: jwt.NoLimit}
	for _, pub := range revoked {
		ac.RevokeAt(pub, opts.Now)
	}
	accJWT, err := ac.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("auth: account: %w", err)
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("auth: system account: %w", err)
	}

	var now, later []int // indices in out
	for i, p := range parties {
		res.Creds[p.User] = out[i].path
		if opts.Later != nil && opts.Later(p.User) {
			later = append(later, i)
		} else {
			now = append(now, i)
		}
	}
	write := func(idx []int) error {
		return each(len(idx), func(i int) error {
			if out[idx[i]].creds == nil {
				// The file holds the same JWT already; only its mode is
				// made what Gen writes.
				return os.Chmod(out[idx[i]].path, 0o600)
			}
			return writeFile(out[idx[i]].path, out[idx[i]].creds, 0o600)
		})
	}
	// The files left for later are recorded before any other is written:
	// whenever the configuration is there, so is what Mend needs.
	record := filepath.Join(dir, LaterFile)
	pending := map[string]string{}
	for _, i := range later {
		if out[i].creds != nil {
			pending[parties[i].User] = string(out[i].creds)
		}
	}
	if len(pending) > 0 {
		b, err := json.Marshal(pending)
		if err != nil {
			return nil, fmt.Errorf("auth: %s: %w", LaterFile, err)
		}
		if err := writeFile(record, b, 0o600); err != nil {
			return nil, err
		}
	}
	if err := write(now); err != nil {
		return nil, err
	}
	conf := config(opts, opJWT, accPub, accJWT, sysPub, sysJWT)
	if err := writeFile(res.Config, conf, 0o600); err != nil {
		return nil, err
	}
	if len(pending) == 0 {
		// An earlier Gen's record: every file it named is written now,
		// or signed anew.
		if err := os.Remove(record); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	if len(later) > 0 {
		res.later = func() error {
			if err := write(later); err != nil {
				return err
			}
			if len(pending) == 0 {
				return nil
			}
			if err := os.Remove(record); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("auth: %w", err)
			}
			return nil
		}
	}
	sort.Strings(res.Made)
	sort.Strings(res.Kept)
	sort.Strings(res.Revoked)
	return res, nil
}

// Mend writes the credentials files that a [Gen] left for later and that
// were never written (its process stopped before [Result.WriteLater] was
// done): each file its record, [LaterFile] in dir, names that dir does not
// hold, or holds with other bytes (a file Gen signed anew, for instance
// because the user's permissions changed). A file that holds the record's
// bytes already is kept; each is written whole (a temporary file renamed),
// so Mend run twice writes nothing the second time.
// It then removes the record, and returns the users whose files it wrote,
// sorted: none when dir holds no record. It returns an error when the
// record cannot be read or decoded, or a file cannot be written (the
// record is kept then, for the next Mend).
func Mend(dir string) ([]string, error) {
	record := filepath.Join(dir, LaterFile)
	b, err := os.ReadFile(record)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: mend: %w", err)
	}
	var pending map[string]string
	if err := json.Unmarshal(b, &pending); err != nil {
		return nil, fmt.Errorf("auth: mend: %s: %w", record, err)
	}
	var written []string
	for user, creds := range pending {
		path := CredsPath(dir, user)
		if !mesh.ValidName(user) {
			return nil, fmt.Errorf("auth: mend: %s names the user %q, not a valid name", record, user)
		}
		// A file that holds the record's bytes is kept; one that is
		// missing or holds other bytes (an older JWT: the record's was
		// signed anew, for other permissions) is written.
		if have, err := os.ReadFile(path); err == nil && string(have) == creds {
			continue
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("auth: mend: %w", err)
		}
		if err := writeFile(path, []byte(creds), 0o600); err != nil {
			return nil, err
		}
		written = append(written, user)
	}
	if err := os.Remove(record); err != nil {
		return nil, fmt.Errorf("auth: mend: %w", err)
	}
	sort.Strings(written)
	return written, nil
}

func (r *Result) note(name string, made bool) {
	if made {
		r.Made = append(r.Made, name)
	} else {
		r.Kept = append(r.Kept, name)
	}
}

// config returns the text of the nats-server configuration.
func config(opts Options, opJWT, accPub, accJWT, sysPub, sysJWT string) []byte {
	var b bytes.Buffer
	src := opts.Source
	if src == "" {
		src = "the mesh"
	}
	fmt.Fprintf(&b, "# nats-server configuration of %s, written by \"mesh-provisioner auth gen\".\n", src)
	fmt.Fprintf(&b, "# Operator mode: the account %q (%s) holds every party's user; each user's\n", AccountName, accPub)
	b.WriteString("# permissions are in its JWT, in the credentials file \"<user>.creds\" beside this file.\n")
	b.WriteString("# Run \"auth gen\" again after changing the mesh file; it keeps the keys.\n\n")
	fmt.Fprintf(&b, "operator: %q\n", opJWT)
	fmt.Fprintf(&b, "system_account: %s\n", sysPub)
	// A user's JWT travels in its CONNECT line: a client's permissions
	// pass the default limit of 4 KiB.
	fmt.Fprintf(&b, "max_control_line: %d\n", MaxControlLine)
	b.WriteString("resolver: MEMORY\n")
	b.WriteString("resolver_preload: {\n")
	fmt.Fprintf(&b, "  %s: %q\n", accPub, accJWT)
	fmt.Fprintf(&b, "  %s: %q\n", sysPub, sysJWT)
	b.WriteString("}\n\n")
	b.WriteString("jetstream: {\n")
	fmt.Fprintf(&b, "  store_dir: %q\n", opts.StoreDir)
	b.WriteString("}\n")
	return b.Bytes()
}

// userKeys is a user's key: its seed ("SU...") and its public key
// ("U..."), and the credentials file it was read from (nil for a new key).
type userKeys struct {
	seed []byte
	pub  string
	file []byte
}

// accountSigner signs users' JWTs with the account's key: the public key
// alone as the key pair (its PublicKey needs no derivation) and the
// private key derived once, where nkeys derives it from the seed again for
// each signature.
type accountSigner struct {
	pub  nkeys.KeyPair
	priv ed25519.PrivateKey
}

// signerOf returns the signer of acc, whose public key is accPub.
func signerOf(acc nkeys.KeyPair, accPub string) (*accountSigner, error) {
	seed, err := acc.Seed()
	if err != nil {
		return nil, fmt.Errorf("auth: account key: %w", err)
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("auth: account key: %w", err)
	}
	pub, err := nkeys.FromPublicKey(accPub)
	if err != nil {
		return nil, fmt.Errorf("auth: account key: %w", err)
	}
	return &accountSigner{pub: pub, priv: ed25519.NewKeyFromSeed(raw)}, nil
}

// sign is a [jwt.SignFn].
func (s *accountSigner) sign(_ string, data []byte) ([]byte, error) {
	return ed25519.Sign(s.priv, data), nil
}

// userCreds signs the party's user JWT with the account's key and returns
// its credentials file, as [jwt.FormatUserConfig] writes it (which decodes
// and verifies the JWT it was just given, a third of the work). It returns
// nil when uk's file already holds that JWT (see [signed]): the file is
// kept as it is.
func userCreds(uk userKeys, acc *accountSigner, p access.Party) ([]byte, error) {
	perm := p.Permissions()
	uc := jwt.NewUserClaims(uk.pub)
	uc.Name = p.User
	uc.Pub.Allow = jwt.StringList(perm.Publish)
	uc.Sub.Allow = jwt.StringList(perm.Subscribe)
	if perm.Responses {
		// One reply per request, within the server's default time.
		uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: 2 * time.Minute}
	}
	if uk.file != nil && signed(uk.file, uc, acc.pub) {
		return nil, nil
	}
	token, err := uc.EncodeWithSigner(acc.pub, acc.sign)
	if err != nil {
		return nil, fmt.Errorf("auth: user %s: %w", p.User, err)
	}
	seed, err := jwt.DecorateSeed(uk.seed)
	if err != nil {
		return nil, fmt.Errorf("auth: user %s: %w", p.User, err)
	}
	creds := make([]byte, 0, len(token)+len(seed)+64)
	creds = append(creds, "-----BEGIN NATS USER JWT-----\n"...)
	creds = append(creds, token...)
	creds = append(creds, "\n------END NATS USER JWT------\n\n"...)
	return append(creds, seed...), nil
}

// signed reports whether the credentials file holds a JWT of want, signed
// by the account acc: the same subject, name and user fields (permissions,
// limits), with nothing else set (no expiry, audience, start). Only the
// times and ids of the signature may differ. A file that cannot be read so
// is not.
func signed(file []byte, want *jwt.UserClaims, acc nkeys.KeyPair) bool {
	token := credsJWT(file)
	if token == "" {
		return false
	}
	old, err := jwt.DecodeUserClaims(token) // verifies its signature by its issuer
	if err != nil {
		return false
	}
	accPub, err := acc.PublicKey()
	if err != nil || old.Issuer != accPub || old.Subject != want.Subject || old.Name != want.Name ||
		old.Audience != "" || old.Expires != 0 || old.NotBefore != 0 {
		return false
	}
	w := want.User
	w.Type = jwt.UserClaim
	w.Version = old.Version
	a, err := json.Marshal(old.User)
	if err != nil {
		return false
	}
	b, err := json.Marshal(w)
	return err == nil && bytes.Equal(a, b)
}

// credsJWT returns the JWT of a credentials file as [Gen] writes it: the
// line after "-----BEGIN NATS USER JWT-----"; "" when there is none.
func credsJWT(creds []byte) string {
	begin := false
	for line := range bytes.Lines(creds) {
		line = bytes.TrimSpace(line)
		switch {
		case begin:
			return string(line)
		case bytes.Equal(line, []byte("-----BEGIN NATS USER JWT-----")):
			begin = true
		}
	}
	return ""
}

// userKey returns the user key of the credentials file at path, or a new
// one when there is none.
func userKey(path string) (userKeys, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return userKeys{}, false, fmt.Errorf("auth: new user key: %w", err)
		}
		seed, err := nkeys.EncodeSeed(nkeys.PrefixByteUser, priv.Seed())
		if err != nil {
			return userKeys{}, false, fmt.Errorf("auth: new user key: %w", err)
		}
		pk, err := nkeys.Encode(nkeys.PrefixByteUser, pub)
		if err != nil {
			return userKeys{}, false, fmt.Errorf("auth: new user key: %w", err)
		}
		return userKeys{seed: seed, pub: string(pk)}, true, nil
	}
	if err != nil {
		return userKeys{}, false, fmt.Errorf("auth: %w", err)
	}
	kp, err := credsUserKey(b)
	if err == nil {
		uk := userKeys{file: b}
		if uk.seed, err = kp.Seed(); err == nil {
			uk.pub, err = kp.PublicKey()
		}
		if err == nil {
			return uk, false, nil
		}
	}
	return userKeys{}, false, fmt.Errorf("auth: %s holds no user key (move it away to make a new one): %w", path, err)
}

// credsUserKey returns the user key of a credentials file: its first line
// that is a user's seed ("SU...", surrounding blanks trimmed). This is
// what [jwt.ParseDecoratedUserNKey] finds in the files [Gen] writes
// without its regular expression, which took 1.6 ms a file.
func credsUserKey(creds []byte) (nkeys.KeyPair, error) {
	for line := range bytes.Lines(creds) {
		if line = bytes.TrimSpace(line); bytes.HasPrefix(line, []byte("SU")) {
			return nkeys.FromSeed(line)
		}
	}
	return nil, errors.New("no user seed (a line \"SU...\")")
}

// each calls f(0) to f(n-1) on as many goroutines as there are cores, and
// returns the first error of one of them (the others go on).
func each(n int, f func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers == 0 {
		return nil
	}
	next := make(chan int)
	errs := make(chan error, workers)
	for range workers {
		go func() {
			var first error
			for i := range next {
				if err := f(i); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// loadOrMake reads the seed at path, or makes a key with prefix and writes
// its seed there (mode 0600).
func loadOrMake(path string, prefix nkeys.PrefixByte) (nkeys.KeyPair, bool, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
		if err != nil {
			return nil, false, fmt.Errorf("auth: %s is not a seed (move it away to make a new one): %w", path, err)
		}
		if nkeys.Prefix(publicKey(kp)) != prefix {
			return nil, false, fmt.Errorf("auth: %s is not the seed of a %s key", path, prefix)
		}
		return kp, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("auth: %w", err)
	}
	kp, err := nkeys.CreatePair(prefix)
	if err != nil {
		return nil, false, fmt.Errorf("auth: new %s key: %w", prefix, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, false, fmt.Errorf("auth: new %s key: %w", prefix, err)
	}
	if err := writeFile(path, append(seed, '\n'), 0o600); err != nil {
		return nil, false, err
	}
	return kp, true, nil
}

// revokeGone moves the credentials files of users not in users to
// dir/revoked and returns the public keys of every user there, all revoked.
func revokeGone(dir string, users map[string]bool, res *Result) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	gone := filepath.Join(dir, RevokedDir)
	for _, e := range ents {
		user, ok := strings.CutSuffix(e.Name(), CredsExt)
		if !ok || e.IsDir() || users[user] {
			continue
		}
		if err := os.MkdirAll(gone, 0o700); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(gone, e.Name())); err != nil {
			return nil, fmt.Errorf("auth: revoke %s: %w", user, err)
		}
		res.Revoked = append(res.Revoked, user)
	}
	ents, err = os.ReadDir(gone)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	var pubs []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), CredsExt) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(gone, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		kp, err := credsUserKey(b)
		if err != nil {
			return nil, fmt.Errorf("auth: revoked %s holds no user key: %w", e.Name(), err)
		}
		pubs = append(pubs, publicKey(kp))
	}
	return pubs, nil
}

// publicKey returns kp's public key; a key pair made or read here always
// has one.
func publicKey(kp nkeys.KeyPair) string {
	p, err := kp.PublicKey()
	if err != nil {
		return ""
	}
	return p
}

// writeFile writes b at path with mode perm, through a temporary file
// renamed into place, so that a reader never sees half a file (the
// temporary file is removed when any step fails).
func writeFile(path string, b []byte, perm os.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	return nil
}
