package auth

import (
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
// it says the same and is not due: with full, the whole system account (an
// operator's: server reports, and any system request); else only what
// pushing claims needs.
func (a *Authority) systemUser(name string, full bool, now time.Time) (string, error) {
	acc, err := a.account(SystemAccountName)
	if err != nil {
		return "", err
	}
	path := SystemCredsPath(a.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	uk, made, err := userKey(path)
	if err != nil {
		return "", err
	}
	uc := jwt.NewUserClaims(uk.pub)
	uc.Name = name
	if !full {
		uc.Pub.Allow = jwt.StringList{ClaimsUpdate, ClaimsLookup}
		uc.Sub.Allow = jwt.StringList{access.InboxPrefix(name) + ".>"}
	}
	s, err := a.signClaims(acc, uc, uk, path, made, now)
	if err != nil {
		return "", err
	}
	if s.creds != nil {
		return path, writeFile(path, s.creds, 0o600)
	}
	return path, os.Chmod(path, 0o600)
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

// Rotate gives the party's storage user a new key (its users of the
// services and requests accounts keep theirs): its credentials file is written with
// a new key and JWT, and every JWT of its old key is revoked in its
// account (push [Authority.Accounts] to make the servers refuse them). It
// returns what it issued.
func (a *Authority) Rotate(p access.Party) (Issued, error) {
	a.files.Lock()
	defer a.files.Unlock()
	now := a.opts.now()
	acc, err := a.account(AccountName)
	if err != nil {
		return Issued{}, err
	}
	path := CredsPath(a.dir, p.User)
	if b, err := readIfThere(path); err != nil {
		return Issued{}, err
	} else if b != nil {
		kp, err := credsUserKey(b)
		if err != nil {
			return Issued{}, fmt.Errorf("auth: rotate %s: %w", p.User, err)
		}
		a.revoke(acc, publicKey(kp), now.Unix())
	}
	uk, err := newUserKey()
	if err != nil {
		return Issued{}, err
	}
	s, err := a.signClaims(acc, userClaims(uk.pub, p, p.Permissions()), uk, path, true, now)
	if err != nil {
		return Issued{}, err
	}
	s.is.Revoked = true
	return s.is, writeFile(path, s.creds, 0o600)
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
