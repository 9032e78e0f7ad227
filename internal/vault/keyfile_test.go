package vault_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
)

// TestStoreKeyFileApart keeps the key apart from the store (--key-file):
// the key is made there (mode 0600) and not in the store's directory, a
// copy of the directory alone opens no value, the store opens again with
// the key file, and a key file others may read is refused.
func TestStoreKeyFileApart(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(t.TempDir(), "vault.key")
	s, err := vault.OpenStoreKey(dir, key)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Ensure("ace.gitea.credential.postgres_database_main")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Fatalf("key file %s: %v, %v; want 32 bytes, mode 0600", key, fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, vault.KeyFile)); !os.IsNotExist(err) {
		t.Errorf("the store's directory holds a key file (%v); want none with --key-file", err)
	}
	if _, err := vault.OpenStore(dir); err == nil {
		t.Error("the store's directory opened without its key file; want its values refused")
	}
	os.Remove(filepath.Join(dir, vault.KeyFile)) // the key the failed open made
	again, err := vault.OpenStoreKey(dir, key)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Get(a.Name); !ok || got.Value != a.Value {
		t.Errorf("reopened with its key file, %s = %+v, %v; want %+v", a.Name, got, ok, a)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.OpenStoreKey(dir, key); err == nil {
		t.Error("a key file of mode 0644 was used; want it refused")
	}
}
