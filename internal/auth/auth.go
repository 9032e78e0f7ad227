// Package auth makes the NATS users of a mesh from the parties of package
// access, with NATS's own decentralized authentication (operator mode): an
// operator, one account for the mesh (JetStream enabled) and a system
// account, each an nkey signing a JWT; one user per party whose JWT
// carries the party's permissions and an expiry, signed by its account's
// signing key, written as a standard credentials file (".creds", read by
// nats.go's UserCredentials and the nats CLI's --creds).
//
// The server runs nats-server's full resolver: it keeps the accounts' JWTs
// in a directory of its own and takes newer ones at runtime, pushed on
// $SYS.REQ.CLAIMS.UPDATE (bus.PushClaims) by a system-account user. A user
// who is removed, or whose permissions are taken away, is revoked in its
// account's JWT: once pushed, every server of a cluster closes its
// connections and refuses its old credentials. The account's last signed
// JWT (dir/accounts/<name>.jwt, and the server's copy) is the record of
// who is revoked.
//
// [Gen] writes it all into a directory and keeps what it finds there:
// nothing is signed anew that did not change (the same inputs give the
// same JWTs, byte for byte), keys are made only for new parties, and the
// operator's own server configuration ([ConfigFile]) is written only when
// there is none: the generated part is the include file [IncludeFile].
// [Authority] is the same signing, one party or user at a time, for a
// mesh whose parties change while it runs.
package auth

