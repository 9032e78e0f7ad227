package why

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

var at = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// builder puts values into a state.Mesh the way the seat's copies do.
type builder struct {
	t *testing.T
	m *state.Mesh
}

func newBuilder(t *testing.T) *builder {
	b := &builder{t: t, m: state.New()}
	// The providers' trunk manifests.
	b.module(`{"module":"mesh-vault","provides":[{"name":"credential","answered-by":"helper"}],"state":["bound"],"reads":["mesh-provisioner.plans"]}`)
	b.module(`{"module":"postgres","provides":[{"name":"database","credential":"own","answered-by":"helper"}],"state":["bound"],"reads":["mesh-provisioner.plans"]}`)
	b.module(`{"module":"redis","provides":[{"name":"cache"}]}`)
	b.module(`{"module":"keycloak","provides":[{"name":"oidc-client","answered-by":"helper"}],"state":["bound"]}`)
	b.put(mesh.PlacementBucket, "control", mesh.Placement{Modules: []mesh.PlacedModule{
		{Module: "mesh-vault"}, {Module: "postgres"}, {Module: "redis"}, {Module: "keycloak"}}})
	return b
}

func (b *builder) put(bucket, key string, v any) {
	b.t.Helper()
	raw, ok := v.(string)
	var val []byte
	if ok {
		val = []byte(raw)
	} else {
		var err error
		if val, err = json.Marshal(v); err != nil {
			b.t.Fatal(err)
		}
	}
	if t := b.m.Take(bus.Change{Bucket: bucket, Key: key, Value: val, Revision: 1}); t.Odd != nil {
		b.t.Fatalf("odd change %s %s: %v", bucket, key, t.Odd)
	}
}

func (b *builder) module(manifest string) {
	b.t.Helper()
	var m struct{ Module string }
	_ = json.Unmarshal([]byte(manifest), &m)
	d := mesh.Digest([]byte(manifest))
	b.put(mesh.ManifestsBucket, mesh.ManifestKey(d), mesh.ManifestRecord{JSON: manifest})
	b.put(mesh.ModulesBucket, m.Module, mesh.ModuleRecord{Manifest: d})
}

func (b *builder) provision(key string, p mesh.Provision) {
	b.t.Helper()
	k, err := mesh.ParseProvisionKey(key)
	if err != nil {
		b.t.Fatal(err)
	}
	p.Provision, p.Local = k.Provision, k.Local
	p.Consumer = mesh.Ref{Module: k.Consumer, Node: k.Node}
	if p.At.IsZero() {
		p.At = at
	}
	b.put(mesh.ProvisionsBucket, key, p)
}

var (
	postgres = mesh.Ref{Module: "postgres", Node: "control"}
	vault    = mesh.Ref{Module: "mesh-vault", Node: "control"}
	redis    = mesh.Ref{Module: "redis", Node: "control"}
)

const (
	grafanaDB   = "g14.grafana.database"
	grafanaCred = "g14.grafana.credential.postgres_database"
)

// line is a step without its time, for comparing.
type line struct {
	Depth           int
	What, Key, Says string
	State           string
}

