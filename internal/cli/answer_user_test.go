package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

// TestOperatorUser checks whom answer, unkeep and web act as: the --user
// given, else the user of their credentials, else the default operator.
// web and unkeep used to say "operator" whatever --creds was.
func TestOperatorUser(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // no default credentials
	small, err := meshfile.Parse("small.yaml", []byte(smallMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(small, nil))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js"), Source: "small.yaml"}); err != nil {
		t.Fatal(err)
	}
	client := auth.CredsPath(dir, access.ClientUser("control"))
	for _, tc := range []struct {
		given, creds, want string
	}{
		{"bob", client, "bob"},
		{"", client, access.ClientUser("control")},
		{"", "", access.DefaultOperator},
	} {
		bf := busFlags{creds: tc.creds}
		if got := bf.user(tc.given); got != tc.want {
			t.Errorf("user(%q) with --creds %q = %q; want %q", tc.given, tc.creds, got, tc.want)
		}
	}
}

// TestOperatorCommandsRefuseAnotherPartysCreds runs operator's commands
// with the credentials of a node's client, the seat, the vault and the
// router: each fails at once, before it connects (the URL answers
// nothing), naming whose credentials they are; "get provisions" with a
// client's used to wait forever on reads the server refused. A standalone
// component given another party's credentials is refused the same way
// (assemble).
func TestOperatorCommandsRefuseAnotherPartysCreds(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	small, err := meshfile.Parse("small.yaml", []byte(smallMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(small, nil))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js"), Source: "small.yaml"}); err != nil {
		t.Fatal(err)
	}
	const nowhere = "nats://127.0.0.1:1"
	for _, user := range []string{access.ClientUser("control"), access.SeatUser, access.VaultUser, access.RouterUser} {
		creds := auth.CredsPath(dir, user)
		for _, args := range [][]string{
			{"get", "provisions"},
			{"asks"},
			{"answer", "retire-x-1", "yes"},
			{"unkeep", "control.x.y"},
		} {
			_, _, err := run(t, append(args, "--nats", nowhere, "--creds", creds)...)
			if err == nil || !strings.Contains(err.Error(), `the user "`+user+`"'s, not an operator's`) {
				t.Errorf("%v with %s's credentials: %v; want the refusal naming %s", args, user, err, user)
			}
		}
	}
	// The neighbour: the operator's credentials pass the check (and then
	// find no server).
	_, _, err = run(t, "get", "provisions", "--nats", nowhere, "--creds", auth.CredsPath(dir, access.DefaultOperator))
	if err == nil || strings.Contains(err.Error(), "not an operator's") {
		t.Errorf("get provisions with the operator's credentials: %v; want it to connect (and find no server)", err)
	}
	// A component: the vault started with the client's credentials.
	_, _, err = run(t, "vault", "--node", "control", "--data", t.TempDir(), "--nats", nowhere, "--creds", auth.CredsPath(dir, access.ClientUser("control")))
	if err == nil || !strings.Contains(err.Error(), `they are the user "client-control"'s`) {
		t.Errorf("vault with the client's credentials: %v; want the refusal naming client-control", err)
	}
}
