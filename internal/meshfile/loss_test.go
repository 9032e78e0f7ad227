package meshfile

import (
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func TestLoss(t *testing.T) {
	f, err := Parse("two.yaml", []byte(`nodes: [control, ace]
modules:
  redis:
    builds:
      - fp: 71be02
        manifest: {module: redis, provides: [{name: cache}]}
placement:
  control: [redis]
  ace: []
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		placement map[string][]byte
		unplaced  []string
		placed    int
		most      bool
	}{
		{"nothing placed yet", nil, nil, 0, false},
		{"the same", map[string][]byte{"control": []byte(`{"modules":[{"module":"redis"}]}`)}, nil, 1, false},
		{"half goes", map[string][]byte{"control": []byte(`{"modules":[{"module":"redis"},{"module":"gitea"}]}`)},
			[]string{"control.gitea"}, 2, false},
		{"most goes", map[string][]byte{
			"control": []byte(`{"modules":[{"module":"redis"},{"module":"gitea"}]}`),
			"g14":     []byte(`{"modules":[{"module":"grafana"}]}`),
		}, []string{"control.gitea", "g14.grafana"}, 3, true},
		{"undecodable placement places nothing", map[string][]byte{"g14": []byte(`nope`)}, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			current := map[string]map[string][]byte{mesh.PlacementBucket: tc.placement}
			l := f.Loss(current, &Diff{Removes: []Remove{{Bucket: mesh.PlacementBucket, Key: "g14"}}})
			if l.Placed != tc.placed || len(l.Unplaced) != len(tc.unplaced) || l.Most() != tc.most || l.Removes != 1 {
				t.Fatalf("Loss = %+v (most %v); want placed %d, unplaced %v, most %v, 1 remove", l, l.Most(), tc.placed, tc.unplaced, tc.most)
			}
			for i := range tc.unplaced {
				if l.Unplaced[i] != tc.unplaced[i] {
					t.Errorf("Unplaced = %v; want %v", l.Unplaced, tc.unplaced)
				}
			}
		})
	}
}
