package retire_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

var now = time.Date(2026, 11, 30, 3, 30, 0, 500, time.UTC)

func gitea() (mesh.ProvisionKey, mesh.Provision) {
	k := mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "database", Local: "main"}
	return k, mesh.Provision{
		Provision: "database", Local: "main",
		Consumer:  mesh.Ref{Module: "gitea", Node: "ace"},
		Provider:  mesh.Ref{Module: "postgres", Node: "control"},
		State:     mesh.Retiring,
		Why:       "no build wanted or placed on ace requires database of postgres on control any more",
		DependsOn: []string{"ace.gitea.credential.postgres_database_main"},
		Reference: &mesh.Reference{ID: "pg/ace-gitea-main", Generation: 2},
	}
}

func TestAskOfAProvision(t *testing.T) {
	k, p := gitea()
	a := retire.Ask(k, p, now, 2*time.Hour)
	const id = "retire-ace-gitea-database-main-1796009400"
	checks := []struct{ field, got, want string }{
		{"id", a.ID, id},
		{"headline", a.Headline, "Remove gitea's database access (main)?"},
		{"explanation", a.Explanation, "gitea on ace no longer needs the database (main) that postgres on control " +
			"provides to it (key ace.gitea.database.main). If you remove it, postgres on control takes away gitea's " +
			"access: it removes what it set up for gitea, such as a login, and hands what gitea owned to the " +
			"database's owner. The database itself and its data stay where they are."},
		{"who", a.Who, "operator"},
		{"expires", a.Expires.Format(time.RFC3339Nano), "2026-11-30T05:30:00Z"},
		{"on-expiry", a.OnExpiry, "nothing is removed; it is asked again when it changes"},
		{"about", a.About, "provision.ace.gitea.database.main"},
		{"asker", a.Asker, "mesh-provisioner"},
		{"details", a.Details, "Key ace.gitea.database.main in mesh-provisioner_provisions; consumer gitea on ace; " +
			"provider postgres on control. Retiring: no build wanted or placed on ace requires database of postgres " +
			"on control any more. Depends on ace.gitea.credential.postgres_database_main. Refers to " +
			`pg/ace-gitea-main, generation 2. Each option binds the SHA-256 of the act {"ask":"` + id +
			`","option":<option>,"provision":"ace.gitea.database.main","verb":"mesh-provisioner.retire"}.`},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("Ask(...).%s = %q; want %q", c.field, c.got, c.want)
		}
	}
	want := []mesh.AskOption{
		{ID: "yes", Label: "Remove", Level: "approve", Binds: mesh.ActDigest("ace.gitea.database.main", id, "yes"),
			Does: "postgres on control removes gitea's access to the database (main) and hands what gitea owned to " +
				"the database's owner; the database and its data stay."},
		{ID: "no", Label: "Keep", Level: "approve", Binds: mesh.ActDigest("ace.gitea.database.main", id, "no"),
			Does: "Nothing is removed: the key stays retiring, and you are not asked again until it changes."},
	}
	if len(a.Options) != 2 || a.Options[0] != want[0] || a.Options[1] != want[1] {
		t.Errorf("Ask(...).Options = %+v; want %+v", a.Options, want)
	}
	if a.Options[0].Binds == a.Options[1].Binds {
		t.Error("yes and no bind the same digest")
	}
}

