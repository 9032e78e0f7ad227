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
	"strings"
	"syscall"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// ErrLooseDir is returned (wrapped, naming the directory and its mode) by
// [CheckDir], [Open] and [Gen] when a directory that exists may be written
// by a group or by everyone, or is owned by another user: another local
// user could replace the server's configuration or a credentials file in
// it.
var ErrLooseDir = errors.New("auth: directory writable by others")

// CheckDir returns nil when dir does not exist, or is a directory owned by
// this process's user that neither its group nor others may write; else an
// error wrapping [ErrLooseDir] that says what to do. It never changes the
// directory: what another user may have put there is for its owner to
// check.
func CheckDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("auth: %s is not a directory", dir)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s has mode %04o: another local user may have replaced its files; check them, run \"chmod go-w %s\", and run again",
			ErrLooseDir, dir, st.Mode().Perm(), dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s is owned by the user %d, not by this one (%d)", ErrLooseDir, dir, sys.Uid, os.Getuid())
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
