package assemble

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
)

// TestLockChecksSymlinkedData is F4 of the attacker's review for up --data:
// DATA given as a link of this user's to its directory is taken, and a
// directory of mode 0777 under it (DATA/auth/keys) refused, naming it
// through the link; as root, DATA/nats a link nobody owns is refused, naming
// the link, and taken once made this user's (chown -h). Before, a symlinked
// DATA was not walked at all and DATA/nats was checked by its target alone.
func TestLockChecksSymlinkedData(t *testing.T) {
	real := t.TempDir()
	d := Data(filepath.Join(t.TempDir(), "data"))
	if err := os.Symlink(real, string(d)); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(d.Auth(), "keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	lock := func() error {
		l, err := d.Lock()
		if l != nil {
			l.Release()
		}
		return err
	}
	if err := lock(); err != nil {
		t.Fatalf("Lock of DATA a link of this user's: %v", err)
	}
	if err := os.Chmod(keys, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := lock(); !errors.Is(err, auth.ErrLooseDir) || !strings.Contains(err.Error(), keys) {
		t.Errorf("Lock with %s of mode 0777 under a symlinked DATA = %v; want %v naming it", keys, err, auth.ErrLooseDir)
	}
	if err := os.Chmod(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 {
		t.Log("not root: no link another user owns can be made; that part is skipped")
		return
	}
	store := filepath.Join(t.TempDir(), "nats")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(store, d.Store()); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(d.Store(), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	want := d.Store() + " is a symbolic link owned by the user 65534"
	if err := lock(); !errors.Is(err, auth.ErrLooseDir) || !strings.Contains(err.Error(), want) {
		t.Errorf("Lock with DATA/nats nobody's link = %v; want %v saying %q", err, auth.ErrLooseDir, want)
	}
	if err := os.Lchown(d.Store(), os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if err := lock(); err != nil {
		t.Errorf("Lock with DATA/nats a link made this user's: %v", err)
	}
}
