package compose_test

import (
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// module puts a module's manifest, its build fp and its trunk into m, as an
// indexer and a builder would.
func module(t *testing.T, m *state.Mesh, name, fp, manifestJSON string) {
	t.Helper()
	d := mesh.Digest([]byte(manifestJSON))
	put(t, m, mesh.ManifestsBucket, mesh.ManifestKey(d), mesh.ManifestRecord{JSON: manifestJSON})
	put(t, m, mesh.BuildsBucket, name+"."+fp, mesh.Build{Module: name, Fingerprint: fp, Manifest: d, At: at.Add(-time.Hour)})
	put(t, m, mesh.ModulesBucket, name, mesh.ModuleRecord{Manifest: d})
}

// A refusal names each requirement it is about by its key, and says every
// reason of every requirement that cannot be met, not the first: where
// the provider is placed, and what it offers when not the provision.
func TestRefusalSaysEveryReasonWithItsKey(t *testing.T) {
	for _, c := range []struct {
		name     string
		requires string
		why      string
	}{{
		name:     "placed on no node, and offering something else",
		requires: `[{"provision":"oidc","from":"keycloak"}]`,
		why:      "g14.grafana.oidc: it requires oidc from keycloak, which is placed on no node and offers oidc-client, not oidc",
	}, {
		name:     "placed, offering something else",
		requires: `[{"provision":"databse","from":"postgres","on":"a"}]`,
		why:      "g14.grafana.databse: it requires databse from postgres on a, which offers database, not databse",
	}, {
		name:     "every requirement",
		requires: `[{"provision":"oidc","from":"keycloak"},{"provision":"database","from":"postgres","local":"main"},{"provision":"cache","from":"ghost"},{"provision":"database","from":"postgres","on":"c","local":"old"}]`,
		why: "g14.grafana.oidc: it requires oidc from keycloak, which is placed on no node and offers oidc-client, not oidc; " +
			`g14.grafana.database.main: it requires database from postgres, which is placed on several nodes (a, b) and none is chosen: pin one with "on"; ` +
			"g14.grafana.cache: it requires cache from ghost, which is placed on no node and has no trunk manifest known (mesh-indexer_modules has no ghost); " +
			"g14.grafana.database.old: it requires database from postgres on c, which is not placed on c",
	}} {
		t.Run(c.name, func(t *testing.T) {
			m := state.New()
			module(t, m, "keycloak", "k1", `{"module":"keycloak","provides":[{"name":"oidc-client"}]}`)
			module(t, m, "postgres", "p1", `{"module":"postgres","provides":[{"name":"database"}]}`)
			module(t, m, "grafana", "g1", `{"module":"grafana","requires":`+c.requires+`}`)
			for node, mods := range map[string][]string{"a": {"postgres"}, "b": {"postgres"}, "g14": {"grafana"}} {
				var p mesh.Placement
				for _, mod := range mods {
					p.Modules = append(p.Modules, mesh.PlacedModule{Module: mod})
				}
				put(t, m, mesh.PlacementBucket, node, p)
			}
			res := compose.Node(m, "g14", at)
			if got := res.Held["grafana"]; got != c.why {
				t.Errorf("grafana held for\n%q; want\n%q", got, c.why)
			}
			if r := res.Refusals["g14.grafana"]; r.Why != c.why {
				t.Errorf("refusal g14.grafana why\n%q; want\n%q", r.Why, c.why)
			}
		})
	}
}
