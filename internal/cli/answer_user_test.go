package cli

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
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

// TestComponentRefusesAnotherPartysCreds starts the vault with the
// credentials of a node's client: it fails at once, before it connects (the
// URL answers nothing), naming whose credentials they are; the neighbour,
// the vault's own, passes the check (and then finds no server, trying
// again until it is stopped).
func TestComponentRefusesAnotherPartysCreds(t *testing.T) {
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
	for _, user := range []string{access.ClientUser("control"), access.SeatUser, access.DefaultOperator} {
		_, _, err := run(t, "vault", "--node", "control", "--data", t.TempDir(), "--nats", nowhere, "--creds", auth.CredsPath(dir, user))
		if err == nil || !strings.Contains(err.Error(), `they are the user "`+user+`"'s`) {
			t.Errorf("vault with %s's credentials: %v; want the refusal naming %s", user, err, user)
		}
	}
	// The neighbour tries to connect until its context ends.
	ctx, cancel := context.WithTimeout(bustest.Context(t), 2*time.Second)
	defer cancel()
	root := Root()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"vault", "--node", "control", "--data", t.TempDir(), "--nats", nowhere, "--creds", auth.CredsPath(dir, access.VaultUser), "--log-level", "error"})
	err = root.ExecuteContext(ctx)
	if err == nil || strings.Contains(err.Error(), "they are the user") || !strings.Contains(err.Error(), "no NATS server answers") {
		t.Errorf("vault with its own credentials: %v; want it to pass the check (and find no server until it is stopped)", err)
	}
}
