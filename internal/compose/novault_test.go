package compose_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestNoVaultIsTheSameFromScratch is an equivalence over two paths to the
// same mesh: the homelab with no vault it can use (none placed, or one
// more on shanks and none chosen for ace's and g14's credentials),
// composed from scratch, and the same mesh reached by composing it with
// the vault on control, its credentials provided, and then placing the
// vault so. Both must keep the same keys, each with the same state, why,
// consumer, provider module and depends-on: a credential still needed
// with no vault is kept asked, saying it has no provider, and its
// dependents stay asked saying they wait for it (spec 4), whatever the
// path. Only the provider's node may differ: the vault that last answered
// the key (where its store is), or the credential's own node when none
// ever did. From scratch the credential keys were never written, and
// their dependents named keys the seat does not keep.
func TestNoVaultIsTheSameFromScratch(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "examples", "homelab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const vaultOnControl = "  control: [mesh-vault, postgres,"
	if !strings.Contains(string(text), vaultOnControl) {
		t.Fatalf("examples/homelab.yaml has no line %q", vaultOnControl)
	}
	parse := func(t *testing.T, s string) *meshfile.File {
		f, err := meshfile.Parse("homelab.yaml", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for name, noVault := range map[string]string{
		"none": strings.NewReplacer(vaultOnControl, "  control: [postgres,", "control: {mesh-vault: 9c0d51, ", "control: {",
			"    mesh-vault: {phase: running, health: ok, fp: 9c0d51}\n", "").Replace(string(text)),
		"several": strings.Replace(string(text), "  shanks: [matrix-synapse,", "  shanks: [mesh-vault, matrix-synapse,", 1),
	} {
		t.Run(name, func(t *testing.T) {
			// The path through a running vault: every credential provided
			// by it, then the vault placed as noVault places it.
			ran := loadFile(t, parse(t, string(text)))
			settle(t, ran)
			var creds []string
			ran.Provisions(func(key string, p mesh.Provision) {
				if p.Provision == mesh.CredentialProvision {
					creds = append(creds, key)
				}
			})
			if len(creds) == 0 {
				t.Fatal("the homelab needs no credential: the test shows nothing")
			}
			entries := func(m *state.Mesh) {
				for _, k := range creds {
					put(t, m, mesh.BoundBucket(mesh.VaultModule), k, mesh.Entry{State: mesh.Provided, VaultName: k, Generation: 1})
				}
			}
			entries(ran)
			settle(t, ran)
			// As apply writes the file: its placement, wants and haves, and
			// the keys it no longer has deleted.
			was, now := parse(t, string(text)).Keys(), parse(t, noVault).Keys()
			for _, b := range []string{mesh.PlacementBucket, mesh.WantsBucket, mesh.HaveBucket} {
				for k, v := range now[b] {
					ran.Take(bus.Change{Bucket: b, Key: k, Value: v})
				}
				for k := range was[b] {
					if _, ok := now[b][k]; !ok {
						ran.Take(bus.Change{Bucket: b, Key: k, Deleted: true})
					}
				}
			}
			settle(t, ran)

			// From scratch, with the same entries.
			scratch := loadFile(t, parse(t, noVault))
			entries(scratch)
			settle(t, scratch)

			got, want := keptOf(scratch), keptOf(ran)
			if name == "none" {
				const cred = "ace.gitea.credential.postgres_database_main"
				const problem = "no node runs mesh-vault, so the credential " + cred + " has no provider"
				for key, w := range map[string]provState{
					cred:                      {mesh.Asked, "asked of mesh-vault: " + problem},
					"ace.gitea.database.main": {mesh.Asked, "waits for " + cred + ", which has no provider: " + problem},
				} {
					if g := got.Provisions[key]; g.State != w.state || g.Why != w.why {
						t.Errorf("from scratch %s = %s %q; want %s %q", key, g.State, g.Why, w.state, w.why)
					}
				}
				if p := got.Provisions[cred].Provider; p != (mesh.Ref{Module: mesh.VaultModule, Node: "ace"}) {
					t.Errorf("from scratch %s is of %+v; want mesh-vault on ace, its own node", cred, p)
				}
				if p := want.Provisions[cred].Provider; p != (mesh.Ref{Module: mesh.VaultModule, Node: "control"}) {
					t.Errorf("through the vault %s is of %+v; want mesh-vault on control, the vault that answered it", cred, p)
				}
			}
			var asked int
			for key, w := range want.Provisions {
				g, ok := got.Provisions[key]
				if !ok {
					t.Errorf("from scratch %s is not kept; through the vault it is %s (%s)", key, w.State, w.Why)
					continue
				}
				if g.State != w.State || g.Why != w.Why || g.Consumer != w.Consumer || g.Provider.Module != w.Provider.Module ||
					!slices.Equal(g.DependsOn, w.DependsOn) {
					t.Errorf("%s from scratch = %s (%s) of %+v for %+v, depends on %v;\n through the vault %s (%s) of %+v for %+v, depends on %v",
						key, g.State, g.Why, g.Provider, g.Consumer, g.DependsOn, w.State, w.Why, w.Provider, w.Consumer, w.DependsOn)
				}
				if w.State == mesh.Asked && strings.HasSuffix(w.Why, " has no provider") {
					asked++
				}
			}
			for key, g := range got.Provisions {
				if _, ok := want.Provisions[key]; !ok {
					t.Errorf("from scratch %s is kept (%s: %s); through the vault it is not", key, g.State, g.Why)
				}
			}
			if asked == 0 {
				t.Error("no key says it has no provider: the test shows nothing")
			}
			if !slices.Equal(sortedKeys(got.Plans), sortedKeys(want.Plans)) {
				t.Errorf("plans from scratch %v; through the vault %v", sortedKeys(got.Plans), sortedKeys(want.Plans))
			}
			for key, w := range want.Refused {
				if g := got.Refused[key]; g.Why != w.Why {
					t.Errorf("refusal %s from scratch %q; through the vault %q", key, g.Why, w.Why)
				}
			}
		})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
