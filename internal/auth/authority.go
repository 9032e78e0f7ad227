package auth

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// Authority signs a mesh's NATS identities from the keys of one directory
// (what [Gen] writes): the operator signs the accounts' JWTs, each
// account's signing key signs its users' JWTs (the account's own key signs
// nothing after), and each account's last signed JWT is kept in
// dir/accounts/<name>.jwt: its revocations are the source of truth of who
// was revoked, whatever else of the directory is lost. It is safe for
// concurrent use.
//
// Issuing a user writes its credentials file at once. Revoking one, or
// taking a permission away, changes its account's claims; [Authority.Accounts]
// then signs them anew, writes them into the server's include file and
// returns them, for [bus.PushClaims] to deliver to running servers.
type Authority struct {
	dir  string
	opts Options
	op   nkeys.KeyPair
	made []string // keys Open made

	files sync.Mutex // held by each act that writes users' files

	mu       sync.Mutex // guards what follows
	accounts map[string]*account
	opToken  string
}

// account is one NATS account of the mesh: its keys, its last signed JWT
// and the revocations it holds now.
type account struct {
	name    string
	pub     string
	signer  *accountSigner // its signing key
	signPub string
	// token is the account's last signed JWT ("" for none), claims its
	// claims decoded.
	token  string
	claims *jwt.AccountClaims
	// revoked holds the revocations of users: public key -> the time
	// (Unix seconds) at or before which their JWTs were issued.
	revoked map[string]int64
	// limits are the account's connection and leafnode bounds for the
	// parties of the last [Gen] (setLimits); nil keeps those of its last
	// signed JWT.
	limits *access.AccountLimits
}

