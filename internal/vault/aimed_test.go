package vault_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
)

// TestNoAnswerAimedAtAVerbTakesAnothersTurn: the vault's turns go by the
// subject's last token, which the server's publish permission pins for a
// request, but not for an answer: an asker chooses its request's reply
// subject freely, and the server routes an answer aimed at a literal
// verb's subject (mesh-vault.rotate) back through the import, from the
// answerers' own account. client-ace asks gitea's values on its own
// subject with the reply subjects of the operators' rotate and of
// client-g14's consumers verb (a wildcard import, which the server routes
// no answer to). Each answer coming back must take no place in the
// operators' turn (before: one each, so that a flood of them, which any
// answer given out of turn makes at once, as the seat's refusal of a
// watch request with a header of the asker's own, filled the 16 waiting
// under "rotate" and the vault dropped the operators' rotations), and is
// answered nowhere (before: an error line in the vault's log for each).
// The neighbours: g14's own request is answered its secret, the
// operator's own rotation is answered (refused: no such credential), each
// in its own turn.
func TestNoAnswerAimedAtAVerbTakesAnothersTurn(t *testing.T) {
	f := startWithGiteaSecrets(t)
	ctx := bustest.Context(t)
	queued, _ := f.vault.RecordQueued()
	ace := f.conns["client-ace"]
	const aimed = 6 // 12 requests: no more than the vault keeps waiting of one asker
	for range aimed {
		for _, at := range []string{kit.RotateVerb, kit.ConsumersSubject("gitea", "client-g14")} {
			if err := ace.PublishRequest(kit.SecretSubject("gitea", "client-ace"), at, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ace.Flush(); err != nil {
		t.Fatal(err)
	}
	// Each answer aimed at the rotate verb comes back to the vault:
	// queued in the operators' turn, or dropped in none.
	came := func() (inTurn, dropped int) {
		for _, q := range queued() {
			if q.Who == kit.RotateVerb {
				inTurn++
			}
		}
		return inTurn, strings.Count(f.said.Lines(), "dropped, in no asker's turn\" component=mesh-vault subject="+kit.RotateVerb)
	}
	bustest.WaitFor(t, 0, "ace's answers aimed at the rotate verb back at the vault", func() bool {
		q, d := came()
		return q+d >= aimed
	})
	a, err := ask(t, f, "client-g14", "gitea", false, kit.VaultRequest{})
	if err != nil || len(a.Secrets) != 1 || a.Secrets[0].Node != "g14" {
		t.Fatalf("g14's own request after ace's aimed ones = %+v, %v; want its secret", a, err)
	}
	onc, _ := kittest.Connect(t, f.opURL, "operator")
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r, err := kit.AskRotate(rctx, onc, "ace.gitea.none"); !errors.Is(err, kit.ErrVault) || r.Error == "" {
		t.Errorf("the operator's rotation of a key with no credential = %+v, %v; want the vault's answer refusing it", r, err)
	}
	byWho := map[string]int{}
	for _, q := range queued() {
		byWho[q.Who]++
	}
	if want := map[string]int{"client-ace": 2 * aimed, "client-g14": 1, kit.RotateVerb: 1}; !reflect.DeepEqual(byWho, want) {
		t.Errorf("the vault queued the requests of %v; want %v: ace's, g14's own and the operator's own only (ace's answers aimed at the operators' verb take no turn of theirs)", byWho, want)
	}
	if lines := f.said.Lines(); strings.Contains(lines, "answer not sent") {
		t.Errorf("the vault said it could not answer a message with no reply:\n%s", lines)
	}
}

// TestAModuleNamedRotateHasATurnOfItsOwn: the vault queued the operators'
// rotations under the last token of mesh-vault.rotate, "rotate", which is
// also the asker token of a module named "rotate" (a valid module name):
// that module, asking its own secrets 16 times (its answerers held, so
// that they wait), filled the operators' queue, and the operator's
// rotation asked then was dropped, unanswered. Now the operators' turn is
// "mesh-vault.rotate", no user's name: the module's 16 wait in its turn
// and the operator's rotation in theirs, and each is answered.
func TestAModuleNamedRotateHasATurnOfItsOwn(t *testing.T) {
	f := start(t)
	nc, _, err := bus.Connect(bus.Dial{URL: strings.Replace(f.url, "admin:admin@", "", 1), Name: "rotate", User: "rotate", Password: "rotate"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := bustest.Context(t)
	if a, err := kit.AskSecretsAs(ctx, nc, "rotate", "rotate", kit.VaultRequest{}); err != nil || a.Error != "" {
		t.Fatalf("the module rotate asks its secrets: %+v, %v; want its (empty) answer", a, err)
	}
	release := f.vault.Hold()
	const own = 16 // what the vault keeps waiting of one asker
	answered := make(chan struct{}, own)
	sub, err := nc.Subscribe("_INBOX_rotate.held.*", func(*nats.Msg) { answered <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range own {
		if err := nc.PublishRequest(kit.SecretSubject("rotate", "rotate"), fmt.Sprintf("_INBOX_rotate.held.%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the module rotate's requests waiting", func() bool {
		waiting, _ := f.vault.Waiting("rotate")
		return waiting == own
	})
	onc, _ := kittest.Connect(t, f.opURL, "operator")
	rotated := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := kit.AskRotate(rctx, onc, "ace.gitea.none")
		if errors.Is(err, kit.ErrVault) && r.Error != "" {
			err = nil // the vault's answer: no such credential
		}
		rotated <- err
	}()
	bustest.WaitFor(t, 0, "the operator's rotation queued or dropped", func() bool {
		waiting, _ := f.vault.Waiting(kit.RotateVerb)
		return waiting == 1 || strings.Contains(f.said.Lines(), "user=rotate dropped=")
	})
	if waiting, _ := f.vault.Waiting(kit.RotateVerb); waiting != 1 {
		t.Errorf("the operator's rotation: %d waiting in the operators' turn (the vault said %q); want it waiting in a turn of the operators' own, not dropped with the module rotate's", waiting, "user=rotate dropped=")
	}
	release()
	if err := <-rotated; err != nil {
		t.Errorf("the operator's rotation beside the module rotate's requests: %v; want the vault's answer", err)
	}
	for i := range own {
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatalf("the module rotate's requests: %d of %d answered", i, own)
		}
	}
}
