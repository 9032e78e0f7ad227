package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
)

// TestOperatorCommandsRefuseAnotherPartysCreds runs every operator's
// command with the credentials of a node's client, of a provider, of a
// plain module and of the seat, against a URL where nothing answers: each
// fails at once, before it connects, naming whose credentials they are
// (get provisions with a client's used to print the server's raw
// refusal of a consumer, a provider's got the provisions). The
// neighbours pass the check and then find no server: the operator's
// credentials for every command, and a node's client's get narrowed to its
// own node (what it may read).
func TestOperatorCommandsRefuseAnotherPartysCreds(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // no default credentials
	dir := filepath.Join(t.TempDir(), "auth")
	if _, _, err := run(t, "auth", "gen", "-f", homelabFile, "-o", dir); err != nil {
		t.Fatalf("auth gen: %v", err)
	}
	const nowhere = "nats://127.0.0.1:1"
	commands := [][]string{
		{"get", "provisions"},
		{"get", "plans", "--node", "g14"},
		{"why", "ace.gitea.database"},
		{"status"},
		{"asks"},
		{"apply", "-f", homelabFile, "--yes"},
		{"vault", "rotate", "ace.gitea.credential.postgres_database_main"},
		{"answer", "retire-x-1", "yes"},
		{"unkeep", "ace.gitea.database"},
	}
	for _, party := range []struct{ user, whose string }{
		{"client-ace", `the user "client-ace"'s (node ace's client), not an operator's`},
		{"postgres", `the user "postgres"'s (the module postgres, a provider), not an operator's`},
		{"redis", `the user "redis"'s (the module redis), not an operator's`},
		{"mesh-provisioner", `the user "mesh-provisioner"'s (the seat), not an operator's`},
	} {
		for _, args := range commands {
			_, _, err := run(t, append(args, "--nats", nowhere, "--creds", auth.CredsPath(dir, party.user))...)
			if err == nil || !strings.Contains(err.Error(), party.whose) || !strings.Contains(err.Error(), "is an operator's command") {
				t.Errorf("%v with %s's credentials: %v; want the refusal saying %s", args, party.user, err, party.whose)
			}
		}
	}
	passes := func(args []string, user string) {
		t.Helper()
		_, _, err := run(t, append(args, "--nats", nowhere, "--creds", auth.CredsPath(dir, user))...)
		if err == nil || strings.Contains(err.Error(), "not an operator's") || !strings.Contains(err.Error(), "no NATS server answers") {
			t.Errorf("%v with %s's credentials: %v; want it to pass the check (and find no server)", args, user, err)
		}
	}
	for _, args := range commands {
		passes(args, "operator")
	}
	passes([]string{"get", "provisions", "--node", "ace"}, "client-ace")
	passes([]string{"get", "plans", "--node", "ace"}, "client-ace")
}