// Open returns the authority of dir, making dir (mode 0700) and the keys
// that are missing, and reading each account's last signed JWT. It returns
// an error wrapping [ErrLooseDir] when dir exists and others may write it
// or anything under it, or the store and resolver directories it names
// ([CheckTree]),
// or an error when a key cannot be read or made.
func Open(dir string, opts Options) (*Authority, error) {
	if err := CheckTree(dir); err != nil {
		return nil, err
	}
	var err error
	if opts, err = opts.kept(dir); err != nil {
		return nil, err
	}
	if opts, err = opts.normal(dir); err != nil {
		return nil, err
	}
	for _, d := range []string{opts.StoreDir, opts.ResolverDir} {
		if rel, err := filepath.Rel(dir, d); err == nil && filepath.IsLocal(rel) {
			continue // walked with dir
		}
		if err := CheckTree(d); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, KeysDir), filepath.Join(dir, AccountsDir), opts.ResolverDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	if err := opts.keep(dir); err != nil {
		return nil, err
	}
	a := &Authority{dir: dir, opts: opts, accounts: map[string]*account{}}
	op, made, err := loadOrMake(filepath.Join(dir, KeysDir, "operator.nk"), nkeys.PrefixByteOperator)
	if err != nil {
		return nil, err
	}
	a.op = op
	if made {
		a.made = append(a.made, "operator key")
	}
	for _, name := range append([]string{SystemAccountName}, meshAccounts()...) {
		if _, err := a.account(name); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Domain returns the JetStream domain the authority signs for (see
// [Options.Domain]), "" for none.
func (a *Authority) Domain() string { return a.opts.Domain }

// Dir returns the directory of the authority.
func (a *Authority) Dir() string { return a.dir }

// keyName returns the name of an account's key file in keys/ (without
// ".nk"): "account" for [AccountName] and "system" for the system account,
// as the first versions wrote them, the account's name for any other.
func keyName(account string) string {
	switch account {
	case AccountName:
		return "account"
	case SystemAccountName:
		return "system"
	}
	return account
}

// account returns the account name, reading or making its keys and
// reading its last signed JWT the first time.
func (a *Authority) account(name string) (*account, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if acc, ok := a.accounts[name]; ok {
		return acc, nil
	}
	id, made, err := loadOrMake(filepath.Join(a.dir, KeysDir, keyName(name)+".nk"), nkeys.PrefixByteAccount)
	if err != nil {
		return nil, err
	}
	if made {
		a.made = append(a.made, keyName(name)+" key")
	}
	sk, made, err := loadOrMake(filepath.Join(a.dir, KeysDir, keyName(name)+"-signing.nk"), nkeys.PrefixByteAccount)
	if err != nil {
		return nil, err
	}
	if made {
		a.made = append(a.made, keyName(name)+" signing key")
	}
	acc := &account{name: name, pub: publicKey(id), signPub: publicKey(sk), revoked: map[string]int64{}}
	if acc.signer, err = signerOf(sk, acc.signPub); err != nil {
		return nil, err
	}
	// The last signed JWT: the record in accounts/, or the copy the
	// server keeps in its resolver directory, whichever is newer; the
	// revocations of both are kept.
	for _, path := range []string{a.accountFile(name), filepath.Join(a.opts.ResolverDir, acc.pub+".jwt")} {
		b, err := readIfThere(path)
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		token := string(bytes.TrimSpace(b))
		ac, err := jwt.DecodeAccountClaims(token)
		if err != nil || ac.Subject != acc.pub || ac.Issuer != publicKey(a.op) {
			continue // another mesh's, or not a JWT: signed anew
		}
		for pub, t := range ac.Revocations {
			acc.revoked[pub] = max(acc.revoked[pub], t)
		}
		if acc.claims == nil || ac.IssuedAt > acc.claims.IssuedAt {
			acc.token, acc.claims = token, ac
		}
	}
	a.accounts[name] = acc
	return acc, nil
}

// accountFile returns the path of the record of account name's last
// signed JWT.
func (a *Authority) accountFile(name string) string {
	return filepath.Join(a.dir, AccountsDir, name+".jwt")
}

// meshAccounts returns the names of the mesh's accounts ([access.Accounts]):
// storage ([AccountName]) first.
func meshAccounts() []string {
	out := make([]string, len(access.Accounts))
	for i, acc := range access.Accounts {
		out[i] = string(acc)
	}
	return out
}

// AccountCredsPath returns the path of user's credentials file of account
// acc in dir: [CredsPath] for [access.Storage], "<dir>/<account>/<user>.creds"
// for the others (package bus finds them there beside the storage one:
// bus.AccountCreds).
func AccountCredsPath(dir string, acc access.Account, user string) string {
	if acc == access.Storage {
		return CredsPath(dir, user)
	}
	return filepath.Join(dir, string(acc), user+CredsExt)
}

// accountByPub returns the loaded account whose public key is pub, nil
// when none is.
func (a *Authority) accountByPub(pub string) *account {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, acc := range a.accounts {
		if acc.pub == pub {
			return acc
		}
	}
	return nil
}

// revoke revokes in acc every JWT of the user key pub issued at or before
// t (Unix seconds), and reports whether that changed the account.
func (a *Authority) revoke(acc *account, pub string, t int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if acc.revoked[pub] >= t {
		return false
	}
	acc.revoked[pub] = t
	return true
}

// revokedAt returns the time (Unix seconds) at or before which acc
// revokes the JWTs of pub, 0 for none.
func (a *Authority) revokedAt(acc *account, pub string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return acc.revoked[pub]
}

// isRevoked reports whether acc revokes the JWT of pub issued at iat.
func (a *Authority) isRevoked(acc *account, pub string, iat int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := acc.revoked[pub]
	return ok && t >= iat
}

// Issued says what [Authority.Issue] did.
type Issued struct {
	// User is the party's user and Path its credentials file.
	User, Path string
	// Made says its key is new; Changed that its file was written (a new
	// key, other claims, or an expiry renewed).
	Made, Changed bool
	// Revoked says its earlier JWTs were revoked in its account, because
	// the new one says other permissions: [Authority.Accounts] signs the
	// account anew, and its push refuses the old credentials.
	Revoked bool
	// Expires is when its JWT expires.
	Expires time.Time
}

// Issue writes the party's credentials file dir/<user>.creds (mode 0600):
// its key (kept when the file holds one) and a JWT carrying its
// permissions, signed by its account's signing key and expiring after
// [Options.Expiry]. A file whose JWT says the same and is not due for
// renewal (a third of its life left) is kept byte for byte. When the file
// held a JWT of this account that said other permissions, those earlier
// JWTs are revoked in the account (Issued.Revoked): push
// [Authority.Accounts] to make the servers refuse them.
func (a *Authority) Issue(p access.Party) (Issued, error) {
	a.files.Lock()
	defer a.files.Unlock()
	all, err := a.sign(p, a.opts.now(), false)
	if err != nil {
		return Issued{}, err
	}
	for _, s := range all {
		if s.creds != nil {
			if err := writeFile(s.is.Path, s.creds, 0o600); err != nil {
				return Issued{}, err
			}
		} else if err := os.Chmod(s.is.Path, 0o600); err != nil {
			return Issued{}, fmt.Errorf("auth: %w", err)
		}
	}
	return issuedOf(all), nil
}

// issuedOf returns what was issued of one party's users (its storage
// user's first): the storage user's path and expiry, and Made, Changed
// and Revoked when they are so of any of its users.
func issuedOf(all []signedUser) Issued {
	is := all[0].is
	for _, s := range all[1:] {
		is.Made = is.Made || s.is.Made
		is.Changed = is.Changed || s.is.Changed
		is.Revoked = is.Revoked || s.is.Revoked
	}
	return is
}

// signedUser is a user's credentials as signed: creds is nil when its file
// is kept.
type signedUser struct {
	is    Issued
	creds []byte
}

// sign signs the party's users (see [Authority.Issue]), one in each of
// its accounts ([access.Party.Accounts]: storage first), without writing
// their files. With fresh, each user gets a new key (see
// [Authority.Rotate]) whatever its file holds; else the file's key is
// kept.
func (a *Authority) sign(p access.Party, now time.Time, fresh bool) ([]signedUser, error) {
	var out []signedUser
	for _, in := range p.Accounts() {
		acc, err := a.account(string(in))
		if err != nil {
			return nil, err
		}
		path := AccountCredsPath(a.dir, in, p.User)
		if in != access.Storage {
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return nil, fmt.Errorf("auth: %w", err)
			}
		}
		uk, made, err := userKey(path)
		if fresh {
			uk, err = newUserKey()
			made = true
		}
		if err != nil {
			return nil, err
		}
		uc := userClaims(uk.pub, p, p.PermissionsIn(in), p.LimitsIn(in))
		if a.opts.Domain != "" && in == access.Storage {
			uc.Pub.Allow = inDomain(uc.Pub.Allow, a.opts.Domain)
		}
		s, err := a.signClaims(acc, uc, uk, path, made, now)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// signClaims signs uc for the user key uk with acc's signing key (see
// [Authority.Issue]); path is the user's file, made whether uk is new.
func (a *Authority) signClaims(acc *account, uc *jwt.UserClaims, uk userKeys, path string, made bool, now time.Time) (signedUser, error) {
	uc.IssuerAccount = acc.pub
	su := signedUser{is: Issued{User: uc.Name, Path: path, Made: made}}
	if uk.file != nil {
		if old, err := jwt.DecodeUserClaims(credsJWT(uk.file)); err == nil && old.Subject == uk.pub {
			same := sameUser(old, uc, acc.signPub)
			if same && !a.due(old, now) && !a.isRevoked(acc, uk.pub, old.IssuedAt) {
				su.is.Expires = time.Unix(old.Expires, 0)
				return su, nil
			}
			if !same && (old.IssuerAccount == acc.pub || old.Issuer == acc.pub) && !widens(old, uc, acc.signPub) {
				// Other claims of this account: every JWT of the key
				// issued up to now (the file's and any older copy) is
				// refused from the account's next push. The new one
				// must be issued after that, a second later at most.
				t := max(old.IssuedAt, now.Unix())
				su.is.Revoked = a.revoke(acc, uk.pub, t)
				waitPast(t)
				now = time.Now()
			}
		}
	}
	if t := a.revokedAt(acc, uk.pub); t >= now.Unix() {
		waitPast(t)
		now = time.Now()
	}
	if a.opts.Expiry > 0 {
		uc.Expires = now.Add(a.opts.Expiry).Unix()
		su.is.Expires = time.Unix(uc.Expires, 0)
	}
	token, err := uc.EncodeWithSigner(acc.signer.pub, acc.signer.sign)
	// The JWT library sets its issue time as it encodes: a second that
	// ticked since now would leave the JWT a second short of its life.
	// Its expiry is then counted from its issue time, and it is signed
	// again (a few tries: each is far under a second).
	for try := 0; err == nil && a.opts.Expiry > 0 && try < 3; try++ {
		exp := time.Unix(uc.IssuedAt, 0).Add(a.opts.Expiry).Unix()
		if exp == uc.Expires {
			break
		}
		uc.Expires = exp
		su.is.Expires = time.Unix(exp, 0)
		token, err = uc.EncodeWithSigner(acc.signer.pub, acc.signer.sign)
	}
	if err != nil {
		return signedUser{}, fmt.Errorf("auth: user %s: %w", uc.Name, err)
	}
	if su.creds, err = credsFile(token, uk.seed); err != nil {
		return signedUser{}, fmt.Errorf("auth: user %s: %w", uc.Name, err)
	}
	su.is.Changed = true
	return su, nil
}

// widens reports whether the user JWT want differs from old only by
// limits at least as large (the mesh grew past a bound, access.LimitsIn):
// old allows less than want, so it need not be revoked, and a party given
// its new file later (a standalone deployment's) goes on meanwhile.
func widens(old, want *jwt.UserClaims, signPub string) bool {
	w := *want
	w.Limits.Subs, w.Limits.Payload = old.Limits.Subs, old.Limits.Payload
	return sameUser(old, &w, signPub) && atLeast(want.Limits.Subs, old.Limits.Subs) &&
		atLeast(want.Limits.Payload, old.Limits.Payload)
}

// atLeast reports whether the limit a allows at least what b does
// (jwt.NoLimit, -1, allows anything).
func atLeast(a, b int64) bool {
	return a == jwt.NoLimit || (b != jwt.NoLimit && a >= b)
}

// due reports whether the user JWT old is due for renewal at now: a third
// of [Options.Expiry] left or less, or an expiry where none is wanted, or
// none where one is.
func (a *Authority) due(old *jwt.UserClaims, now time.Time) bool {
	if a.opts.Expiry <= 0 {
		return old.Expires != 0
	}
	if old.Expires == 0 {
		return true
	}
	return time.Unix(old.Expires, 0).Sub(now) < a.opts.Expiry/3
}

// waitPast returns once the clock is past the Unix second sec: a JWT
// signed then has a later "iat" than one of sec.
func waitPast(sec int64) {
	for {
		now := time.Now()
		if now.Unix() > sec {
			return
		}
		time.Sleep(time.Until(time.Unix(now.Unix()+1, 0)))
	}
}

// userClaims returns the claims of the party's user with the key pub, the
// permissions perm and the limits lim (its [access.Party.PermissionsIn]
// and [access.Party.LimitsIn] one account): its name, its permissions, its
// subscriptions and payload per connection, and one reply per request it
// receives when it answers a verb.
func userClaims(pub string, p access.Party, perm access.Permissions, lim access.Limits) *jwt.UserClaims {
	uc := jwt.NewUserClaims(pub)
	uc.Name = p.User
	uc.Limits.Subs, uc.Limits.Payload = lim.Subs, lim.Payload
	uc.Pub.Allow = jwt.StringList(perm.Publish)
	uc.Sub.Allow = jwt.StringList(perm.Subscribe)
	// An empty allow list is no limit at all: a user that may publish
	// (or subscribe to) nothing is denied every subject. A responder
	// still replies to the requests delivered to it (Resp).
	if len(perm.Publish) == 0 {
		uc.Pub.Deny = jwt.StringList{">"}
	}
	if len(perm.Subscribe) == 0 {
		uc.Sub.Deny = jwt.StringList{">"}
	}
	if perm.Responses {
		// One reply per request, within the server's default time.
		uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: 2 * time.Minute}
	}
	return uc
}

// inDomain returns subjects with, after them, the twin in JetStream domain
// domain of each that is JetStream's API ("$JS.API.x" -> "$JS.<domain>.API.x")
// or a key-value put ("$KV.b.k" -> "$JS.<domain>.API.$KV.b.k"): what the
// same act publishes from a leafnode server of an edge site, whose hub maps
// the twin back.
func inDomain(subjects jwt.StringList, domain string) jwt.StringList {
	out := slices.Clone(subjects)
	for _, s := range subjects {
		if rest, ok := strings.CutPrefix(s, "$JS.API."); ok {
			out = append(out, "$JS."+domain+".API."+rest)
		} else if strings.HasPrefix(s, "$KV.") {
			// A key-value put in a domain is published there.
			out = append(out, "$JS."+domain+".API."+s)
		}
	}
	return out
}

// sameUser reports whether the user JWT old says what want says, signed
// by the signing key signPub: the same subject, name, issuer account and
// user fields (permissions, limits), no audience nor start. Its times
// (iat, exp) and id may differ.
func sameUser(old, want *jwt.UserClaims, signPub string) bool {
	if old.Issuer != signPub || old.IssuerAccount != want.IssuerAccount || old.Subject != want.Subject ||
		old.Name != want.Name || old.Audience != "" || old.NotBefore != 0 {
		return false
	}
	w := want.User
	w.Type = jwt.UserClaim
	w.Version = old.Version
	w.IssuerAccount = old.IssuerAccount
	o := old.User
	a, err := json.Marshal(o)
	if err != nil {
		return false
	}
	b, err := json.Marshal(w)
	return err == nil && bytes.Equal(a, b)
}

// Revoke revokes user in its account: every JWT of its key issued until
// now is refused once the account's JWT is pushed ([Authority.Accounts]),
// and its credentials file is moved to dir/revoked. It reports whether the
// account changed (false when the user was revoked already). A user with
// no credentials file in dir nor in dir/revoked is an error wrapping
// [fs.ErrNotExist].
func (a *Authority) Revoke(user string) (bool, error) {
	a.files.Lock()
	defer a.files.Unlock()
	return a.revokeUser(user, a.opts.now())
}

// revokeUser is [Authority.Revoke] with files held: the user's file of
// every account ([AccountCredsPath]) is revoked and moved aside
// (dir/revoked, dir/revoked/<account>); a user whose storage file is in
// neither place is an error wrapping [fs.ErrNotExist].
func (a *Authority) revokeUser(user string, now time.Time) (bool, error) {
	changed := false
	for _, in := range access.Accounts {
		path := AccountCredsPath(a.dir, in, user)
		gone := filepath.Join(a.dir, RevokedDir, user+CredsExt)
		if in != access.Storage {
			gone = filepath.Join(a.dir, RevokedDir, string(in), user+CredsExt)
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			path = gone
			b, err = os.ReadFile(gone)
		}
		if errors.Is(err, fs.ErrNotExist) && in != access.Storage {
			continue // the party has no user there
		}
		if err != nil {
			return false, fmt.Errorf("auth: revoke %s: %w", user, err)
		}
		c, err := a.revokeCreds(b, now, path == gone)
		if err != nil {
			return false, fmt.Errorf("auth: revoke %s: %w", user, err)
		}
		changed = changed || c
		if path != gone {
			if err := os.MkdirAll(filepath.Dir(gone), 0o700); err != nil {
				return false, fmt.Errorf("auth: %w", err)
			}
			if err := os.Rename(path, gone); err != nil {
				return false, fmt.Errorf("auth: revoke %s: %w", user, err)
			}
		}
	}
	return changed, nil
}

// revokeCreds revokes in its account the user key of a credentials file,
// and reports whether that changed the account. A file of a party removed
// now (gone false: it is still in dir) has every JWT of its key issued up
// to now revoked, whatever earlier entry the key had (one a permission
// change left is older than the JWTs signed since). A file already in
// dir/revoked (gone true) has at least its own JWT revoked (its "iat"),
// or now when it holds none that can be read and its key has no entry:
// looking at it again changes nothing.
func (a *Authority) revokeCreds(b []byte, now time.Time, gone bool) (bool, error) {
	kp, err := credsUserKey(b)
	if err != nil {
		return false, err
	}
	pub := publicKey(kp)
	acc := a.defaultAccount()
	var iat int64
	if uc, err := jwt.DecodeUserClaims(credsJWT(b)); err == nil {
		issuer := uc.IssuerAccount
		if issuer == "" {
			issuer = uc.Issuer
		}
		if x := a.accountByPub(issuer); x != nil {
			acc = x
		}
		iat = uc.IssuedAt
	}
	t := iat
	if !gone {
		t = max(t, now.Unix())
	} else if t == 0 {
		a.mu.Lock()
		_, done := acc.revoked[pub]
		a.mu.Unlock()
		if done {
			return false, nil
		}
		t = now.Unix()
	}
	return a.revoke(acc, pub, t), nil
}

// defaultAccount returns the account of [AccountName].
func (a *Authority) defaultAccount() *account {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accounts[AccountName]
}

// Accounts signs anew each account whose claims changed (revocations),
// writes its record (dir/accounts/<name>.jwt) and the server's include
// file ([IncludeFile]: the operator, the system account and every
// account's JWT, which a server stores at its start when it is newer than
// its own), and returns every account's JWT, the system account's first:
// what [bus.PushClaims] delivers to running servers. An account that did
// not change keeps its JWT byte for byte; one signed anew is issued a
// second after its previous JWT at least, so that servers take it as the
// newer.
func (a *Authority) Accounts() ([]string, error) {
	out, _, err := a.signAccounts()
	return out, err
}

// signAccounts is [Authority.Accounts], also reporting whether it wrote
// [IncludeFile] anew (its bytes changed, or it was not there).
func (a *Authority) signAccounts() ([]string, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	names := make([]string, 0, len(a.accounts))
	for name := range a.accounts {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == SystemAccountName) != (names[j] == SystemAccountName) {
			return names[i] == SystemAccountName
		}
		return names[i] < names[j]
	})
	sys := a.accounts[SystemAccountName]
	var out []string
	for _, name := range names {
		acc := a.accounts[name]
		want := a.accountClaims(acc)
		if acc.claims == nil || !sameAccount(acc.claims, want, publicKey(a.op)) {
			if acc.claims != nil {
				waitPast(acc.claims.IssuedAt)
			}
			token, err := want.Encode(a.op)
			if err != nil {
				return nil, false, fmt.Errorf("auth: account %s: %w", name, err)
			}
			claims, err := jwt.DecodeAccountClaims(token)
			if err != nil {
				return nil, false, fmt.Errorf("auth: account %s: %w", name, err)
			}
			acc.token, acc.claims = token, claims
		}
		if _, err := writeIfChanged(a.accountFile(name), []byte(acc.token+"\n"), 0o600); err != nil {
			return nil, false, err
		}
		out = append(out, acc.token)
	}
	if err := a.operatorJWT(sys.pub); err != nil {
		return nil, false, err
	}
	wrote, err := writeIfChanged(filepath.Join(a.dir, IncludeFile), a.include(names), 0o600)
	if err != nil {
		return nil, false, err
	}
	return out, wrote, nil
}

// accountClaims returns the claims account acc is to have: its name, its
// signing key, its JetStream limits (the storage account's alone), the
// services account's exports of every verb and the requests account's
// imports of them, and its revocations. a.mu is held.
func (a *Authority) accountClaims(acc *account) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(acc.pub)
	ac.Name = acc.name
	ac.SigningKeys.Add(acc.signPub)
	// Its connections and leafnode links, on every server at once: what
	// the mesh's parties need (access.AccountLimitsOf), or as last
	// signed when no Gen told them.
	switch {
	case acc.limits != nil:
		ac.Limits.Conn, ac.Limits.LeafNodeConn = acc.limits.Conns, acc.limits.Leafs
	case acc.claims != nil:
		ac.Limits.Conn, ac.Limits.LeafNodeConn = acc.claims.Limits.Conn, acc.claims.Limits.LeafNodeConn
	}
	switch access.Account(acc.name) {
	case access.Storage:
		// The storage account alone holds JetStream: on disk, every
		// stream bounded (its maker sets max_bytes, at most
		// access.MaxStreamBytes: package bus sets each bucket's), none
		// in memory.
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: 0, DiskStorage: jwt.NoLimit,
			Streams: jwt.NoLimit, Consumer: jwt.NoLimit, MaxBytesRequired: true, DiskMaxStreamBytes: access.MaxStreamBytes}
	case access.Services:
		// Every verb, answered once: the server rewrites each request's
		// reply subject, so that a responder replies nowhere else. The
		// vault's verbs are answered within access.VaultAnswerWithin:
		// the server forgets a request's reply mapping after it.
		for _, v := range access.Verbs() {
			ac.Exports.Add(&jwt.Export{Name: v, Subject: jwt.Subject(v), Type: jwt.Service,
				ResponseType: jwt.ResponseTypeSingleton, ResponseThreshold: access.AnsweredWithin(v)})
		}
	case access.Requests:
		// Every verb, the asker's identity shared with the responder
		// (the header Nats-Request-Info, set by the server).
		if svc := a.accounts[string(access.Services)]; svc != nil {
			for _, v := range access.Verbs() {
				ac.Imports.Add(&jwt.Import{Name: v, Subject: jwt.Subject(v), Account: svc.pub,
					Type: jwt.Service, Share: true})
			}
		}
	}
	if len(acc.revoked) > 0 {
		ac.Revocations = jwt.RevocationList{}
		for pub, t := range acc.revoked {
			ac.Revocations[pub] = t
		}
	}
	return ac
}

