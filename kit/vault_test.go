package kit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
)

// An answer whose names are the spec's in another case is no vault's
// answer (spec 2: names are exact): the ask fails, saying the name, and
// takes no credential from it. encoding/json folded the names: the ask
// took {"CREDENTIALS":..} as the vault's credentials.
func TestAskReadsAnswerNamesExactly(t *testing.T) {
	url := kittest.Server(t)
	nc, _ := kittest.Connect(t, url, "gitea")
	vnc, _ := kittest.Connect(t, url, "not-a-vault")
	answer := `{"CREDENTIALS":[{"key":"ace.gitea.credential.x","vault-name":"ace.gitea.credential.x","generation":1,"value":"v"}]}`
	sub, err := vnc.Subscribe(kit.SecretSubject("gitea", "gitea"), func(m *nats.Msg) { _ = m.Respond([]byte(answer)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := vnc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := kit.AskSecrets(ctx, nc, "gitea", kit.VaultRequest{})
	if _, named := errors.AsType[*jsonhead.NameError](err); !named || len(a.Credentials) != 0 {
		t.Errorf("AskSecrets answered %s = %+v, %v; want no credential and a *jsonhead.NameError", answer, a, err)
	}
}
