package lockfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/lockfile"
)

func TestTakeIsExclusiveAndSaysTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	l, err := lockfile.Take(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := strconv.Itoa(os.Getpid()) + "\n"; string(b) != want {
		t.Errorf("lock file holds %q; want the pid %q", b, want)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v; want 0600", fi.Mode().Perm())
	}

	_, err = lockfile.Take(path)
	var held *lockfile.HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() || held.Path != path {
		t.Fatalf("Take of a held lock = %v; want HeldError with pid %d", err, os.Getpid())
	}
	if want := "lockfile: " + path + " is held by pid " + strconv.Itoa(os.Getpid()); err.Error() != want {
		t.Errorf("error = %q; want %q", err, want)
	}

	// Released, it is taken again.
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release = %v; want nil", err)
	}
	again, err := lockfile.Take(path)
	if err != nil {
		t.Fatalf("Take after Release = %v", err)
	}
	again.Release()
}

func TestTakeWithoutADirectoryFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "lock")
	if _, err := lockfile.Take(path); err == nil || errors.As(err, new(*lockfile.HeldError)) {
		t.Errorf("Take(%s) = %v; want an open error", path, err)
	}
}