// tokens returns each account's last signed JWT ("" for none), by name.
func (a *Authority) tokens() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]string, len(a.accounts))
	for name, acc := range a.accounts {
		out[name] = acc.token
	}
	return out
}

// setLimits sets each account's connection and leafnode bounds for a mesh
// of parties ([access.AccountLimitsOf], [access.SystemLimits]): the next
// [Authority.Accounts] signs anew an account whose bounds change.
func (a *Authority) setLimits(parties []access.Party) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, acc := range a.accounts {
		lim := access.AccountLimitsOf(parties, access.Account(name))
		if name == SystemAccountName {
			lim = access.SystemLimits(parties)
		}
		acc.limits = &lim
	}
}

// sameAccount reports whether the account JWT old says what want says,
// signed by issuer: every field but its times and id.
func sameAccount(old, want *jwt.AccountClaims, issuer string) bool {
	if old.Issuer != issuer {
		return false
	}
	w := *want
	w.IssuedAt, w.ID, w.Issuer, w.Expires = old.IssuedAt, old.ID, old.Issuer, old.Expires
	w.Type, w.Version = jwt.AccountClaim, old.Version
	x, err := json.Marshal(old)
	if err != nil {
		return false
	}
	y, err := json.Marshal(&w)
	return err == nil && bytes.Equal(x, y)
}

