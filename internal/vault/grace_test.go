package vault_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A rotated credential that its consumer's node renders into files (its
// applied record's credentials name it) reaches the consumer before its
// provider: the consumer is answered the new value at once, while the
// entry (what the provider sets) names the old one, with the new as next,
// until the consumer's node says it applied the new one or the grace ends.
// One that no file holds, or rotated with now, is in force at once.
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
	rec := func(gen int64) []byte {
		b, _ := json.Marshal(mesh.Applied{Credentials: map[string]int64{cred.String(): gen}})
		return b
	}
	// put writes an applied record and waits until the vault took it.
	put := func(key string, gen int64) {
		t.Helper()
		r, err := applied.Put(ctx, key, rec(gen))
		if err != nil {
			t.Fatal(err)
		}
		bustest.WaitFor(t, 0, "the vault taking "+key, func() bool {
			return f.said.Has("took an applied record", "key="+key, "revision="+itoa(int64(r)))
		})
	}

	// A consumer whose files hold no credential: in force at once.
	if _, err := f.vault.Rotate(cred.String()); err != nil {
		t.Fatal(err)
	}
	waitProvided(t, f.seat, cred, 2)
	if !f.said.Has("in force now: the consumer's node renders the credential into no file", "generation=2") {
		t.Errorf("the vault said:\n%s\nwant the rotation in force at once", f.said.Lines())
	}
	old, _ = ask(t, f, "postgres", "postgres", true, kit.VaultRequest{})

	// ace's gitea renders it (generation 2): it is waited for.
	put("ace.gitea", 2)
	if _, err := f.vault.Rotate(cred.String()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the entry naming generation 2 in force and 3 next", func() bool {
		e, ok := kittest.Entry(t, js, mesh.VaultModule, cred)
		return ok && e.Generation == 2 && e.Next == 3
	})
	// The entry's why says both sides, and the key carries it.
	wantWhy := "rotated to generation 3, not in force yet: gitea on ace has applied generation 2; in force once it applies 3 or at "
	if e, _ := kittest.Entry(t, js, mesh.VaultModule, cred); !strings.HasPrefix(e.Why, wantWhy) || e.State != mesh.Provided {
		t.Errorf("the entry during the grace = %+v; want provided with a why beginning %q", e, wantWhy)
	}
	f.seat.Wait(cred, "provided saying the rotation", func(p mesh.Provision, _ bool) bool {
		return p.State == mesh.Provided && strings.HasPrefix(p.Why, wantWhy)
	})
	if p, _ := f.seat.Get(cred); p.Reference == nil || p.Reference.Generation != 2 {
		t.Errorf("the credential's provision during the grace = %+v; want reference generation 2", p.Reference)
	}
	consumer, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	provider, _ := ask(t, f, "postgres", "postgres", true, kit.VaultRequest{})
	if len(consumer.Credentials) != 1 || consumer.Credentials[0].Generation != 3 {
		t.Errorf("gitea during the grace gets %+v; want generation 3 (its node renders it first)", consumer.Credentials)
	}
	if values(provider)[cred.String()] != values(old)[cred.String()] {
		t.Errorf("postgres during the grace gets %v; want generation 2 as before, %v", values(provider), values(old))
	}

	// Another node's record, and the consumer's at the old generation,
	// do not put it in force; the consumer's at the new one does.
	// A record of ace's naming another generation short of 3 is said.
	put("ace.gitea", 1)
	movedWhy := "rotated to generation 3, not in force yet: gitea on ace has applied generation 1; "
	bustest.WaitFor(t, 0, "the entry's why naming ace's generation 1", func() bool {
		e, ok := kittest.Entry(t, js, mesh.VaultModule, cred)
		return ok && e.Generation == 2 && strings.HasPrefix(e.Why, movedWhy)
	})
	put("control.gitea", 3)
	put("ace.gitea", 2)
	bustest.WaitFor(t, 0, "the entry's why naming ace's generation 2 again", func() bool {
		e, ok := kittest.Entry(t, js, mesh.VaultModule, cred)
		return ok && strings.HasPrefix(e.Why, wantWhy)
	})
	if e, _ := kittest.Entry(t, js, mesh.VaultModule, cred); e.Generation != 2 {
		t.Errorf("after control's record and ace's at generation 2, the entry = %+v; want generation 2 still", e)
	}
	put("ace.gitea", 3)
	waitProvided(t, f.seat, cred, 3)
	if e, _ := kittest.Entry(t, js, mesh.VaultModule, cred); e.Next != 0 || e.Why != "" {
		t.Errorf("the entry in force = %+v; want no next and no why", e)
	}
	f.seat.Wait(cred, "provided at generation 3 with no why", func(p mesh.Provision, _ bool) bool {
		return p.State == mesh.Provided && p.Why == "" && p.Reference != nil && p.Reference.Generation == 3
	})
	if !f.said.Has("the consumer's node applied the rotated credential", "generation=3") {
		t.Errorf("the vault said:\n%s\nwant the rotation in force by the consumer's node", f.said.Lines())
	}

	// No record within the grace: in force when it ends, said.
	f.grace = 100 * time.Millisecond
	f.startVault(t)
	bustest.WaitFor(t, 0, "the restarted vault taking ace.gitea", func() bool { return f.said.Has("took an applied record", "key=ace.gitea") })
	if _, err := f.vault.Rotate(cred.String()); err != nil {
		t.Fatal(err)
	}
	waitProvided(t, f.seat, cred, 4)
	if !f.said.Has("did not apply the rotated credential within the grace", "generation=4") {
		t.Errorf("the vault said:\n%s\nwant the grace's end said", f.said.Lines())
	}

	// Now: in force at once, however long the grace.
	f.grace = time.Hour
	f.startVault(t)
	onc, _ := kittest.Connect(t, f.opURL, "operator")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	bustest.WaitFor(t, 0, "the restarted vault taking ace.gitea", func() bool { return f.said.Has("took an applied record", "key=ace.gitea") })
	if a, err := kit.AskRotateNow(rctx, onc, cred.String()); err != nil || a.Generation != 5 || a.InForce != 5 {
		t.Fatalf("AskRotateNow = %+v, %v; want generation 5 in force", a, err)
	}
	waitProvided(t, f.seat, cred, 5)
}
