package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/dryrun"
)

// severalVaults is a mesh whose two vaults (on n2 and n3) leave p3's
// shared route credential, held on n5, with no provider: c1's route keys
// on n2, n4 and n5 wait for it, each learned by the seat as having no
// provider. c1 goes from n5 in severalVaultsAfter.
const severalVaults = `nodes: [n2, n3, n4, n5]
modules:
  mesh-vault:
    builds:
      - fp: v0
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans, mesh-provisioner.provisions]}
  p3:
    builds:
      - fp: f0
        manifest: {module: p3, provides: [{name: route, credential: shared}]}
  c1:
    builds:
      - fp: b0
        manifest: {module: c1, requires: [{provision: route, from: p3}], ports: [{name: http}]}
placement:
  n2: [c1, mesh-vault]
  n3: [VAULT]
  n4: [c1]
  n5: [PLACED]
`

// TestDryRunKnowsACredentialHasNoProvider dry-runs c1 unplaced from n5,
// where p3's shared credential has no provider (made while one vault ran,
// then a second placed, none on n5), and checks that the dry run predicts
// what the seat writes: n5's c1 route retiring, its plan removed and the
// credential judged again, and nothing of c1's route keys on n2 and n4,
// which the credential's change judges again too. The dry run, which
// composes n5 alone, judged those keys from their stored provisions
// without the learned "has no provider" (compose.Need.NoProvider) and
// said they wait for the credential, asked (the property test's seed 6,
// step 24).
func TestDryRunKnowsACredentialHasNoProvider(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	startRouter(t, s)
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	write := func(vault, placed string) {
		text := strings.Replace(strings.Replace(severalVaults, "VAULT", vault, 1), "PLACED", placed, 1)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// One vault first: the credential is made, asked of it; then the
	// second vault leaves it with no provider.
	write("", "c1, p3")
	st := startSeat(t, s, path)
	waitSeat(t, s, st)
	write("mesh-vault", "c1, p3")
	if _, errOut, err := run(t, "apply", "--yes", "-f", path, "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	waitSeat(t, s, st)
	write("mesh-vault", "p3")
	before := seatValues(t, s)
	out, errOut, err := run(t, "apply", "--dry-run", "-f", path, "-o", "json", "--nats", s.URL())
	if err != nil {
		t.Fatalf("apply --dry-run: %v (%s)", err, errOut)
	}
	var rep dryrun.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("apply --dry-run -o json printed %s: %v", out, err)
	}
	if _, errOut, err := run(t, "apply", "--yes", "-f", path, "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	waitSeat(t, s, st)
	got, want := seatChanges(before, seatValues(t, s)), predicted(rep)
	if !slices.Equal(got, want) {
		t.Errorf("the seat wrote\n  %s\nthe dry run said\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, c := range rep.Changes {
		if c.Node != "n5" {
			t.Errorf("the dry run said %s of %s; want n5's keys only", changeLine(c), c.Node)
		}
	}
	if len(got) == 0 {
		t.Error("the seat wrote nothing: the test shows nothing")
	}
}
