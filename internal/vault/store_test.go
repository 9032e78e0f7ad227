package vault_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
)

func TestStoreKeepsValuesSealed(t *testing.T) {
	dir := t.TempDir()
	s, err := vault.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, vault.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Errorf("key file mode %v size %d; want 0600 and 32 bytes", fi.Mode().Perm(), fi.Size())
	}
	a, err := s.Ensure("ace.gitea.credential.postgres_database_main")
	if err != nil {
		t.Fatal(err)
	}
	if a.Generation != 1 || len(a.Value) != 43 {
		t.Errorf("Ensure = generation %d, %d characters; want 1 and 43", a.Generation, len(a.Value))
	}
	again, _ := s.Ensure(a.Name)
	if again != a {
		t.Errorf("Ensure again = %+v; want the same value %+v", again, a)
	}
	b, _ := s.Ensure("ace.vaultwarden.credential.postgres_database")
	if b.Value == a.Value {
		t.Error("two credentials got the same value")
	}
	r, err := s.Rotate(a.Name)
	if err != nil || r.Generation != 2 || r.Value == a.Value {
		t.Errorf("Rotate = %+v, %v; want generation 2 and a new value", r, err)
	}
	if _, err := s.Rotate("nothing"); !errors.Is(err, vault.ErrUnknown) {
		t.Errorf("Rotate(nothing) = %v; want ErrUnknown", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, vault.StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(r.Value)) || bytes.Contains(raw, []byte(b.Value)) {
		t.Error("the store file holds a value in the clear")
	}
	if fi, _ := os.Stat(filepath.Join(dir, vault.StoreFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("store file mode %v; want 0600", fi.Mode().Perm())
	}

	// Opened again, the store holds the same values.
	s2, err := vault.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s2.Get(a.Name); !ok || got != r {
		t.Errorf("after reopening Get = %+v, %v; want %+v", got, ok, r)
	}
	if err := s2.Remove(b.Name); err != nil {
		t.Fatal(err)
	}
	s3, _ := vault.OpenStore(dir)
	if _, ok := s3.Get(b.Name); ok {
		t.Error("a removed value is back after reopening")
	}

	// Another key does not open the values.
	if err := os.WriteFile(filepath.Join(dir, vault.KeyFile), bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.OpenStore(dir); err == nil {
		t.Error("OpenStore with another key = nil error; want the value not to open")
	}
}