// operatorJWT signs the operator's JWT, naming the system account sysPub,
// unless its record (dir/accounts/operator.jwt) says that already. a.mu is
// held.
func (a *Authority) operatorJWT(sysPub string) error {
	if a.opToken != "" {
		return nil
	}
	opPub := publicKey(a.op)
	want := jwt.NewOperatorClaims(opPub)
	want.Name = "mesh-provisioner"
	want.SystemAccount = sysPub
	path := filepath.Join(a.dir, AccountsDir, "operator.jwt")
	b, err := readIfThere(path)
	if err != nil {
		return err
	}
	if b != nil {
		token := string(bytes.TrimSpace(b))
		if old, err := jwt.DecodeOperatorClaims(token); err == nil && old.Issuer == opPub && old.Subject == opPub {
			w := *want
			w.IssuedAt, w.ID, w.Issuer = old.IssuedAt, old.ID, old.Issuer
			w.Type, w.Version = jwt.OperatorClaim, old.Version
			x, err1 := json.Marshal(old)
			y, err2 := json.Marshal(&w)
			if err1 == nil && err2 == nil && bytes.Equal(x, y) {
				a.opToken = token
				return nil
			}
		}
	}
	token, err := want.Encode(a.op)
	if err != nil {
		return fmt.Errorf("auth: operator: %w", err)
	}
	if err := writeFile(path, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	a.opToken = token
	return nil
}

// accountSigner signs users' JWTs with an account's signing key: the
// public key alone as the key pair (its PublicKey needs no derivation) and
// the private key derived once, where nkeys derives it from the seed again
// for each signature.
type accountSigner struct {
	pub  nkeys.KeyPair
	priv ed25519.PrivateKey
}

// signerOf returns the signer of key, whose public key is pub.
func signerOf(key nkeys.KeyPair, pub string) (*accountSigner, error) {
	seed, err := key.Seed()
	if err != nil {
		return nil, fmt.Errorf("auth: signing key: %w", err)
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("auth: signing key: %w", err)
	}
	pk, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("auth: signing key: %w", err)
	}
	return &accountSigner{pub: pk, priv: ed25519.NewKeyFromSeed(raw)}, nil
}

// sign is a [jwt.SignFn].
func (s *accountSigner) sign(_ string, data []byte) ([]byte, error) {
	return ed25519.Sign(s.priv, data), nil
}