func TestWalk(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(b *builder)
		key   string
		want  []line
		err   error
	}{
		{
			name: "provided",
			setup: func(b *builder) {
				b.provision(grafanaCred, mesh.Provision{Provider: vault, State: mesh.Provided,
					Reference: &mesh.Reference{ID: "g14/grafana/postgres_database", Generation: 2}})
			},
			key:  grafanaCred,
			want: []line{{0, StepProvision, grafanaCred, "provided by mesh-vault on control (g14/grafana/postgres_database, generation 2)", "provided"}},
		},
		{
			name: "provided, rotating",
			setup: func(b *builder) {
				b.provision(grafanaCred, mesh.Provision{Provider: vault, State: mesh.Provided, Why: "mesh-vault on control says provided: rotated to generation 3, not in force yet",
					Reference: &mesh.Reference{ID: "g14/grafana/postgres_database", Generation: 2}})
			},
			key: grafanaCred,
			want: []line{{0, StepProvision, grafanaCred, "provided by mesh-vault on control (g14/grafana/postgres_database, generation 2); " +
				"mesh-vault on control says provided: rotated to generation 3, not in force yet", "provided"}},
		},
		{
			name: "waits on a credential the vault failed",
			setup: func(b *builder) {
				b.provision(grafanaDB, mesh.Provision{Provider: postgres, State: mesh.Asked,
					Why: "waits for postgres on control to answer", DependsOn: []string{grafanaCred}})
				b.provision(grafanaCred, mesh.Provision{Provider: vault, State: mesh.Failed, Why: "mesh-vault said: store sealed"})
				b.put(mesh.BoundBucket("mesh-vault"), grafanaCred, mesh.Entry{State: mesh.Failed, Why: "store sealed"})
			},
			key: grafanaDB,
			want: []line{
				{0, StepProvision, grafanaDB, "waits for postgres on control to answer", "asked"},
				{1, StepProvision, grafanaCred, "mesh-vault said: store sealed", "failed"},
				{2, StepEntry, "mesh-vault_bound " + grafanaCred, "mesh-vault on control says failed: store sealed", "failed"},
				{1, StepEntry, "postgres_bound " + grafanaDB, "no entry from postgres on control yet (is its provider running?)", ""},
			},
		},
		{
			name: "a provider answering by its have that does not run",
			setup: func(b *builder) {
				b.provision("ace.gitea.cache", mesh.Provision{Provider: redis, State: mesh.Asked, Why: "waits for redis on control to run"})
			},
			key: "ace.gitea.cache",
			want: []line{
				{0, StepProvision, "ace.gitea.cache", "waits for redis on control to run", "asked"},
				{1, StepHave, "control.redis", "no have: redis does not run on control (node-engine_have has no key control.redis)", ""},
			},
		},
		{
			name: "a failed have",
			setup: func(b *builder) {
				b.provision("ace.gitea.cache", mesh.Provision{Provider: redis, State: mesh.Failed, Why: "redis on control failed"})
				b.put(mesh.HaveBucket, "control.redis", mesh.Have{Phase: mesh.PhaseFailed, Health: mesh.HealthFailed, Fingerprint: "71be02", Detail: "oom"})
			},
			key: "ace.gitea.cache",
			want: []line{
				{0, StepProvision, "ace.gitea.cache", "redis on control failed", "failed"},
				{1, StepHave, "control.redis", "redis on control is failed, health failed, at build 71be02: oom", "failed/failed"},
			},
		},
		{
			name: "the provider is held",
			setup: func(b *builder) {
				b.provision(grafanaDB, mesh.Provision{Provider: postgres, State: mesh.Asked, Why: "waits for postgres on control to answer"})
				b.put(mesh.RefusedBucket, "control.postgres", mesh.Refusal{Node: "control", Module: "postgres", Why: "no build is known for postgres", Since: at})
			},
			key: grafanaDB,
			want: []line{
				{0, StepProvision, grafanaDB, "waits for postgres on control to answer", "asked"},
				{1, StepEntry, "postgres_bound " + grafanaDB, "no entry from postgres on control yet (is its provider running?)", ""},
				{1, StepRefusal, "control.postgres", "the provider postgres on control is held: no build is known for postgres", "held"},
			},
		},
		{
			name: "retiring with an open ask",
			setup: func(b *builder) {
				b.provision(grafanaDB, mesh.Provision{Provider: postgres, State: mesh.Retiring, Why: "no build wanted or placed on g14 requires database of postgres on control any more", Ask: "retire-g14-grafana-database-1"})
				b.put(mesh.RecordsBucket, "retire-g14-grafana-database-1", mesh.Record{State: mesh.RecordOpen,
					Ask: mesh.Ask{ID: "retire-g14-grafana-database-1", Headline: "Remove grafana's database access?", Expires: at.Add(time.Hour)}})
			},
			key: grafanaDB,
			want: []line{
				{0, StepProvision, grafanaDB, "no build wanted or placed on g14 requires database of postgres on control any more", "retiring"},
				{1, StepAsk, "retire-g14-grafana-database-1", "open for the operator until 2026-12-01 01:00Z: Remove grafana's database access? (answer retire-g14-grafana-database-1 yes|no)", "open"},
			},
		},
		{
			name: "kept on the operator's no",
			setup: func(b *builder) {
				b.provision(grafanaDB, mesh.Provision{Provider: postgres, State: mesh.Retiring, Why: "no longer needed", Ask: "a1",
					Warrant: &mesh.Warrant{Ask: "a1", Option: "no", By: mesh.Identity{Who: "operator"}, At: at}})
			},
			key: grafanaDB,
			want: []line{
				{0, StepProvision, grafanaDB, "no longer needed", "retiring"},
				{1, StepAsk, "a1", "kept: the operator \"operator\" answered no to a1; it is not asked again while nothing changes (unkeep asks again)", "no"},
			},
		},
		{
			name: "a plan with a provision not provided, its module held at a newer build",
			setup: func(b *builder) {
				b.put(mesh.PlansBucket, "g14.grafana", mesh.Plan{Node: "g14", Module: "grafana", Fingerprint: "6f6f00",
					Provisions: []mesh.PlanProvision{{Provision: "database", Provider: "control", ProviderModule: "postgres", Credential: "own"}}})
				b.put(mesh.RefusedBucket, "g14.grafana", mesh.Refusal{Node: "g14", Module: "grafana", Why: "grafana wants build 6f6f01, which is not known", Since: at})
				b.provision(grafanaDB, mesh.Provision{Provider: postgres, State: mesh.Waits, Why: "postgres said: server starting"})
				b.put(mesh.BoundBucket("postgres"), grafanaDB, mesh.Entry{State: mesh.Waits, Why: "server starting"})
			},
			key: "g14.grafana",
			want: []line{
				{0, StepRefusal, "g14.grafana", "grafana on g14 is held: grafana wants build 6f6f01, which is not known", "held"},
				{0, StepPlan, "g14.grafana", "plan of grafana on g14 at build 6f6f00, 1 provisions, 1 not provided", ""},
				{1, StepProvision, grafanaDB, "postgres said: server starting", "waits"},
				{2, StepEntry, "postgres_bound " + grafanaDB, "postgres on control says waits: server starting", "waits"},
				{2, StepRefusal, "g14.grafana", "the consumer grafana on g14 is held: grafana wants build 6f6f01, which is not known", "held"},
			},
		},
		{
			name: "a refusal of a module with a bad name",
			setup: func(b *builder) {
				b.put(mesh.RefusedBucket, "ace.Gitea", mesh.Refusal{Node: "ace", Module: "Gitea", Why: `module name "Gitea" is not valid`, Since: at})
			},
			key:  "ace.Gitea",
			want: []line{{0, StepRefusal, "ace.Gitea", `Gitea on ace is held: module name "Gitea" is not valid`, "held"}},
		},
		{
			name: "a key the refusal of its held consumer is about",
			setup: func(b *builder) {
				b.put(mesh.RefusedBucket, "g14.grafana", mesh.Refusal{Node: "g14", Module: "grafana", Since: at,
					Why: "g14.grafana.oidc: it requires oidc from keycloak, which is placed on no node and offers oidc-client, not oidc"})
			},
			key: "g14.grafana.oidc",
			want: []line{
				{0, StepProvision, "g14.grafana.oidc", "not kept: grafana on g14 is held, so the seat writes none of its new keys; its refusal is about this key", ""},
				{1, StepRefusal, "g14.grafana", "the consumer grafana on g14 is held: g14.grafana.oidc: it requires oidc from keycloak, which is placed on no node and offers oidc-client, not oidc", "held"},
			},
		},
		{
			// The ask said what its provider could remove: here nothing,
			// postgres never answered the key (no credential to remove).
			name: "a retired key",
			setup: func(b *builder) {
				a := retire.AskFor(mesh.ProvisionKey{Node: "g14", Consumer: "grafana", Provision: "database"},
					mesh.Provision{Consumer: mesh.Ref{Module: "grafana", Node: "g14"}, Provider: postgres}, retire.NothingGiven, at, time.Hour)
				a.ID, a.Headline = "retire-g14-grafana-database-2", "Remove grafana's database access?"
				b.put(mesh.RecordsBucket, "retire-g14-grafana-database-1", mesh.Record{State: mesh.RecordExpired,
					Ask: mesh.Ask{ID: "retire-g14-grafana-database-1", About: a.About, Expires: at}})
				b.put(mesh.RecordsBucket, a.ID, mesh.Record{State: mesh.RecordAnswered, Ask: a,
					Warrant: &mesh.RecordWarrant{Ask: a.ID, Outcome: mesh.OutcomeChosen, Option: "yes", By: mesh.Identity{Who: "alice", Kind: "nats-user", Identity: "alice"}, At: at.Add(time.Minute)}})
			},
			key: grafanaDB,
			want: []line{
				{0, StepProvision, grafanaDB, "no longer kept: the seat deleted it on the operator's warrant; its Remove said: The key is dropped; postgres on control has nothing to remove for it.", "retired"},
				{1, StepAsk, "retire-g14-grafana-database-2", "removed on the answer yes of alice at 2026-12-01 00:01Z to retire-g14-grafana-database-2: Remove grafana's database access?", "yes"},
			},
		},
		{
			// Its vault left gamma with the credential's entry: the key
			// went on the yes, and the why says what is left by hand.
			name: "a retired key whose provider left with its entry",
			setup: func(b *builder) {
				k := mesh.ProvisionKey{Node: "gamma", Consumer: "app", Provision: mesh.CredentialProvision, Local: "postgres_database"}
				gone := mesh.Ref{Module: "mesh-vault", Node: "gamma"}
				a := retire.AskFor(k, mesh.Provision{Consumer: mesh.Ref{Module: "app", Node: "gamma"}, Provider: gone}, retire.ProviderGone, at, time.Hour)
				b.put(mesh.RecordsBucket, a.ID, mesh.Record{State: mesh.RecordAnswered, Ask: a,
					Warrant: &mesh.RecordWarrant{Ask: a.ID, Outcome: mesh.OutcomeChosen, Option: "yes", By: mesh.Identity{Who: "alice", Kind: "nats-user", Identity: "alice"}, At: at.Add(time.Minute)}})
				b.put(mesh.BoundBucket("mesh-vault"), k.String(), mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 1})
			},
			key: "gamma.app.credential.postgres_database",
			want: []line{
				{0, StepProvision, "gamma.app.credential.postgres_database", "no longer kept: the seat deleted it on the operator's warrant, but mesh-vault on gamma left gamma with its entry and nothing removed it: " +
					"clean by hand its entry gamma.app.credential.postgres_database in mesh-vault_bound and the credential it keeps in its store", "retired"},
				{1, StepAsk, "retire-gamma-app-credential-postgres_database-1796083200", "removed on the answer yes of alice at 2026-12-01 00:01Z to retire-gamma-app-credential-postgres_database-1796083200: Remove app's credential for postgres database?", "yes"},
			},
		},
		{
			// Its why and its walk agree: not asked until its dependents go.
			name: "a retiring credential its database key still depends on",
			setup: func(b *builder) {
				b.provision(grafanaCred, mesh.Provision{Provider: vault, State: mesh.Retiring,
					Why: "no build wanted or placed on g14 requires credential of mesh-vault on control any more; it is asked about once the keys that depend on it are retired: " + grafanaDB})
			},
			key: grafanaCred,
			want: []line{
				{0, StepProvision, grafanaCred, "no build wanted or placed on g14 requires credential of mesh-vault on control any more; it is asked about once the keys that depend on it are retired: " + grafanaDB, "retiring"},
				{1, StepAsk, "", "not asked yet: it is asked about once the keys that depend on it are retired: " + grafanaDB, ""},
			},
		},
		{
			name: "an entry lost",
			setup: func(b *builder) {
				b.provision(grafanaDB, mesh.Provision{Provider: postgres, State: mesh.Asked,
					Why: "asked of postgres on control; its entry in postgres_bound is gone since 2026-12-01T00:00:00Z (it said last: provided, vault name v, generation 3)"})
				b.put(mesh.BoundBucket("postgres"), grafanaDB, mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 3})
				b.m.Take(bus.Change{Bucket: mesh.BoundBucket("postgres"), Key: grafanaDB, Deleted: true, Revision: 2})
			},
			key: grafanaDB,
			want: []line{
				{0, StepProvision, grafanaDB, "asked of postgres on control; its entry in postgres_bound is gone since 2026-12-01T00:00:00Z (it said last: provided, vault name v, generation 3)", "asked"},
				{1, StepEntry, "postgres_bound " + grafanaDB, "no entry: postgres on control removed it (it said last: provided, vault name v, generation 3)", ""},
			},
		},
		{
			name: "an entry lost before the mesh was read",
			setup: func(b *builder) {
				b.provision(grafanaDB, mesh.Provision{Provider: postgres, State: mesh.Asked,
					Why: "asked of postgres on control; its entry in postgres_bound is gone since 2026-12-01T00:00:00Z (it said last: failed: disk full)"})
			},
			key: grafanaDB,
			want: []line{
				{0, StepProvision, grafanaDB, "asked of postgres on control; its entry in postgres_bound is gone since 2026-12-01T00:00:00Z (it said last: failed: disk full)", "asked"},
				{1, StepEntry, "postgres_bound " + grafanaDB, "no entry: postgres on control removed it (the key's why says when, and what it said last)", ""},
			},
		},
		{
			name: "a provider no longer placed on its node",
			setup: func(b *builder) {
				b.provision(grafanaDB, mesh.Provision{Provider: postgres, State: mesh.Asked,
					Why: "asked of postgres on control, which is no longer placed on control (it is placed on n3): nothing answers this key"})
				b.put(mesh.BoundBucket("postgres"), grafanaDB, mesh.Entry{State: mesh.Provided, VaultName: "v", Generation: 3})
				b.put(mesh.PlacementBucket, "control", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "mesh-vault"}}})
				b.put(mesh.PlacementBucket, "n3", mesh.Placement{Modules: []mesh.PlacedModule{{Module: "postgres"}}})
			},
			key: grafanaDB,
			want: []line{
				{0, StepProvision, grafanaDB, "asked of postgres on control, which is no longer placed on control (it is placed on n3): nothing answers this key", "asked"},
				{1, StepProvider, "postgres", "the provider postgres is no longer placed on control (it is placed on n3): nothing answers this key", ""},
			},
		},
		{name: "unknown", setup: func(*builder) {}, key: "ace.gitea.database", err: ErrUnknownKey},
		{name: "unknown with an ask not answered yes", setup: func(b *builder) {
			b.put(mesh.RecordsBucket, "retire-ace-gitea-database-1", mesh.Record{State: mesh.RecordExpired,
				Ask: mesh.Ask{ID: "retire-ace-gitea-database-1", About: "provision.ace.gitea.database", Expires: at}})
		}, key: "ace.gitea.database", err: ErrUnknownKey},
		{name: "unknown plan", setup: func(*builder) {}, key: "ace.gitea", err: ErrUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(t)
			tc.setup(b)
			steps, err := Walk(b.m, tc.key)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Walk(%s) = %v; want %v", tc.key, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Walk(%s) = %v", tc.key, err)
			}
			got := make([]line, len(steps))
			for i, s := range steps {
				got[i] = line{s.Depth, s.What, s.Key, s.Says, s.State}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Walk(%s) = %d steps:\n%v\nwant %d:\n%v", tc.key, len(got), got, len(tc.want), tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("step %d = %+v;\n want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