import (
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

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Files of a directory written by [Gen].
const (
	// ConfigFile is the nats-server configuration: the operator's own,
	// written by Gen only when there is none (listen, cluster, TLS and
	// monitoring blocks are the operator's). It includes IncludeFile and
	// names the JetStream store and the resolver's directory.
	ConfigFile = "nats-server.conf"
	// IncludeFile is the generated part of the configuration, rewritten
	// by each Gen: the operator's JWT, the system account and every
	// account's JWT (resolver_preload).
	IncludeFile = "auth.conf"
	// KeysDir holds the seeds of the operator and the accounts, and the
	// accounts' signing keys (mode 0600).
	KeysDir = "keys"
	// AccountsDir holds the operator's and each account's last signed JWT
	// ("operator.jwt", "<account>.jwt"): the record of the revocations.
	AccountsDir = "accounts"
	// ResolverDir is the full resolver's directory, where the server
	// keeps the accounts' JWTs, unless [Options.ResolverDir] says another.
	ResolverDir = "resolver"
	// SystemDir holds the credentials of system-account users:
	// "<operator>.creds" for each operator (nats server report, ...) and
	// [PushUser]'s.
	SystemDir = "system"
	// RevokedDir holds the credentials of parties no longer in the mesh,
	// revoked in their account.
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

// SystemAccountName is the name of the system account.
const SystemAccountName = "SYS"

// PushUser is the system-account user that pushes accounts' JWTs to the
// servers: dir/system/mesh-auth.creds, made by [Authority.SystemCreds].
const PushUser = "mesh-auth"

// DefaultExpiry is the life of a user's JWT when [Options.Expiry] is zero
// and the directory keeps none.
const DefaultExpiry = 30 * 24 * time.Hour

// Options configures [Gen] and [Open].
type Options struct {
	// StoreDir is the JetStream store directory written into a new
	// ConfigFile. Empty means "<dir>/jetstream".
	StoreDir string
	// ResolverDir is the full resolver's directory written into a new
	// ConfigFile. Empty means "<dir>/resolver".
	ResolverDir string
	// Domain is the JetStream domain of the mesh's servers, for edge
	// nodes whose clients connect to a leafnode server ([Leaf]): written
	// into a new ConfigFile's jetstream block, and every user of the
	// storage account may also call JetStream's API in it
	// ("$JS.<domain>.API.x" beside each "$JS.API.x" it may). Empty means
	// what the directory's [SettingsFile] says, else none.
	Domain string
	// MaxStore is the JetStream max store, in bytes, written into a new
	// ConfigFile's jetstream block (max_file_store): what the mesh's
	// buckets reserve there ([access.StoreReserved]). Zero writes none
	// (nats-server then takes 75% of its disk's free space).
	MaxStore int64
	// Source names what the parties come from (the mesh file), for the
	// configuration's header.
	Source string
	// Expiry is the life of the users' JWTs: each is renewed (signed
	// anew, same key) once a third of it is left. Zero means
	// what the directory's [SettingsFile] says, else [DefaultExpiry];
	// below zero, JWTs never expire.
	Expiry time.Duration
	// Now is the time of the revocations and of when a user is due; zero
	// means the clock's, read at each act. A JWT's expiry is counted from
	// its issue time, which the JWT library sets from the clock as it
	// signs: it lives Expiry (in whole seconds) however long signing took.
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

// normal returns opts with its defaults filled in for dir.
func (opts Options) normal(dir string) (Options, error) {
	if opts.StoreDir == "" {
		opts.StoreDir = filepath.Join(dir, "jetstream")
	}
	if opts.ResolverDir == "" {
		opts.ResolverDir = filepath.Join(dir, ResolverDir)
	}
	if opts.Expiry == 0 {
		opts.Expiry = DefaultExpiry
	}
	for _, p := range []*string{&opts.StoreDir, &opts.ResolverDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return opts, fmt.Errorf("auth: %w", err)
		}
		*p = abs
	}
	return opts, nil
}

// SettingsFile keeps, in a directory [Open] opened, the options every
// later act must sign with the same: {"domain": "...", "expiry": "720h0m0s"}.
// An Options field left zero takes its value from there.
const SettingsFile = "settings.json"

// settings are what [SettingsFile] holds.
type settings struct {
	Domain string `json:"domain,omitempty"`
	Expiry string `json:"expiry,omitempty"`
}

// kept returns opts with its zero Domain and Expiry taken from dir's
// [SettingsFile], when there is one.
func (opts Options) kept(dir string) (Options, error) {
	path := filepath.Join(dir, SettingsFile)
	b, err := readIfThere(path)
	if err != nil || b == nil {
		return opts, err
	}
	var st settings
	if err := json.Unmarshal(b, &st); err != nil {
		return opts, fmt.Errorf("auth: %s: %w", path, err)
	}
	if opts.Domain == "" {
		opts.Domain = st.Domain
	}
	if opts.Expiry == 0 && st.Expiry != "" {
		if opts.Expiry, err = time.ParseDuration(st.Expiry); err != nil {
			return opts, fmt.Errorf("auth: %s: expiry: %w", path, err)
		}
	}
	return opts, nil
}

// keep writes opts' Domain and Expiry into dir's [SettingsFile] (unless it
// holds them).
func (opts Options) keep(dir string) error {
	b, err := json.Marshal(settings{Domain: opts.Domain, Expiry: opts.Expiry.String()})
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	_, err = writeIfChanged(filepath.Join(dir, SettingsFile), append(b, '\n'), 0o600)
	return err
}

// now returns Options.Now, or the clock's time when it is zero.
func (opts Options) now() time.Time {
	if opts.Now.IsZero() {
		return time.Now()
	}
	return opts.Now
}

// Result says what [Gen] wrote.
type Result struct {
	// Config is the path of the nats-server configuration (ConfigFile),
	// Include that of its generated part (IncludeFile).
	Config, Include string
	// ConfigKept says Config was there and is kept as it is.
	ConfigKept bool
	// IncludeWritten says Gen wrote Include anew: its bytes changed (an
	// account's JWT did), or it was not there. Else it is kept byte for
	// byte.
	IncludeWritten bool
	// Creds holds the path of each party's credentials file, by user.
	Creds map[string]string
	// System holds the path of each operator's system-account
	// credentials file, by operator.
	System map[string]string
	// Made lists the users whose keys are new, and "operator key",
	// "account key", "account signing key", "system key"... when those
	// are; Kept those whose keys were found and kept.
	Made, Kept []string
	// Signed lists the users whose JWTs were signed anew (new, changed
	// or renewed); every other user's file is kept byte for byte.
	Signed []string
	// Revoked lists the users whose credentials were found in the
	// directory but who are no longer parties: moved to RevokedDir and
	// revoked in the account. Narrowed lists the users whose earlier
	// JWTs were revoked because their permissions changed.
	Revoked, Narrowed []string
	// Accounts holds every account's JWT, the system account's first:
	// what [bus.PushClaims] delivers to running servers.
	Accounts []string
	// AccountsSigned lists the accounts whose JWTs were signed anew
	// (revocations, or bounds that changed with the mesh: see
	// [access.AccountLimitsOf]); a running server refuses what the new
	// JWTs allow until they are pushed.
	AccountsSigned []string
	// Authority is the authority of the directory, for acts after Gen.
	Authority *Authority

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
// operators' users; a module's contributions are the collections of every
// build's manifest.
func MeshOf(f *meshfile.File, operators []string) access.Mesh {
	m := access.Mesh{Nodes: slices.Clone(f.Nodes), Placement: map[string][]string{}, Operators: slices.Clone(operators)}
	for i := range f.Modules {
		mod := &f.Modules[i]
		m.Modules = append(m.Modules, mod.Name)
		if mod.Trunk().Manifest.KeepsEntries() {
			m.Providers = append(m.Providers, mod.Name)
		}
		var colls []string
		for _, b := range mod.Builds {
			colls = append(colls, b.Manifest.Collections()...)
		}
		if len(colls) > 0 {
			if m.Contributes == nil {
				m.Contributes = map[string][]string{}
			}
			slices.Sort(colls)
			m.Contributes[mod.Name] = slices.Compact(colls)
		}
	}
	for n, ms := range f.Placement {
		m.Placement[n] = slices.Clone(ms)
	}
	return m
}

// CredsPath returns the path of user's credentials file in dir.
func CredsPath(dir, user string) string { return filepath.Join(dir, user+CredsExt) }

// SystemCredsPath returns the path of the system-account user's
// credentials file in dir: dir/system/<user>.creds.
func SystemCredsPath(dir, user string) string { return filepath.Join(dir, SystemDir, user+CredsExt) }

// Gen writes into dir (created, mode 0700; refused with [ErrLooseDir] when
// others may write it) one credentials file per party "<user>.creds" (mode
// 0600, see [Authority.Issue]), one system-account credentials file per
// operator in dir/system, the accounts' JWTs (dir/accounts) and the
// server's include file [IncludeFile]; and [ConfigFile] when there is none
// (or when it is one an earlier version wrote whole). Keys and files that
// hold what Gen would write are kept as they are: run again with the same
// parties, Gen writes the same bytes. A credentials file of a user that is
// not among parties is moved to dir/revoked and its key revoked in the
// account. It returns an error when a file cannot be read or written, or a
// key found there is not valid (nothing is overwritten then). The files of
// the users opts.Later picks are written by [Result.WriteLater], after Gen
// returns; a record of them left by an earlier Gen is replaced (or removed
// when none is left).
func Gen(dir string, parties []access.Party, opts Options) (*Result, error) {
	a, err := Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return a.gen(parties)
}

// gen is [Gen] on a's directory.
func (a *Authority) gen(parties []access.Party) (*Result, error) {
	a.files.Lock()
	defer a.files.Unlock()
	dir, now := a.dir, a.opts.now()
	res := &Result{Config: filepath.Join(dir, ConfigFile), Include: filepath.Join(dir, IncludeFile),
		Creds: map[string]string{}, System: map[string]string{}, Authority: a}

	// Users: keep each party's key, sign its permissions; over every core
	// (a mesh of 1000 nodes has over 1000 users).
	users := map[string]bool{} // each user of each party, by [laterName]
	for _, p := range parties {
		for _, in := range p.Accounts() {
			users[laterName(in, p.User)] = true
		}
	}
	out := make([][]signedUser, len(parties)) // each party's users, storage first
	err := each(len(parties), func(i int) error {
		s, err := a.sign(parties[i], now, false)
		out[i] = s
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, p := range parties {
		is := issuedOf(out[i])
		res.note(p.User, is.Made)
		if is.Changed {
			res.Signed = append(res.Signed, p.User)
		}
		if is.Revoked {
			res.Narrowed = append(res.Narrowed, p.User)
		}
	}

	// Parties that are gone: revoked, moved aside; and every file already
	// aside is revoked in its account (it is when the account's record
	// is there).
	if err := a.revokeGone(users, now, res); err != nil {
		return nil, err
	}
	before := a.tokens()
	a.setLimits(parties)
	if res.Accounts, res.IncludeWritten, err = a.signAccounts(); err != nil {
		return nil, err
	}
	for name, token := range a.tokens() {
		if before[name] != token {
			res.AccountsSigned = append(res.AccountsSigned, name)
		}
	}
	sort.Strings(res.AccountsSigned)
	a.mu.Lock()
	res.Made = append(res.Made, a.made...)
	a.made = nil
	a.mu.Unlock()

	// Each operator's system user, for the server's own reports.
	for _, p := range parties {
		if p.Has(access.Operator) {
			path, err := a.systemUser(p.User, true, now)
			if err != nil {
				return nil, err
			}
			res.System[p.User] = path
		}
	}

	// The files to write, each user of each party: soon, or left for
	// later.
	type file struct {
		name string // the user, or "<account>/<user>" ([laterName])
		s    signedUser
	}
	var soon, later []file
	for i, p := range parties {
		res.Creds[p.User] = out[i][0].is.Path
		for j, s := range out[i] {
			f := file{laterName(p.Accounts()[j], p.User), s}
			if a.opts.Later != nil && a.opts.Later(p.User) {
				later = append(later, f)
			} else {
				soon = append(soon, f)
			}
		}
	}
	write := func(files []file) error {
		return each(len(files), func(i int) error {
			s := files[i].s
			if s.creds == nil {
				// The file holds the same JWT already; only its mode is
				// made what Gen writes.
				return os.Chmod(s.is.Path, 0o600)
			}
			return writeFile(s.is.Path, s.creds, 0o600)
		})
	}
	// The files left for later are recorded before any other is written:
	// whenever the configuration is there, so is what Mend needs.
	record := filepath.Join(dir, LaterFile)
	pending := map[string]string{}
	for _, f := range later {
		if f.s.creds != nil {
			pending[f.name] = string(f.s.creds)
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
	if err := write(soon); err != nil {
		return nil, err
	}
	if res.ConfigKept, err = a.writeConfig(); err != nil {
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
	sort.Strings(res.Signed)
	sort.Strings(res.Revoked)
	sort.Strings(res.Narrowed)
	return res, nil
}

// writeConfig writes [ConfigFile] unless the operator's is there (one an
// earlier version of Gen wrote whole is replaced), and reports whether it
// was kept.
func (a *Authority) writeConfig() (bool, error) {
	path := filepath.Join(a.dir, ConfigFile)
	have, err := readIfThere(path)
	if err != nil {
		return false, err
	}
	if have != nil && !generatedBefore(have) {
		return true, nil
	}
	return false, writeFile(path, serverConfig(a.opts), 0o600)
}

// revokeGone moves the credentials files of users not in users (by
// [laterName]: a party's user of an account it no longer acts in is gone
// too) to dir/revoked (dir/revoked/<account>) and revokes them in their
// account at now; a file already in
// dir/revoked whose key its account does not revoke (its record was lost)
// is revoked too.
func (a *Authority) revokeGone(users map[string]bool, now time.Time, res *Result) error {
	for _, in := range access.Accounts {
		here := filepath.Dir(AccountCredsPath(a.dir, in, "x"))
		ents, err := os.ReadDir(here)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("auth: %w", err)
		}
		for _, e := range ents {
			user, ok := userOfFile(e.Name())
			if !ok || e.IsDir() || users[laterName(in, user)] {
				continue
			}
			if in == access.Storage {
				res.Revoked = append(res.Revoked, user)
			}
			if err := a.revokeFile(user, in, now); err != nil {
				return err
			}
		}
	}
	for _, gone := range []string{filepath.Join(a.dir, RevokedDir), filepath.Join(a.dir, RevokedDir, string(access.Services)),
		filepath.Join(a.dir, RevokedDir, string(access.Requests))} {
		ents, err := os.ReadDir(gone)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		for _, e := range ents {
			if _, ok := userOfFile(e.Name()); !ok || e.IsDir() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(gone, e.Name()))
			if err != nil {
				return fmt.Errorf("auth: %w", err)
			}
			if _, err := a.revokeCreds(b, now, true); err != nil {
				return fmt.Errorf("auth: revoked %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// revokeFile revokes user in account in: all its users, when it is the
// storage account ([Authority.revokeUser]); else the user's file of that
// account alone, moved to dir/revoked/<account>.
func (a *Authority) revokeFile(user string, in access.Account, now time.Time) error {
	if in == access.Storage {
		_, err := a.revokeUser(user, now)
		return err
	}
	path := AccountCredsPath(a.dir, in, user)
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("auth: revoke %s: %w", user, err)
	}
	if _, err := a.revokeCreds(b, now, false); err != nil {
		return fmt.Errorf("auth: revoke %s: %w", user, err)
	}
	gone := filepath.Join(a.dir, RevokedDir, string(in), user+CredsExt)
	if err := os.MkdirAll(filepath.Dir(gone), 0o700); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := os.Rename(path, gone); err != nil {
		return fmt.Errorf("auth: revoke %s: %w", user, err)
	}
	return nil
}

// laterName returns the name of a file left for later in [LaterFile]:
// the user for the storage account, "<account>/<user>" for the others.
func laterName(in access.Account, user string) string {
	if in == access.Storage {
		return user
	}
	return string(in) + "/" + user
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
	for name, creds := range pending {
		in, user, ok := strings.Cut(name, "/")
		if !ok {
			in, user = string(access.Storage), name
		}
		if !mesh.ValidName(user) || !slices.Contains(access.Accounts, access.Account(in)) {
			return nil, fmt.Errorf("auth: mend: %s names the user %q, not a valid name", record, name)
		}
		path := AccountCredsPath(dir, access.Account(in), user)
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
		written = append(written, name)
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
