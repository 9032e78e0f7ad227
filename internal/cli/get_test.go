package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// seatKeys writes plans, provisions and refusals the way the seat would,
// with an odd key and an undecodable value in each bucket.
func seatKeys(t *testing.T, s *bus.Server) {
	t.Helper()
	_, js := bustest.Connect(t, s, "seat")
	ctx := bustest.Context(t)
	since := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	put := func(bucket, key string, v any) {
		t.Helper()
		kv, err := bus.Bucket(ctx, js, bucket, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, ok := v.([]byte)
		if !ok {
			if b, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	put(mesh.PlansBucket, "ace.gitea", mesh.Plan{Node: "ace", Module: "gitea", Fingerprint: "b7c100", Manifest: "sha256:ab",
		Dirs: []mesh.Dir{{Name: "state"}, {Name: "repos"}, {Name: "tmp", Unknown: "sweep"}}, Ports: []mesh.Port{{Name: "http"}, {Name: "ssh"}},
		Secrets: []string{"secret-key"}, Config: []string{"domain"},
		Provisions: []mesh.PlanProvision{
			{Provision: "database", Local: "main", Provider: "control", ProviderModule: "postgres", Credential: "own"},
			{Provision: "route", Provider: "control", ProviderModule: "route-proxy"},
		}})
	put(mesh.PlansBucket, "control.postgres", mesh.Plan{Node: "control", Module: "postgres", Fingerprint: "3f2a91"})
	put(mesh.PlansBucket, "ace.vaultwarden", []byte("not json"))
	put(mesh.PlansBucket, "ace", []byte(`{}`))
	put(mesh.PlansBucket, "g14.grafana", mesh.Plan{Node: "g14", Module: "prometheus"})

	put(mesh.ProvisionsBucket, "ace.gitea.database.main", mesh.Provision{Provision: "database", Local: "main",
		Consumer: mesh.Ref{Module: "gitea", Node: "ace"}, Provider: mesh.Ref{Module: "postgres", Node: "control"},
		State: mesh.Asked, Why: "waits for postgres on control to answer", At: since})
	put(mesh.ProvisionsBucket, "ace.gitea.route", mesh.Provision{Provision: "route",
		Consumer: mesh.Ref{Module: "gitea", Node: "ace"}, Provider: mesh.Ref{Module: "route-proxy", Node: "control"},
		State: mesh.Provided, Reference: &mesh.Reference{ID: "route/ace.gitea", Generation: 1}, At: since})
	put(mesh.ProvisionsBucket, "control.keycloak.database", mesh.Provision{Provision: "database",
		Consumer: mesh.Ref{Module: "keycloak", Node: "control"}, Provider: mesh.Ref{Module: "postgres", Node: "control"},
		State: mesh.Failed, Why: "postgres said: role exists", At: since})
	put(mesh.ProvisionsBucket, "shanks.immich.cache", mesh.Provision{Provision: "cache",
		Consumer: mesh.Ref{Module: "immich", Node: "shanks"}, Provider: mesh.Ref{Module: "redis", Node: "control"},
		State: mesh.Retiring, Why: "no build wanted or placed on shanks requires cache of redis on control any more", At: since})
	put(mesh.ProvisionsBucket, "Bad.key", []byte(`{}`))

	put(mesh.RefusedBucket, "ace.vaultwarden", mesh.Refusal{Node: "ace", Module: "vaultwarden", Why: "its want names build 4a4a4b, which is not known", Since: since})
	put(mesh.RefusedBucket, "g14.grafana", []byte(`{"node":`))
}

func TestGetPlans(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	seatKeys(t, s)
	out, _, err := run(t, "get", "plans", "-o", "wide", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	want := []string{
		"NODE     MODULE    FP      DIRS  PORTS  SECRETS  CONFIG  CONTRIBUTES  PROVISIONS",
		"ace      gitea     b7c100  3     2      1        1       0            2: database.main from postgres@control, route from route-proxy@control",
		"control  postgres  3f2a91  0     0      0        0       0            -",
		"",
		"ODD KEY          WHY",
	}
	if len(lines) != 8 {
		t.Fatalf("get plans printed %d lines; want 8:\n%s", len(lines), out)
	}
	for i, w := range want {
		if strings.TrimRight(lines[i], " ") != strings.TrimRight(w, " ") {
			t.Errorf("line %d = %q; want %q", i, lines[i], w)
		}
	}
	for i, w := range []string{
		`ace              key out of shape: mesh: key "ace": has 1 tokens; want 2`,
		`ace.vaultwarden  value does not decode: invalid character 'o' in literal null (expecting 'u')`,
		`g14.grafana      value is of prometheus on g14, not of its key`,
	} {
		if lines[5+i] != w {
			t.Errorf("odd line %d = %q; want %q", i, lines[5+i], w)
		}
	}

	// Narrowed to ace: gitea, and the odd keys under ace. (The key "ace",
	// out of shape, is not read: --node reads <node>.> alone.)
	out, _, err = run(t, "get", "plans", "--node", "ace", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ace   gitea   b7c100") || strings.Contains(out, "postgres  3f2a91") || strings.Contains(out, "g14.grafana") {
		t.Errorf("get plans --node ace:\n%s", out)
	}
	if !strings.Contains(out, "ace.vaultwarden  value does not decode") || strings.Contains(out, "key out of shape") {
		t.Errorf("get plans --node ace hides an odd key:\n%s", out)
	}
}

func TestGetProvisions(t *testing.T) {
	clock = func() time.Time { return time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC) }
	t.Cleanup(func() { clock = time.Now })
	s := bustest.Server(t)
	seatKeys(t, s)
	out, _, err := run(t, "get", "provisions", "-o", "wide", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	want := `NODE     KEY                        STATE                     FOR  PROVIDER             WHY
ace      ace.gitea.database.main    asked                     3h   postgres@control     waits for postgres on control to answer
ace      ace.gitea.route            provided                  3h   route-proxy@control  -
control  control.keycloak.database  failed                    3h   postgres@control     postgres said: role exists
shanks   shanks.immich.cache        retiring (not asked yet)  3h   redis@control        no build wanted or placed on shanks requires cache of redis on control any more

ODD KEY  WHY
Bad.key  key out of shape: mesh: key "Bad.key": has 2 tokens; want 3 to 4
`
	if out != want {
		t.Errorf("get provisions =\n%s\nwant\n%s", out, want)
	}

	// --module postgres: postgres's provisions as provider.
	out, _, err = run(t, "get", "provisions", "--module", "postgres", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ace.gitea.database.main") || !strings.Contains(out, "control.keycloak.database") || strings.Contains(out, "ace.gitea.route ") || strings.Contains(out, "shanks.immich") {
		t.Errorf("get provisions --module postgres:\n%s", out)
	}
	// --node control: only the keys of control (its consumers), not the
	// keys of other nodes whose provider is on control; it reads only
	// control's subjects, so the odd Bad.key (under no node control) is
	// listed by the get that is not narrowed, above.
	out, _, err = run(t, "get", "provisions", "--node", "control", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if want := `NODE     KEY                        STATE   FOR  PROVIDER          WHY
control  control.keycloak.database  failed  3h   postgres@control  postgres said: role exists
`; out != want {
		t.Errorf("get provisions --node control =\n%s\nwant\n%s", out, want)
	}
	out, _, err = run(t, "get", "provisions", "--node", "shanks", "--module", "immich", "-o", "json", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]mesh.Provision
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("get -o json printed %q: %v", out, err)
	}
	p, ok := got["shanks.immich.cache"]
	if !ok || p.State != mesh.Retiring || p.Provider != (mesh.Ref{Module: "redis", Node: "control"}) {
		t.Errorf("get -o json = %+v", got)
	}
	if _, ok := got["Bad.key"]; ok || len(got) != 1 {
		t.Errorf("get -o json has %d keys; want only shanks.immich.cache (the odd Bad.key said on stderr)", len(got))
	}
}

func TestGetRefusedJSON(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	seatKeys(t, s)
	out, errOut, err := run(t, "get", "refused", "-o", "json", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("get refused -o json printed %q: %v", out, err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, got["ace.vaultwarden"]); err != nil {
		t.Fatal(err)
	}
	if want := `{"node":"ace","module":"vaultwarden","why":"its want names build 4a4a4b, which is not known","since":"2026-11-30T03:00:00Z"}`; compact.String() != want {
		t.Errorf("ace.vaultwarden = %s; want %s (as stored)", compact.String(), want)
	}
	if _, ok := got["g14.grafana"]; ok {
		t.Errorf("g14.grafana = %s in the object; want the undecodable value left out, said on stderr", got["g14.grafana"])
	}
	if !strings.Contains(errOut, "get: odd key g14.grafana: value does not decode") || !strings.Contains(errOut, `(value "{\"node\":")`) {
		t.Errorf("stderr = %q; want the odd key said", errOut)
	}

	out, _, err = run(t, "get", "refused", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ace   vaultwarden  its want names build 4a4a4b, which is not known  2026-11-30T03:00:00Z") {
		t.Errorf("get refused =\n%s", out)
	}
}

func TestGetEmptyAndUsage(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	out, errOut, err := run(t, "get", "plans", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if out != "no plans\n" || !strings.Contains(errOut, "bucket mesh-provisioner_plans does not exist yet") {
		t.Errorf("get plans on an empty mesh = %q, %q", out, errOut)
	}
	_, _, err = run(t, "get", "nonsense", "--nats", s.URL())
	if !isUsage(err) || !strings.Contains(err.Error(), "plans, provisions, refused") {
		t.Errorf("get nonsense = %v; want a usage error naming the kinds", err)
	}
	_, _, err = run(t, "get", "plans", "-o", "xml", "--nats", s.URL())
	if err == nil || !isUsage(err) {
		t.Errorf("get -o xml = %v; want a usage error", err)
	}
	_, _, err = run(t, "get", "provisions", "--node", "NoSuch", "--nats", s.URL())
	if !isUsage(err) || !strings.Contains(err.Error(), `--node "NoSuch" is no node's name`) {
		t.Errorf("get --node NoSuch = %v; want a usage error saying it is no node's name", err)
	}
}
