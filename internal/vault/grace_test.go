package vault_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A rotated credential reaches its consumer before its provider: the
// consumer is answered the new value at once, while the entry (what the
// provider sets) names the old one, with the new as next, until the
// consumer's node says it applied the new one (its applied record's
// credentials) or the grace ends; with now it is in force at once.
func TestVaultRotationWaitsForTheConsumersNode(t *testing.T) {
	f := start(t)
	_, cred := f.need(gitea, "main")
	waitProvided(t, f.seat, cred, 1)
	js := mustJS(t, f.url)
	ctx := context.Background()
	applied, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: mesh.AppliedBucket})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := ask(t, f, "postgres", "postgres", true, kit.VaultRequest{})

	if _, err := f.vault.Rotate(cred.String()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the entry naming generation 1 in force and 2 next", func() bool {
		e, ok := kittest.Entry(t, js, mesh.VaultModule, cred)
		return ok && e.Generation == 1 && e.Next == 2
	})
	if p, _ := f.seat.Get(cred); p.Reference == nil || p.Reference.Generation != 1 {
		t.Errorf("the credential's provision during the grace = %+v; want reference generation 1", p.Reference)
	}
	consumer, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	provider, _ := ask(t, f, "postgres", "postgres", true, kit.VaultRequest{})
	if len(consumer.Credentials) != 1 || consumer.Credentials[0].Generation != 2 {
		t.Errorf("gitea during the grace gets %+v; want generation 2 (its node renders it first)", consumer.Credentials)
	}
	if values(provider)[cred.String()] != values(old)[cred.String()] {
		t.Errorf("postgres during the grace gets %v; want generation 1 as before, %v", values(provider), values(old))
	}

	// Another node's record does not put it in force; the consumer's does.
	rec := func(gen int64) []byte {
		b, _ := json.Marshal(mesh.Applied{Credentials: map[string]int64{cred.String(): gen}})
		return b
	}
	if _, err := applied.Put(ctx, "control.gitea", rec(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := applied.Put(ctx, "ace.gitea", rec(1)); err != nil {
		t.Fatal(err)
	}
	if e, _ := kittest.Entry(t, js, mesh.VaultModule, cred); e.Generation != 1 {
		t.Errorf("after control's record and ace's at generation 1, the entry = %+v; want generation 1 still", e)
	}
	if _, err := applied.Put(ctx, "ace.gitea", rec(2)); err != nil {
		t.Fatal(err)
	}
	waitProvided(t, f.seat, cred, 2)
	if e, _ := kittest.Entry(t, js, mesh.VaultModule, cred); e.Next != 0 {
		t.Errorf("the entry in force = %+v; want no next", e)
	}
	if !f.said.Has("the consumer's node applied the rotated credential", "generation=2") {
		t.Errorf("the vault said:\n%s\nwant the rotation in force by the consumer's node", f.said.Lines())
	}

	// No record within the grace: in force when it ends, said.
	f.grace = 100 * time.Millisecond
	f.startVault(t)
	if _, err := f.vault.Rotate(cred.String()); err != nil {
		t.Fatal(err)
	}
	waitProvided(t, f.seat, cred, 3)
	if !f.said.Has("did not apply the rotated credential within the grace", "generation=3") {
		t.Errorf("the vault said:\n%s\nwant the grace's end said", f.said.Lines())
	}

	// Now: in force at once, however long the grace.
	f.grace = time.Hour
	f.startVault(t)
	onc, _ := kittest.Connect(t, f.opURL, "operator")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if a, err := kit.AskRotateNow(rctx, onc, cred.String()); err != nil || a.Generation != 4 {
		t.Fatalf("AskRotateNow = %+v, %v; want generation 4", a, err)
	}
	waitProvided(t, f.seat, cred, 4)
}
