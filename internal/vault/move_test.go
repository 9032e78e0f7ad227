package vault_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestVaultMovedWithItsStoreIssuesNothing runs the hand-over of a
// standalone deployment (docs/vault.md): the vault on control stops (Done
// once its store is closed), the operator copies its data directory to
// dell's, and the seat names mesh-vault on dell as the credential's
// provider: dell's vault, on the copied store and key, answers gitea the
// same value at generation 1, says no lost store and no move without its
// store, and its entry keeps generation 1.
func TestVaultMovedWithItsStoreIssuesNothing(t *testing.T) {
	f := start(t)
	_, cred := f.need(gitea, "main")
	waitProvided(t, f.seat, cred, 1)
	first, err := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if err != nil || len(first.Credentials) != 1 {
		t.Fatalf("gitea is answered %+v, %v; want its credential", first, err)
	}
	f.stop()
	select {
	case <-f.vault.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("control's vault not done 20 s after it stopped")
	}
	moved := t.TempDir()
	for _, name := range []string{vault.StoreFile, vault.KeyFile} {
		b, err := os.ReadFile(filepath.Join(f.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(moved, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	dell := mesh.Ref{Module: mesh.VaultModule, Node: "dell"}
	nc, js := kittest.Connect(t, f.url, mesh.VaultModule)
	anc, _ := kittest.Connect(t, f.svc, mesh.VaultModule)
	log, said := kittest.Log()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dell's vault said:\n%s", said.Lines())
		}
	})
	v, err := vault.Start(bustest.Context(t), vault.Config{Dir: moved, Node: dell.Node, RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Answer: bus.AnswererIn(anc, "SVC")}, nc, js, log)
	if err != nil {
		t.Fatal(err)
	}
	<-v.Ready()
	key, p := kittest.Requirement(gitea, "database", "main", postgres)
	ck, cp, _ := kittest.Credential(key, p, dell)
	if ck != cred {
		t.Fatalf("the credential key is %s; want %s", ck, cred)
	}
	f.seat.Need(ck, cp)
	var now kit.VaultAnswer
	bustest.WaitFor(t, 0, "gitea answered by dell's vault", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a, err := kit.AskSecrets(ctx, f.conns["gitea"], "gitea", kit.VaultRequest{})
		now = a
		return err == nil && len(a.Credentials) == 1
	})
	if c := now.Credentials[0]; c.Generation != 1 || c.Value != first.Credentials[0].Value {
		t.Errorf("after the move gitea is answered generation %d (same value: %v); want generation 1, the same value", c.Generation, c.Value == first.Credentials[0].Value)
	}
	waitProvided(t, f.seat, cred, 1)
	if said.Has("the store holds no value") || said.Has("started on an empty store") {
		t.Errorf("dell's vault said a lost store:\n%s", said.Lines())
	}
}
