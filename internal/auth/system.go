package auth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// Subjects of the system account's requests that [PushUser] may make.
const (
	// ClaimsUpdate is the subject on which every server with a full
	// resolver takes a newer account JWT.
	ClaimsUpdate = "$SYS.REQ.CLAIMS.UPDATE"
	// ClaimsLookup is the subject pattern on which servers answer with
	// their copy of an account's JWT: "$SYS.REQ.ACCOUNT.<pub>.CLAIMS.LOOKUP".
	ClaimsLookup = "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"
)

// reports are the servers' reports an operator's system user may ask, of
// every server ("$SYS.REQ.SERVER.PING.<report>", and "$SYS.REQ.SERVER.PING"
// itself, the STATSZ of "nats server list") or of one
// ("$SYS.REQ.SERVER.<id>.<report>", as "nats server info" asks VARZ): what
// "nats server list", "info", "ping", "check" and "report jetstream" ask.
// CONNZ, SUBSZ, ACCOUNTZ, LEAFZ, GATEWAYZ and ROUTEZ are not among them
// (CONNZ and SUBSZ list every connection's subscriptions, so every inbox's
// random token), nor anything that changes a server (KICK, LDM, RELOAD,
// CLAIMS.UPDATE and CLAIMS.DELETE, $JS.API.>).
var reports = []string{"STATSZ", "VARZ", "JSZ", "HEALTHZ", "IDZ"}

// reportSubjects returns the subjects of [reports] an operator's system
// user may publish.
func reportSubjects() jwt.StringList {
	out := jwt.StringList{"$SYS.REQ.SERVER.PING"}
	for _, r := range reports {
		out = append(out, "$SYS.REQ.SERVER.PING."+r, "$SYS.REQ.SERVER.*."+r)
	}
	return out
}

// SystemCreds returns the path of [PushUser]'s credentials file,
// dir/system/mesh-auth.creds, issued (or renewed) now when it is missing
// or due: a system-account user that may publish only [ClaimsUpdate] and
// [ClaimsLookup], and read its own inbox. Connect with it to push.
func (a *Authority) SystemCreds() (string, error) {
	a.files.Lock()
	defer a.files.Unlock()
	return a.systemUser(PushUser, false, a.opts.now())
}

// systemUser issues the system-account user name in dir/system, kept when
// it says the same and is not due: with full, an operator's, the servers'
// reports ([reports]) and nothing that changes a server; else only what
// pushing claims needs. Either reads only its own inbox
// ("_INBOX_<name>.>": the nats CLI is told with --inbox-prefix _INBOX_<name>).
func (a *Authority) systemUser(name string, full bool, now time.Time) (string, error) {
	s, err := a.signSystem(name, full, false, now)
	if err != nil {
		return "", err
	}
	return s.is.Path, a.writeSigned(s)
}

// signSystem signs the system-account user name (see
// [Authority.systemUser]) without writing its file; with fresh, under a
// new key whatever its file holds.
func (a *Authority) signSystem(name string, full, fresh bool, now time.Time) (signedUser, error) {
	acc, err := a.account(SystemAccountName)
	if err != nil {
		return signedUser{}, err
	}
	path := SystemCredsPath(a.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return signedUser{}, fmt.Errorf("auth: %w", err)
	}
	uk, made, err := userKey(path)
	if fresh {
		uk, err = newUserKey()
		made = true
	}
	if err != nil {
		return signedUser{}, err
	}
	uc := jwt.NewUserClaims(uk.pub)
	uc.Name = name
	uc.Pub.Allow = jwt.StringList{ClaimsUpdate, ClaimsLookup}
	if full {
		uc.Pub.Allow = reportSubjects()
	}
	uc.Sub.Allow = jwt.StringList{access.InboxPrefix(name) + ".>"}
	return a.signClaims(acc, uc, uk, path, made, now)
}

