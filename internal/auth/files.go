package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// ErrLooseDir is returned (wrapped, naming the path and its mode) by
// [CheckDir], [CheckTree], [Open] and [Gen] when a directory that exists,
// or a file or directory under it, may be written by a group or by
// everyone, or is owned by another user, or is a symbolic link another
// user (not root) owns: another local user could replace or change the
// server's configuration, a key or a credentials file.
var ErrLooseDir = errors.New("auth: writable by others")

// CheckDir returns nil when dir does not exist, or is a directory owned by
// this process's user that neither its group nor others may write; else an
// error wrapping [ErrLooseDir] that says what to do. dir may be a symbolic
// link (or a chain of them) owned by this user or root, to such a
// directory: a link another user owns is refused, since its owner may
// point it elsewhere at any time. It never changes the directory: what
// another user may have put there is for its owner to check.
func CheckDir(dir string) error {
	st, err := follow(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("auth: %s is not a directory", dir)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s has mode %04o: another local user may have replaced its files; check them, run \"chmod go-w %s\", and run again",
			ErrLooseDir, dir, st.Mode().Perm(), dir)
	}
	if uid, ok := owner(st); ok && uid != os.Getuid() {
		return fmt.Errorf("%w: %s is owned by the user %d, not by this one (%d)", ErrLooseDir, dir, uid, os.Getuid())
	}
	return nil
}

// maxLinks bounds the symbolic links [follow] follows from one path, as
// Linux's own resolution does (40).
const maxLinks = 40

// follow returns what path names, following symbolic links one at a time
// (os.Stat follows them all unseen): each link on the way must be owned by
// this process's user or root, else the error wraps [ErrLooseDir] naming
// the link, its owner and what to do. A link that leads nowhere is an
// error wrapping [fs.ErrNotExist], as a missing path is.
func follow(path string) (fs.FileInfo, error) {
	at := path
	for range maxLinks {
		st, err := os.Lstat(at)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			return nil, fmt.Errorf("auth: %w", err)
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			return st, nil
		}
		if uid, ok := owner(st); ok && uid != os.Getuid() && uid != 0 {
			return nil, fmt.Errorf("%w: %s is a symbolic link owned by the user %d, neither this one (%d) nor root: its owner may point it elsewhere at any time; "+
				"remove the link and give the path it points to, or make the link yourself", ErrLooseDir, at, uid, os.Getuid())
		}
		to, err := os.Readlink(at)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(at), to)
		}
		at = to
	}
	return nil, fmt.Errorf("auth: %s: more than %d symbolic links", path, maxLinks)
}

// owner returns the user id of the owner of st, and whether the system
// says one.
func owner(st fs.FileInfo) (int, bool) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid), true
	}
	return 0, false
}

// CheckTree returns nil when root does not exist, or when root ([CheckDir])
// and every file and directory under it is owned by this process's user
// and may be written by neither its group nor others, skipping the
// directories of root named in skip (and what is under them); else an
// error wrapping [ErrLooseDir] naming the first such path, its mode, and
// how many there are. A symbolic link under root (or root itself) is
// followed, link by link ([CheckDir]'s rule: each owned by this user or
// root), and what it points to is checked, a directory with all under it.
// Like [CheckDir] it changes nothing: a file others may have written is
// for its owner to check (the server's configuration, a key, a
// credentials file, a JetStream store).
func CheckTree(root string, skip ...string) error {
	if err := CheckDir(root); err != nil {
		return err
	}
	c := treeCheck{seen: map[[2]uint64]bool{}}
	if err := c.walk(root, skip); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if c.first != nil {
		return fmt.Errorf("%w (%d such under %s): another local user may have changed them; check them, run \"chmod -R go-w %s\", and run again",
			c.first, c.n, root, root)
	}
	return nil
}

// treeCheck is one [CheckTree]: the first loose entry found, how many,
// and the directories walked (device and inode), so that a link back up
// the tree is walked once.
type treeCheck struct {
	first error
	n     int
	seen  map[[2]uint64]bool
}

