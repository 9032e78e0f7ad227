package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/cli"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func TestVaultRotate(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	seat := kittest.NewSeat(t, s.URL())
	seat.Judge(mesh.VaultModule)
	nc, js := bustest.Connect(t, s, mesh.VaultModule)
	log, said := kittest.Log()
	if _, err := vault.Start(bustest.Context(t), vault.Config{Dir: t.TempDir(), Node: "control"}, nc, js, log); err != nil {
		t.Fatal(err)
	}
	key, p := kittest.Requirement(mesh.Ref{Module: "gitea", Node: "ace"}, "database", "main", mesh.Ref{Module: "postgres", Node: "control"})
	ck, cp, _ := kittest.Credential(key, p, mesh.Ref{Module: mesh.VaultModule, Node: "control"})
	seat.Need(ck, cp)
	bustest.WaitFor(t, 0, "the credential provided", func() bool { q, _ := seat.Get(ck); return q.State == mesh.Provided })

	rotate := func(args ...string) (string, error) {
		root := cli.Root()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"vault", "rotate", "--nats", s.URL()}, args...))
		err := root.Execute()
		return out.String(), err
	}
	// No file of the consumer's holds it: in force at once.
	out, err := rotate(ck.String())
	if want := "rotated ace.gitea.credential.postgres_database_main: vault name ace.gitea.credential.postgres_database_main, generation 2, in force now\n"; err != nil || out != want {
		t.Errorf("vault rotate = %q, %v; want %q", out, err, want)
	}
	bustest.WaitFor(t, 0, "the reference at generation 2", func() bool {
		q, _ := seat.Get(ck)
		return q.Reference != nil && q.Reference.Generation == 2
	})
	// The consumer's node renders it: it waits for that node.
	applied, err := js.CreateKeyValue(bustest.Context(t), jetstream.KeyValueConfig{Bucket: mesh.AppliedBucket})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(mesh.Applied{Credentials: map[string]int64{ck.String(): 2}})
	if _, err := applied.Put(bustest.Context(t), "ace.gitea", b); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the vault taking gitea's applied record", func() bool { return said.Has("took an applied record", "key=ace.gitea") })
	out, err = rotate(ck.String())
	if want := "rotated ace.gitea.credential.postgres_database_main: vault name ace.gitea.credential.postgres_database_main, generation 3, generation 2 stays in force until the consumer's node applies it, or until the vault's grace ends\n"; err != nil || out != want {
		t.Errorf("vault rotate = %q, %v; want %q", out, err, want)
	}
	out, err = rotate("--now", ck.String())
	if want := "rotated ace.gitea.credential.postgres_database_main: vault name ace.gitea.credential.postgres_database_main, generation 4, in force now\n"; err != nil || out != want {
		t.Errorf("vault rotate --now = %q, %v; want %q", out, err, want)
	}
	bustest.WaitFor(t, 0, "the reference at generation 4", func() bool {
		q, _ := seat.Get(ck)
		return q.Reference != nil && q.Reference.Generation == 4
	})
	if _, err := rotate("ace.gitea.credential.nothing"); !errors.Is(err, kit.ErrVault) || !strings.Contains(err.Error(), "no value under this name") {
		t.Errorf("vault rotate of an unknown key = %v; want the vault's refusal", err)
	}
}