// writeSigned writes a signed user's credentials file (mode 0600), or
// only makes its mode 0600 when it is kept.
func (a *Authority) writeSigned(s signedUser) error {
	if s.creds != nil {
		return writeFile(s.is.Path, s.creds, 0o600)
	}
	if err := os.Chmod(s.is.Path, 0o600); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// Renew signs anew, with the same key and claims and a new expiry, every
// credentials file of dir (the parties') and of dir/system whose JWT is
// due (a third of [Options.Expiry] left or less, expired included) and was
// signed by one of the accounts' signing keys, and returns their users,
// sorted. Running components read their file again at their next connect
// (the server closes a connection whose JWT expires); a standalone party
// is handed its renewed file.
func (a *Authority) Renew() ([]string, error) {
	a.files.Lock()
	defer a.files.Unlock()
	now := a.opts.now()
	var renewed []string
	dirs := []string{a.dir, filepath.Join(a.dir, SystemDir)}
	for _, in := range access.Accounts[1:] {
		dirs = append(dirs, filepath.Join(a.dir, string(in)))
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("auth: %w", err)
		}
		for _, e := range ents {
			user, ok := userOfFile(e.Name())
			if !ok || e.IsDir() {
				continue
			}
			path := filepath.Join(d, e.Name())
			uk, _, err := userKey(path)
			if err != nil {
				return nil, err
			}
			old, err := jwt.DecodeUserClaims(credsJWT(uk.file))
			if err != nil || old.Subject != uk.pub || !a.due(old, now) {
				continue
			}
			acc := a.accountByPub(old.IssuerAccount)
			if acc == nil || old.Issuer != acc.signPub {
				continue // another signer's: Gen signs it anew from its party
			}
			uc := jwt.NewUserClaims(uk.pub)
			uc.Name = old.Name
			uc.User = old.User
			s, err := a.signClaims(acc, uc, uk, path, false, now)
			if err != nil {
				return nil, err
			}
			if s.creds == nil {
				continue
			}
			if err := writeFile(path, s.creds, 0o600); err != nil {
				return nil, err
			}
			renewed = append(renewed, user)
		}
	}
	sort.Strings(renewed)
	return slices.Compact(renewed), nil // a party renewed in several accounts once
}

