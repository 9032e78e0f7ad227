package vault_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
)

// A store lost, or restored from an older copy, never makes the vault issue
// a second value under a generation it handed out: the generation its entry
// last named is on the bus, and the value issued anew takes the next one
// (so the entry, the reference and what depends on it move), and the vault
// says what it lost.
func TestVaultNeverIssuesAGenerationTwice(t *testing.T) {
	f := start(t)
	_, cred := f.need(gitea, "main")
	waitProvided(t, f.seat, cred, 1)
	first, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	store := filepath.Join(f.dir, vault.StoreFile)
	moved := []string{"level=WARN", "this vault started on an empty store", "if mesh-vault moved here from another node, its store did not move with it",
		"stop the old vault, copy its data directory (vault.store, with vault.key or the file its --key-file names)"}

	for _, c := range []struct {
		name    string
		lose    func()
		held    string
		publish int64
	}{
		{"the store file deleted", func() { os.Remove(store) }, "held=0", 1},
		{"the data directory lost, key and all", func() { os.RemoveAll(f.dir) }, "held=0", 2},
	} {
		f.stop()
		c.lose()
		f.startVault(t)
		waitProvided(t, f.seat, cred, c.publish+1)
		if !f.said.Has("the store holds no value of the generation", "key="+cred.String(), "published="+itoa(c.publish), c.held, "issued="+itoa(c.publish+1)) {
			t.Errorf("%s: the vault said:\n%s\nwant the lost generation %d said", c.name, f.said.Lines(), c.publish)
		}
		// A start on an empty store says once, at warn level, what a
		// move without its store does and what the operator hands over.
		if n := f.said.Count(moved...); n != 1 {
			t.Errorf("%s: the vault said %d times that a move left its store behind; want once", c.name, n)
		}
	}
	now, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if len(now.Credentials) != 1 || now.Credentials[0].Generation != 3 || now.Credentials[0].Value == first.Credentials[0].Value {
		t.Errorf("after two lost stores gitea gets %+v; want a new value at generation 3", now.Credentials)
	}

	// Restored from an older copy: the copy holds generation 3, the bus
	// names 4.
	old, err := os.ReadFile(store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.vault.RotateNow(cred.String()); err != nil {
		t.Fatal(err)
	}
	waitProvided(t, f.seat, cred, 4)
	f.stop()
	if err := os.WriteFile(store, old, 0o600); err != nil {
		t.Fatal(err)
	}
	f.startVault(t)
	waitProvided(t, f.seat, cred, 5)
	if !f.said.Has("the store holds no value of the generation", "key="+cred.String(), "published=4", "held=3", "issued=5") {
		t.Errorf("restored from an older copy: the vault said:\n%s\nwant generation 4 said lost, 3 held", f.said.Lines())
	}
	if f.said.Has(moved...) {
		t.Error("a store restored from an older copy (not empty) said a move left its store behind")
	}

	// A restart over a store that holds what the bus names issues nothing.
	f.startVault(t)
	again, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if len(again.Credentials) != 1 || again.Credentials[0].Generation != 5 {
		t.Errorf("after a plain restart gitea gets %+v; want generation 5 kept", again.Credentials)
	}
	if f.said.Has("the store holds no value") {
		t.Errorf("a plain restart said a lost store:\n%s", f.said.Lines())
	}

}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Superseded values are compacted while the vault runs: 300 rotations by
// the verb leave a store file bounded by the values it keeps (it held 301
// sealed values until the next start), and the vault restarted provides
// the last generation.
func TestVaultCompactsWhileRunning(t *testing.T) {
	f := start(t)
	_, cred := f.need(gitea, "main")
	waitProvided(t, f.seat, cred, 1)
	onc, _ := kittest.Connect(t, f.opURL, "operator")
	most := 0
	for range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := kit.AskRotateNow(ctx, onc, cred.String())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(f.dir, vault.StoreFile))
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, bytes.Count(b, []byte("\n")))
	}
	if most > 2+64+1 {
		t.Errorf("300 rotations of one credential: the store file held up to %d records; want at most %d", most, 2+64+1)
	}
	waitProvided(t, f.seat, cred, 301)
	f.startVault(t)
	got, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if len(got.Credentials) != 1 || got.Credentials[0].Generation != 301 {
		t.Errorf("after a restart gitea gets %+v; want generation 301", got.Credentials)
	}
}
