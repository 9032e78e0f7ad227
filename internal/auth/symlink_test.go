package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
)

// nobody is the user id the tests give links another user owns.
const nobody = 65534

// symlink makes the symbolic link at link pointing to target.
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestSymlinkedDirsAreChecked is F4 of the attacker's review, the part any
// user can run: a directory given as a symbolic link this user made (to a
// directory of its own) keeps working, and what is under it is checked as
// if it were given itself: a credentials file of mode 0666 under a
// symlinked DIR, and a directory of mode 0777 under a symlinked DIR/resolver,
// are refused, naming the path through the link. Before, the walk did not
// descend into a symlinked directory and neither was seen.
func TestSymlinkedDirsAreChecked(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	dir := filepath.Join(t.TempDir(), "auth")
	symlink(t, real, dir)
	_, parties := gen(t, t.TempDir())
	res, err := auth.Gen(dir, parties, auth.Options{})
	if err != nil {
		t.Fatalf("Gen into a symbolic link of this user's to its directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, auth.ConfigFile)); err != nil {
		t.Fatalf("Gen through the link wrote no %s in its target: %v", auth.ConfigFile, err)
	}
	loose := func(what, path string, mode, back os.FileMode) {
		t.Helper()
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := auth.Gen(dir, parties, auth.Options{})
		if !errors.Is(err, auth.ErrLooseDir) || !strings.Contains(err.Error(), path) {
			t.Errorf("Gen with %s of mode %04o = %v; want %v naming %s", what, mode, err, auth.ErrLooseDir, path)
		}
		if err := os.Chmod(path, back); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.Gen(dir, parties, auth.Options{}); err != nil {
			t.Errorf("Gen with %s of mode %04o again: %v", what, back, err)
		}
	}
	loose("a credentials file under a symlinked DIR", res.Creds["client-n1"], 0o666, 0o600)

	// DIR/resolver moved elsewhere, a link of this user's in its place.
	resolver := filepath.Join(dir, auth.ResolverDir)
	elsewhere := filepath.Join(t.TempDir(), "resolver")
	if err := os.Rename(resolver, elsewhere); err != nil {
		t.Fatal(err)
	}
	symlink(t, elsewhere, resolver)
	if _, err := auth.Gen(dir, parties, auth.Options{}); err != nil {
		t.Fatalf("Gen with DIR/resolver a link of this user's: %v", err)
	}
	sub := filepath.Join(resolver, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	loose("a directory under a symlinked DIR/resolver", sub, 0o777, 0o700)
}

// TestSymlinkOwnedByAnotherIsRefused is F4 of the attacker's review: a
// symbolic link owned by another user (nobody) may be pointed elsewhere by
// its owner at any time. Given as DIR (to a directory of this user's, to
// none yet, or through a link of this user's), or found as DIR/resolver,
// Gen and Open refuse it naming the link and its owner, and write nothing
// through it; the same link made this user's (chown -h) is taken. Root alone
// can give a link to another user: the test skips when not run as root.
func TestSymlinkOwnedByAnotherIsRefused(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("only root can make a link another user owns")
	}
	_, parties := gen(t, t.TempDir())
	foreign := func(target, link string) {
		t.Helper()
		symlink(t, target, link)
		if err := os.Lchown(link, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(what, dir, link, target string) {
		t.Helper()
		want := link + " is a symbolic link owned by the user 65534"
		if _, err := auth.Gen(dir, parties, auth.Options{}); !errors.Is(err, auth.ErrLooseDir) || !strings.Contains(err.Error(), want) {
			t.Errorf("Gen with %s = %v; want %v saying %q", what, err, auth.ErrLooseDir, want)
		}
		if _, err := auth.Open(dir, auth.Options{}); !errors.Is(err, auth.ErrLooseDir) {
			t.Errorf("Open with %s = %v; want %v", what, err, auth.ErrLooseDir)
		}
		if ents, _ := os.ReadDir(target); len(ents) != 0 {
			t.Errorf("Gen refused %s but wrote %d entries into %s", what, len(ents), target)
		}
	}

	// DIR itself: nobody's link to this user's directory.
	target := t.TempDir()
	dir := filepath.Join(t.TempDir(), "auth")
	foreign(target, dir)
	refused("DIR nobody's link", dir, dir, target)

	// DIR nobody's link to a path that does not exist yet.
	later := filepath.Join(t.TempDir(), "not-yet")
	dangling := filepath.Join(t.TempDir(), "auth")
	foreign(later, dangling)
	refused("DIR nobody's link to nothing yet", dangling, dangling, later)
	if _, err := os.Stat(later); err == nil {
		t.Errorf("Gen refused DIR but made %s", later)
	}

	// DIR this user's link to nobody's link to this user's directory.
	chained := t.TempDir()
	middle := filepath.Join(t.TempDir(), "middle")
	foreign(chained, middle)
	mine := filepath.Join(t.TempDir(), "auth")
	symlink(t, middle, mine)
	refused("DIR a link to nobody's link", mine, middle, chained)

	// Made this user's, the link is taken.
	if err := os.Lchown(dir, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Gen(dir, parties, auth.Options{}); err != nil {
		t.Fatalf("Gen with DIR a link made this user's: %v", err)
	}

	// DIR/resolver nobody's link to a directory of this user's.
	resolver := filepath.Join(dir, auth.ResolverDir)
	elsewhere := filepath.Join(t.TempDir(), "resolver")
	if err := os.Rename(resolver, elsewhere); err != nil {
		t.Fatal(err)
	}
	foreign(elsewhere, resolver)
	want := resolver + " is a symbolic link owned by the user 65534"
	if _, err := auth.Gen(dir, parties, auth.Options{}); !errors.Is(err, auth.ErrLooseDir) || !strings.Contains(err.Error(), want) {
		t.Errorf("Gen with DIR/resolver nobody's link = %v; want %v saying %q", err, auth.ErrLooseDir, want)
	}
	if err := os.Lchown(resolver, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Gen(dir, parties, auth.Options{}); err != nil {
		t.Errorf("Gen with DIR/resolver a link made this user's: %v", err)
	}
}