// Rotate gives the party a new key in every account it has a user in
// ([access.Party.Accounts]: its storage user, and its users of the
// services and requests accounts), and an operator a new key for its
// system user ([SystemCredsPath]) too: each of its credentials files
// ([AccountCredsPath]) is written anew with a new key and a JWT of its
// permissions there, and every JWT of each old key is revoked in its
// account. A file of the party in an account it no longer acts in is
// revoked and moved to dir/revoked/<account>, as [Gen] does. The accounts
// whose revocations changed are signed anew and recorded
// (dir/accounts/<name>.jwt, [IncludeFile]) before any new file is
// written, so a rotation stopped half way loses no revocation; push
// [Authority.Accounts] (the same JWTs, signed once) to make the servers
// refuse the old keys. Files a [Gen] left for later ([LaterFile]) of the
// party are dropped from their record: [Mend] never writes its old keys
// back. It returns what it issued, one per file: the storage user's
// first, the system user's last. It returns an error when a file of the
// party holds no user key (its old key cannot be revoked: move it away
// and rotate again), or one cannot be read or written.
func (a *Authority) Rotate(p access.Party) ([]Issued, error) {
	a.files.Lock()
	defer a.files.Unlock()
	now := a.opts.now()
	in := p.Accounts()
	for _, acc := range access.Accounts {
		path := AccountCredsPath(a.dir, acc, p.User)
		if !slices.Contains(in, acc) {
			if _, err := os.Stat(path); err == nil {
				if err := a.revokeFile(p.User, acc, now); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err := a.revokeKeyOf(string(acc), path, now); err != nil {
			return nil, fmt.Errorf("auth: rotate %s: %w", p.User, err)
		}
	}
	signed, err := a.sign(p, now, true)
	if err != nil {
		return nil, err
	}
	if p.Has(access.Operator) {
		if err := a.revokeKeyOf(SystemAccountName, SystemCredsPath(a.dir, p.User), now); err != nil {
			return nil, fmt.Errorf("auth: rotate %s: %w", p.User, err)
		}
		s, err := a.signSystem(p.User, true, true, now)
		if err != nil {
			return nil, err
		}
		signed = append(signed, s)
	}
	if _, _, err := a.signAccounts(); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(in))
	for _, acc := range in {
		names = append(names, laterName(acc, p.User))
	}
	if err := a.forgetLater(names); err != nil {
		return nil, err
	}
	out := make([]Issued, len(signed))
	for i, s := range signed {
		if err := a.writeSigned(s); err != nil {
			return nil, err
		}
		s.is.Revoked = true
		out[i] = s.is
	}
	return out, nil
}

// revokeKeyOf revokes in the account name every JWT of the user key of
// the credentials file at path issued up to now (or up to its own JWT's
// issue time, when that is later); a missing file revokes nothing.
func (a *Authority) revokeKeyOf(name, path string, now time.Time) error {
	b, err := readIfThere(path)
	if err != nil || b == nil {
		return err
	}
	kp, err := credsUserKey(b)
	if err != nil {
		return fmt.Errorf("%s holds no user key, so its old key cannot be revoked (move it away and rotate again): %w", path, err)
	}
	acc, err := a.account(name)
	if err != nil {
		return err
	}
	t := now.Unix()
	if uc, err := jwt.DecodeUserClaims(credsJWT(b)); err == nil {
		t = max(t, uc.IssuedAt)
	}
	a.revoke(acc, publicKey(kp), t)
	return nil
}

// forgetLater drops names ([laterName]) from the record of the files a
// [Gen] left for later ([LaterFile]), removing the record when none is
// left; no record is nothing to do.
func (a *Authority) forgetLater(names []string) error {
	path := filepath.Join(a.dir, LaterFile)
	b, err := readIfThere(path)
	if err != nil || b == nil {
		return err
	}
	var pending map[string]string
	if err := json.Unmarshal(b, &pending); err != nil {
		return fmt.Errorf("auth: %s: %w", path, err)
	}
	n := len(pending)
	for _, name := range names {
		delete(pending, name)
	}
	switch {
	case len(pending) == n:
		return nil
	case len(pending) == 0:
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		return nil
	}
	if b, err = json.Marshal(pending); err != nil {
		return fmt.Errorf("auth: %s: %w", path, err)
	}
	return writeFile(path, b, 0o600)
}

// Merge takes the revocations of token, an account JWT a server holds
// (bus.LookupClaims), into its account, and reports whether that changed
// the account: [Authority.Accounts] then signs it anew with them. A
// server's copy may be all that is left of a revocation whose record in dir
// was lost. It returns an error when token is not a JWT the operator
// signed for one of the authority's accounts; "" changes nothing.
func (a *Authority) Merge(token string) (bool, error) {
	if token == "" {
		return false, nil
	}
	ac, err := jwt.DecodeAccountClaims(token)
	if err != nil {
		return false, fmt.Errorf("auth: merge: %w", err)
	}
	acc := a.accountByPub(ac.Subject)
	if acc == nil || ac.Issuer != publicKey(a.op) {
		return false, fmt.Errorf("auth: merge: the account %s signed by %s is not one of this operator's", ac.Subject, ac.Issuer)
	}
	changed := false
	for pub, t := range ac.Revocations {
		if a.revoke(acc, pub, t) {
			changed = true
		}
	}
	return changed, nil
}

// AccountKeys returns the public keys of the authority's accounts, the
// system account's first.
func (a *Authority) AccountKeys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []string{a.accounts[SystemAccountName].pub}
	names := make([]string, 0, len(a.accounts))
	for name := range a.accounts {
		if name != SystemAccountName {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		out = append(out, a.accounts[name].pub)
	}
	return out
}

// PublicKey returns the public key of the user in the credentials file at
// path, or an error when it holds none.
func PublicKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	kp, err := credsUserKey(b)
	if err != nil {
		return "", fmt.Errorf("auth: %s: %w", path, err)
	}
	return publicKey(kp), nil
}

// OperatorKey returns the operator's public key.
func (a *Authority) OperatorKey() string { return publicKey(a.op) }
