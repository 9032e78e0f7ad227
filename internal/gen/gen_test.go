package gen_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// gen1000 is the 1000-node mesh of 8 app modules per worker, generated
// and parsed once for the tests that read it.
var gen1000 = sync.OnceValues(func() (*meshfile.File, error) {
	return meshfile.Parse("gen-1000", gen.Generate(1000, 8, 1))
})

// parse returns Generate(nodes, modules, 1) parsed.
func parse(nodes, modules int) (*meshfile.File, error) {
	if nodes == 1000 && modules == 8 {
		return gen1000()
	}
	return meshfile.Parse("gen", gen.Generate(nodes, modules, 1))
}

// TestGenerateValid checks that generated meshes of several sizes parse
// with no error and no warning, and hold what Generate promises.
func TestGenerateValid(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nodes, modules int
	}{
		{"one node", 1, 0},
		{"small", 5, 3},
		{"gen-1000", 1000, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parse(tc.nodes, tc.modules)
			if err != nil {
				t.Fatalf("Parse(Generate(%d, %d)) = %v", tc.nodes, tc.modules, err)
			}
			if len(f.Warnings) != 0 {
				t.Errorf("Warnings = %v; want none", f.Warnings[:min(5, len(f.Warnings))])
			}
			if len(f.Nodes) != tc.nodes || f.Nodes[0] != gen.Control {
				t.Fatalf("Nodes = %d starting %q; want %d starting control", len(f.Nodes), f.Nodes[0], tc.nodes)
			}
			control := f.Placement[gen.Control]
			if want := []string{"mesh-vault", "postgres", "redis", "keycloak", "route-proxy", "node-tools"}; len(control) != len(want) {
				t.Errorf("control runs %v; want %v", control, want)
			}
			for _, node := range f.Nodes[1:] {
				p := f.Placement[node]
				if len(p) != 1+tc.modules || p[0] != "node-tools" {
					t.Fatalf("node %s runs %v; want node-tools and %d app modules", node, p, tc.modules)
				}
				for _, m := range p {
					_, wanted := f.Wants[node][m]
					_, had := f.Haves[node][m]
					if !wanted && !had {
						t.Errorf("%s on %s has neither want nor have", m, node)
					}
				}
			}
			pg := f.Module("postgres").Trunk().Manifest
			if o, ok := pg.Offer("database"); !ok || o.Credential != mesh.CredentialOwn || !pg.ByEntries(o) || !pg.ReadsPlans() {
				t.Errorf("postgres manifest = %+v", pg)
			}
			if o, ok := f.Module("redis").Trunk().Manifest.Offer("cache"); !ok || o.Credential != mesh.CredentialShared {
				t.Errorf("redis offers %+v; want a shared cache", o)
			}
			kc := f.Module("keycloak").Trunk().Manifest
			if len(kc.Requires) != 1 || kc.Requires[0].From != "postgres" {
				t.Errorf("keycloak requires %+v; want a database of postgres", kc.Requires)
			}
		})
	}
}

// TestGenerateRealistic checks the 1000-node mesh for the variety a
// benchmark needs: two-build modules, wants at an older build, modules
// with a have and no want, and every kind of requirement.
func TestGenerateRealistic(t *testing.T) {
	f, err := parse(1000, 8)
	if err != nil {
		t.Fatal(err)
	}
	var twoBuilds, older, haveOnly int
	from := map[string]int{}
	for _, m := range f.Modules {
		if len(m.Builds) == 2 {
			twoBuilds++
		}
		for _, r := range m.Trunk().Manifest.Requires {
			from[r.From]++
		}
	}
	for _, node := range f.Nodes {
		for _, m := range f.Placement[node] {
			fp, wanted := f.Wants[node][m]
			if !wanted {
				haveOnly++
			} else if fp != f.Module(m).Trunk().Fingerprint {
				older++
			}
		}
	}
	if twoBuilds < 5 || older < 100 || haveOnly < 100 {
		t.Errorf("two-build modules %d, wants at an older build %d, have-only %d; want more variety", twoBuilds, older, haveOnly)
	}
	for _, p := range []string{"postgres", "redis", "keycloak", "route-proxy"} {
		if from[p] == 0 {
			t.Errorf("no module requires anything from %s", p)
		}
	}
	keys := f.Keys()
	if got := len(keys[mesh.PlacementBucket]); got != 1000 {
		t.Errorf("placement keys = %d; want 1000", got)
	}
	if got := len(keys[mesh.WantsBucket]); got < 8000 {
		t.Errorf("want keys = %d; want most of the 8,006 placed modules", got)
	}
}

// TestGenerateDeterministic checks that a seed gives the same bytes and
// another seed others.
func TestGenerateDeterministic(t *testing.T) {
	a, b := gen.Generate(50, 4, 7), gen.Generate(50, 4, 7)
	if !bytes.Equal(a, b) {
		t.Errorf("Generate(50, 4, 7) differs between two calls")
	}
	if bytes.Equal(a, gen.Generate(50, 4, 8)) {
		t.Errorf("Generate with seeds 7 and 8 gives the same file")
	}
}

func BenchmarkParseGen1000(b *testing.B) {
	text := gen.Generate(1000, 8, 1)
	if _, err := meshfile.Parse("gen", text); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := meshfile.Parse("gen", text); err != nil {
			b.Fatal(err)
		}
	}
}
