package cli

import (
	"path/filepath"
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
