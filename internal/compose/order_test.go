package compose_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A credential asked about while a key still depends on it (as an older
// seat did) has its open ask withdrawn, and a yes on it is not taken: said,
// cleared, and asked again once its dependents are retired.
func TestCredentialAskWhileDependedOn(t *testing.T) {
	cred, db := "ace.vaultwarden.credential.postgres_database", "ace.vaultwarden.database"
	for _, c := range []struct {
		name      string
		rec       func(a mesh.Ask) mesh.Record
		withdrawn bool
		problem   string
	}{
		{
			name: "open", withdrawn: true,
			rec: func(a mesh.Ask) mesh.Record { return mesh.Record{State: mesh.RecordOpen, Ask: a} },
		},
		{
			name:    "answered yes",
			problem: `the warrant "yes" of ask %s for key ` + cred + " is not taken: " + db + " still depend on it; it is asked again once they are retired",
			rec: func(a mesh.Ask) mesh.Record {
				return mesh.Record{State: mesh.RecordAnswered, Ask: a, Warrant: &mesh.RecordWarrant{
					Asker: retire.Asker, Ask: a.ID, Outcome: mesh.OutcomeChosen, Option: retire.Yes,
					Binds: mesh.ActDigest(cred, a.ID, retire.Yes), By: mesh.Identity{Who: "alice", Kind: "nats-user", Identity: "alice"}, At: at,
				}}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := load(t, "../../examples/homelab.yaml")
			settle(t, m)
			k, _ := mesh.ParseProvisionKey(cred)
			p, ok := m.Provision(cred)
			if !ok {
				t.Fatalf("no key %s", cred)
			}
			p.State, p.Why = mesh.Retiring, "no build wanted or placed on ace requires credential of mesh-vault on control any more"
			a := retire.Ask(k, p, at, 0)
			p.Ask = a.ID
			for key, v := range map[string]any{cred: p} {
				b, _ := json.Marshal(v)
				m.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: key, Value: b, Revision: 1000})
			}
			b, _ := json.Marshal(c.rec(a))
			m.Take(bus.Change{Bucket: mesh.RecordsBucket, Key: a.ID, Value: b, Revision: 1001})

			res := compose.Judge(m, []string{cred}, func(string) *compose.Need { return nil }, at)
			got := res.Provisions[cred]
			if got.Ask != "" || got.Warrant != nil || got.State != mesh.Retiring ||
				!strings.HasSuffix(got.Why, "; it is asked about once the keys that depend on it are retired: "+db) {
				t.Errorf("%s = %+v; want retiring, no ask, no warrant, its why naming %s", cred, got, db)
			}
			if _, ok := res.Withdrawn[cred]; ok != c.withdrawn {
				t.Errorf("Withdrawn = %v; want %s withdrawn %v", res.Withdrawn, cred, c.withdrawn)
			}
			want := []string(nil)
			if c.problem != "" {
				want = []string{strings.Replace(c.problem, "%s", a.ID, 1)}
			}
			if strings.Join(res.Problems, "\n") != strings.Join(want, "\n") {
				t.Errorf("Problems = %q\nwant %q", res.Problems, want)
			}
			if len(res.Retired) != 0 || len(res.Asks) != 0 {
				t.Errorf("Retired %v, Asks %d; want none", res.Retired, len(res.Asks))
			}
		})
	}
}
