package cli_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/cli"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func TestVaultRotate(t *testing.T) {
	s := bustest.Server(t)
	seat := kittest.NewSeat(t, s.URL())
	seat.Judge(mesh.VaultModule)
	nc, js := bustest.Connect(t, s, mesh.VaultModule)
	log, _ := kittest.Log()
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
	out, err := rotate(ck.String())
	if want := "rotated ace.gitea.credential.postgres_database_main: vault name ace.gitea.credential.postgres_database_main, generation 2, in force once the consumer's node applies it, or after the vault's grace\n"; err != nil || out != want {
		t.Errorf("vault rotate = %q, %v; want %q", out, err, want)
	}
	bustest.WaitFor(t, 0, "the entry naming generation 2 next", func() bool {
		e, ok := kittest.Entry(t, js, mesh.VaultModule, ck)
		return ok && e.Generation == 1 && e.Next == 2
	})
	out, err = rotate("--now", ck.String())
	if want := "rotated ace.gitea.credential.postgres_database_main: vault name ace.gitea.credential.postgres_database_main, generation 3, in force now\n"; err != nil || out != want {
		t.Errorf("vault rotate --now = %q, %v; want %q", out, err, want)
	}
	bustest.WaitFor(t, 0, "the reference at generation 3", func() bool {
		q, _ := seat.Get(ck)
		return q.Reference != nil && q.Reference.Generation == 3
	})
	if _, err := rotate("ace.gitea.credential.nothing"); !errors.Is(err, kit.ErrVault) || !strings.Contains(err.Error(), "no value under this name") {
		t.Errorf("vault rotate of an unknown key = %v; want the vault's refusal", err)
	}
}
