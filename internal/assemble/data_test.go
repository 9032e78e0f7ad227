package assemble

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
)

// TestMoveVaultTakesTheLastStore checks which store moves with mesh-vault
// on one machine: the one written last of another node's (its key with
// it), into a node's directory that holds no value (its empty store and
// key removed first); a node's own store stays; a directory holding
// anything else refuses the move, naming it.
func TestMoveVaultTakesTheLastStore(t *testing.T) {
	d := Data(t.TempDir())
	write := func(node, file, text string, at time.Time) {
		t.Helper()
		path := filepath.Join(d.Vault(node), file)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	write("alpha", vault.StoreFile, "old\n", now.Add(-time.Hour))
	write("alpha", vault.KeyFile, "alpha's key", now)
	write("beta", vault.StoreFile, "last\n", now.Add(-time.Minute))
	write("beta", vault.KeyFile, "beta's key", now)
	write("gamma", vault.StoreFile, "", now) // an empty store: nothing to move
	write("gamma", vault.KeyFile, "gamma's key", now)

	from, err := d.MoveVault("gamma")
	if err != nil || from != "beta" {
		t.Fatalf("MoveVault(gamma) = %q, %v; want beta's store, written last", from, err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Vault("gamma"), vault.KeyFile)); string(b) != "beta's key" {
		t.Errorf("gamma's key after the move is %q; want beta's, moved with its store", b)
	}
	if _, err := os.Stat(d.Vault("beta")); !os.IsNotExist(err) {
		t.Errorf("beta's directory after the move: %v; want it gone (renamed)", err)
	}
	if from, err := d.MoveVault("gamma"); err != nil || from != "" {
		t.Errorf("MoveVault(gamma) again = %q, %v; want its own store kept", from, err)
	}
	write("delta", "notes.txt", "mine", now)
	if _, err := d.MoveVault("delta"); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Errorf("MoveVault(delta) with notes.txt in it = %v; want an error naming it", err)
	}
	if _, err := os.Stat(filepath.Join(d.Vault("delta"), "notes.txt")); err != nil {
		t.Errorf("delta's notes.txt after a refused move: %v", err)
	}
}

// TestLockRefusesLooseFiles: with DATA and DATA/auth 0755, Lock refuses a
// server configuration of mode 0666, DATA/auth/keys of 0777, the JetStream
// store DATA/nats of 0777 and a vault's store file of 0666, naming each,
// and takes the lock once each is made go-w again; a file of mode 0666 the
// clients rendered under DATA/nodes does not stop it.
func TestLockRefusesLooseFiles(t *testing.T) {
	d := Data(t.TempDir())
	for _, dir := range []string{d.Auth(), filepath.Join(d.Auth(), "keys"), d.Store(), d.Vault("n1"), d.ClientRoot("n1")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(d.Auth(), "nats-server.conf"), filepath.Join(d.Vault("n1"), "store"), filepath.Join(d.ClientRoot("n1"), "rendered.conf")} {
		if err := os.WriteFile(f, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(d.ClientRoot("n1"), "rendered.conf"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{string(d), d.Auth()} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(d.Auth(), "nats-server.conf"), 0o666},
		{filepath.Join(d.Auth(), "keys"), 0o777},
		{d.Store(), 0o777},
		{filepath.Join(d.Vault("n1"), "store"), 0o666},
	} {
		st, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(c.path, c.mode); err != nil {
			t.Fatal(err)
		}
		if l, err := d.Lock(); !errors.Is(err, auth.ErrLooseDir) || !strings.Contains(err.Error(), c.path) {
			if l != nil {
				l.Release()
			}
			t.Errorf("Lock with %s of mode %04o = %v; want %v naming it", c.path, c.mode, err, auth.ErrLooseDir)
		}
		if err := os.Chmod(c.path, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		l, err := d.Lock()
		if err != nil {
			t.Fatalf("Lock with %s of mode %04o again: %v", c.path, st.Mode().Perm(), err)
		}
		l.Release()
	}
}