func TestAskHeadlines(t *testing.T) {
	for _, c := range []struct {
		name string
		key  mesh.ProvisionKey
		p    mesh.Provision
		id   string
		head string
		expl string // a part the explanation must hold
	}{
		{
			name: "provision without local",
			key:  mesh.ProvisionKey{Node: "ace", Consumer: "vaultwarden", Provision: "route"},
			p: mesh.Provision{Consumer: mesh.Ref{Module: "vaultwarden", Node: "ace"},
				Provider: mesh.Ref{Module: "route-proxy", Node: "control"}, State: mesh.Retiring},
			id:   "retire-ace-vaultwarden-route-1796009400",
			head: "Remove vaultwarden's route access?",
			expl: "vaultwarden on ace no longer needs the route that route-proxy on control provides to it",
		},
		{
			name: "own credential",
			key:  mesh.CredentialKey("ace", "gitea", "postgres", "database", ""),
			p: mesh.Provision{Consumer: mesh.Ref{Module: "gitea", Node: "ace"},
				Provider: mesh.Ref{Module: "mesh-vault", Node: "control"}, State: mesh.Retiring},
			id:   "retire-ace-gitea-credential-postgres_database-1796009400",
			head: "Remove gitea's credential for postgres database?",
			expl: "gitea on ace no longer needs its own credential for the database of postgres (key " +
				"ace.gitea.credential.postgres_database). If you remove it, mesh-vault on control deletes that " +
				"credential, so gitea can no longer log in with it. The database itself and its data stay",
		},
		{
			name: "own credential with local",
			key:  mesh.CredentialKey("ace", "gitea", "postgres", "database", "main"),
			p: mesh.Provision{Consumer: mesh.Ref{Module: "gitea", Node: "ace"},
				Provider: mesh.Ref{Module: "mesh-vault", Node: "control"}, State: mesh.Retiring},
			id:   "retire-ace-gitea-credential-postgres_database_main-1796009400",
			head: "Remove gitea's credential for postgres database (main)?",
			expl: "its own credential for the database of postgres (main)",
		},
		{
			name: "shared credential",
			key:  mesh.CredentialKey("control", "redis", "redis", "cache", ""),
			p: mesh.Provision{Consumer: mesh.Ref{Module: "redis", Node: "control"},
				Provider: mesh.Ref{Module: "mesh-vault", Node: "control"}, State: mesh.Retiring},
			id:   "retire-control-redis-credential-redis_cache-1796009400",
			head: "Remove redis's shared credential for its cache?",
			expl: "No module needs the shared credential of the cache of redis on control any more",
		},
		{
			name: "no consumer or provider in the value",
			key:  mesh.ProvisionKey{Node: "g14", Consumer: "grafana", Provision: "oidc-client"},
			p:    mesh.Provision{State: mesh.Retiring},
			id:   "retire-g14-grafana-oidc-client-1796009400",
			head: "Remove grafana's oidc-client access?",
			expl: "grafana on g14 no longer needs the oidc-client that its provider provides to it",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := retire.Ask(c.key, c.p, now, 0)
			if a.ID != c.id {
				t.Errorf("ID = %q; want %q", a.ID, c.id)
			}
			if a.Headline != c.head {
				t.Errorf("Headline = %q; want %q", a.Headline, c.head)
			}
			if !strings.Contains(a.Explanation, c.expl) {
				t.Errorf("Explanation = %q; want it to hold %q", a.Explanation, c.expl)
			}
			if !strings.Contains(a.Explanation, "its data stay") {
				t.Errorf("Explanation = %q; want it to say the data stay", a.Explanation)
			}
			if want := now.Add(retire.DefaultTTL).Truncate(time.Second); !a.Expires.Equal(want) {
				t.Errorf("Expires = %v; want %v (the default time to live)", a.Expires, want)
			}
			for _, o := range a.Options {
				if want := mesh.ActDigest(c.key.String(), c.id, o.ID); o.Binds != want {
					t.Errorf("option %s binds %s; want %s", o.ID, o.Binds, want)
				}
			}
		})
	}
}

func TestAskJSONShape(t *testing.T) {
	k, p := gitea()
	b, err := json.Marshal(retire.Ask(k, p, now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "headline", "explanation", "who", "expires", "on-expiry", "about", "details", "options"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("ask JSON %s has no field %q", b, f)
		}
	}
	if got := string(fields["expires"]); got != `"2026-11-30T04:30:00Z"` {
		t.Errorf("expires = %s; want \"2026-11-30T04:30:00Z\"", got)
	}
}