// loose counts err, a loose entry.
func (c *treeCheck) loose(err error) {
	c.n++
	if c.first == nil {
		c.first = err
	}
}

// walk checks every entry of the directory dir, and under it, but the
// directories named in skip; it returns an error only when a directory
// cannot be read.
func (c *treeCheck) walk(dir string, skip []string) error {
	if st, err := os.Stat(dir); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			id := [2]uint64{uint64(sys.Dev), sys.Ino}
			if c.seen[id] {
				return nil
			}
			c.seen[id] = true
		}
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		st, err := follow(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a dangling link, or removed meanwhile: nothing to read there
		}
		if errors.Is(err, ErrLooseDir) {
			c.loose(err)
			continue
		}
		if err != nil {
			return err
		}
		if st.IsDir() && slices.Contains(skip, e.Name()) {
			continue
		}
		if loose := looseEntry(path, st); loose != nil {
			c.loose(loose)
			continue // what is under it is not this user's to trust either
		}
		if st.IsDir() {
			if err := c.walk(path, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// looseEntry returns an error wrapping [ErrLooseDir] when the file or
// directory at path, of st, may be written by its group or others or is
// owned by another user; else nil.
func looseEntry(path string, st fs.FileInfo) error {
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s has mode %04o", ErrLooseDir, path, st.Mode().Perm())
	}
	if uid, ok := owner(st); ok && uid != os.Getuid() {
		return fmt.Errorf("%w: %s is owned by the user %d, not by this one (%d)", ErrLooseDir, path, uid, os.Getuid())
	}
	return nil
}

// userKeys is a user's key: its seed ("SU...") and its public key
// ("U..."), and the credentials file it was read from (nil for a new key).
type userKeys struct {
	seed []byte
	pub  string
	file []byte
}

// newUserKey makes a user key.
func newUserKey() (userKeys, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return userKeys{}, fmt.Errorf("auth: new user key: %w", err)
	}
	seed, err := nkeys.EncodeSeed(nkeys.PrefixByteUser, priv.Seed())
	if err != nil {
		return userKeys{}, fmt.Errorf("auth: new user key: %w", err)
	}
	pk, err := nkeys.Encode(nkeys.PrefixByteUser, pub)
	if err != nil {
		return userKeys{}, fmt.Errorf("auth: new user key: %w", err)
	}
	return userKeys{seed: seed, pub: string(pk)}, nil
}

// userKey returns the user key of the credentials file at path, or a new
// one when there is none (made reports which).
func userKey(path string) (uk userKeys, made bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		uk, err := newUserKey()
		return uk, err == nil, err
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

// credsFile returns the text of a credentials file holding token and
// seed, as [jwt.FormatUserConfig] writes it (which decodes and verifies the
// JWT it was just given, a third of the work of signing one).
func credsFile(token string, seed []byte) ([]byte, error) {
	decorated, err := jwt.DecorateSeed(seed)
	if err != nil {
		return nil, err
	}
	creds := make([]byte, 0, len(token)+len(decorated)+64)
	creds = append(creds, "-----BEGIN NATS USER JWT-----\n"...)
	creds = append(creds, token...)
	creds = append(creds, "\n------END NATS USER JWT------\n\n"...)
	return append(creds, decorated...), nil
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

// publicKey returns kp's public key; a key pair made or read here always
// has one.
func publicKey(kp nkeys.KeyPair) string {
	p, err := kp.PublicKey()
	if err != nil {
		return ""
	}
	return p
}

// readIfThere returns the file at path, nil when there is none.
func readIfThere(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return b, nil
}

// writeIfChanged writes b at path (see [writeFile]) unless the file holds
// b already, and reports whether it wrote.
func writeIfChanged(path string, b []byte, perm os.FileMode) (bool, error) {
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, b) {
		return false, os.Chmod(path, perm)
	}
	return true, writeFile(path, b, perm)
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

// userOfFile returns the user a credentials file name "<user>.creds"
// names, and whether it is one.
func userOfFile(name string) (string, bool) {
	user, ok := strings.CutSuffix(name, CredsExt)
	return user, ok && user != ""
}
