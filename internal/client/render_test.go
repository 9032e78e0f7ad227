package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/internal/registry"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func TestRender(t *testing.T) {
	values := map[string]string{"a:x": "1", "b:": "two", "c:d:e": "3"}
	lookup := func(kind, name string) (string, error) {
		if v, ok := values[kind+":"+name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("no %s %s", kind, name)
	}
	for _, tc := range []struct {
		name, in, want string
		bad            []client.Unresolved
	}{
		{"plain", "no placeholders", "no placeholders", nil},
		{"each form", "${a:x} ${b} ${c:d:e}", "1 two 3", nil},
		{"twice", "${a:x}${a:x}", "11", nil},
		{"dollars", "$$HOME $PATH ${a:x}$", "$HOME $PATH 1$", nil},
		{"every unresolved said once", "${a:y} ${Bad:x} ${a:y} ${a:x} ${open",
			"", []client.Unresolved{{"${a:y}", "no a y", false}, {"${Bad:x}", `kind "Bad" is not a valid kind ([a-z0-9-]+)`, false},
				{"${open", `"${" is not closed by "}"`, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := client.Render(tc.in, lookup)
			var re *client.RenderError
			switch {
			case tc.bad == nil && err != nil:
				t.Fatalf("Render(%q) = %v", tc.in, err)
			case tc.bad != nil && !errors.As(err, &re):
				t.Fatalf("Render(%q) = %q, %v; want a *RenderError", tc.in, got, err)
			case tc.bad != nil && !reflect.DeepEqual(re.Unresolved, tc.bad):
				t.Errorf("Render(%+v) unresolved = %+v; want %+v", tc.in, re.Unresolved, tc.bad)
			}
			if got != tc.want {
				t.Errorf("Render(%q) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

const giteaTemplate = `APP_NAME = gitea on ${machine-free:x}
[server]
DOMAIN = ${config:domain}
HTTP_PORT = ${port:http}
SSH_PORT = ${port:ssh}
APP_DATA_PATH = ${dir:state}
[repository]
ROOT = ${dir:repos}
TEMP_PATH = ${dir:tmp}
[database]
PASSWD_FROM = ${bound:database:main}
HOST = ${bound:database:main/host}:${bound:database:main/port}
NAME = ${bound:database:main/database}
USER = ${bound:database:main/role}
PASSWD = ${secret:postgres_database_main}
[oauth2_client]
FROM = ${bound:oidc-client}
[security]
SECRET_KEY = ${secret:secret-key}
[environment]
${environment}
${shell:zsh:normal}
`

func TestRenderGiteaThroughTheRegistry(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	seatNC, seat := bustest.Connect(t, s, "seat")
	reg := bus.Follow(ctx, seat, mesh.RegistryBucket, bus.Options{Create: true})
	<-reg.Ready()
	if _, err := registry.Sync(ctx, reg, registry.Compiled()); err != nil {
		t.Fatal(err)
	}
	plans := plansBucket(t, ctx, seat)
	all := homelabPlans()
	putPlan(t, ctx, plans, all[6]) // ace.gitea
	putPlan(t, ctx, plans, all[8]) // ace.node-tools

	// What other parts of the mesh hold: mesh-config's value, postgres's and
	// keycloak's entries, and the vault's secret verb.
	put := func(bucket, key, value string) {
		kv, err := bus.Bucket(ctx, seat, bucket, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	put("mesh-config_resolved", "ace.gitea.domain", `{"value":"git.example.org"}`)
	put("postgres_bound", "ace.gitea.database.main", `{"state":"provided","vault-name":"ace.gitea.credential.postgres_database_main","generation":2,`+
		`"connection":{"host":"127.0.0.1","port":"5432","database":"home_ace_gitea_main","role":"home_ace_gitea_main"}}`)
	put("keycloak_bound", "ace.gitea.oidc-client", `{"state":"waits","why":"waits for an operator to approve the client"}`)
	// The vault answers on mesh-vault.secret.<module>.<asker> what belongs
	// to the module (package kit's protocol): the client asks as itself.
	sub, err := seatNC.Subscribe(registry.SecretVerb+".*.*", func(m *nats.Msg) {
		var req struct{ Node string }
		json.Unmarshal(m.Data, &req)
		if m.Subject != "mesh-vault.secret.gitea.client-ace" || req.Node != "ace" {
			m.Respond([]byte(`{"error":"asked ` + m.Subject + ` for node ` + req.Node + `"}`))
			return
		}
		m.Respond([]byte(`{"secrets":[{"node":"ace","module":"gitea","name":"secret-key","vault-name":"v1","generation":1,"value":"s3cr3t"}],
			"credentials":[{"key":"ace.gitea.credential.postgres_database_main","vault-name":"v2","generation":2,"value":"pw"}]}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	root := filepath.Join(t.TempDir(), "ace")
	ace := start(t, s, "ace", root)
	bustest.WaitFor(t, 0, "the client to follow the registry and its contributions", func() bool {
		_, err := ace.Render(ctx, "gitea", "${dir:state}${environment}")
		return err == nil
	})
	app := reader(t, ctx, s, mesh.AppliedBucket)
	a, _ := applied(t, app, "ace.gitea")

	_, err = ace.Render(ctx, "gitea", giteaTemplate)
	var re *client.RenderError
	if !errors.As(err, &re) {
		t.Fatalf("Render(gitea) = %v; want a *RenderError", err)
	}
	wantBad := []client.Unresolved{
		{"${machine-free:x}", "the registry (mesh-provisioner_registry) has no kind machine-free", false},
		{"${bound:oidc-client}", "the entry ace.gitea.oidc-client in keycloak_bound is waits, not provided: waits for an operator to approve the client", true},
	}
	if !reflect.DeepEqual(re.Unresolved, wantBad) {
		t.Errorf("Render(gitea) unresolved = %+v; want %+v", re.Unresolved, wantBad)
	}

	put("keycloak_bound", "ace.gitea.oidc-client", `{"state":"provided","vault-name":"ace.gitea.credential.keycloak_oidc-client","generation":1}`)
	got, err := ace.Render(ctx, "gitea", strings.Replace(giteaTemplate, "${machine-free:x}", "ace", 1))
	if err != nil {
		t.Fatalf("Render(gitea) = %v; want every placeholder resolved", err)
	}
	want := fmt.Sprintf(`APP_NAME = gitea on ace
[server]
DOMAIN = git.example.org
HTTP_PORT = %d
SSH_PORT = %d
APP_DATA_PATH = %s
[repository]
ROOT = %s
TEMP_PATH = %s
[database]
PASSWD_FROM = ace.gitea.credential.postgres_database_main
HOST = 127.0.0.1:5432
NAME = home_ace_gitea_main
USER = home_ace_gitea_main
PASSWD = pw
[oauth2_client]
FROM = ace.gitea.credential.keycloak_oidc-client
[security]
SECRET_KEY = s3cr3t
[environment]
EDITOR=vi
export PATH=$PATH:/opt/node-tools/bin
`, a.Ports["http"], a.Ports["ssh"], filepath.Join(root, "gitea/state"), filepath.Join(root, "gitea/repos"), filepath.Join(root, "gitea/tmp"))
	if got != want {
		t.Errorf("Render(gitea) =\n%s\nwant\n%s", got, want)
	}

	// Every kind of failure is said, each with its why.
	_, err = ace.Render(ctx, "gitea", "${port:smtp} ${dir:state} ${secret:other} ${config:theme} ${bound:cache} ${collected:nothing} ${nope:x} ${port:smtp}")
	if !errors.As(err, &re) {
		t.Fatalf("Render(bad placeholders) = %v; want a *RenderError", err)
	}
	wantBad = []client.Unresolved{
		{"${port:smtp}", `mesh-provisioner_applied ace.gitea holds no ports named "smtp"`, false},
		{"${secret:other}", `mesh-vault.secret.gitea.client-ace answered no secret or credential named "other"`, false},
		{"${config:theme}", "mesh-config_resolved holds no key ace.gitea.theme", true},
		{"${bound:cache}", `the plan of gitea has no provision "cache" (write ${bound:<provision>} or ${bound:<provision>:<local>})`, false},
		{"${collected:nothing}", `node ace has no item in collection "nothing"`, false},
		{"${nope:x}", "the registry (mesh-provisioner_registry) has no kind nope", false},
	}
	if !reflect.DeepEqual(re.Unresolved, wantBad) {
		t.Errorf("Render(bad placeholders) unresolved =\n%+v\nwant\n%+v", re.Unresolved, wantBad)
	}

	// A verb answered in process, without the bus, by a read-only client
	// beside the node's client.
	other := start(t, s, "ace", root, func(c *client.Config) {
		c.ReadOnly = true
		c.NC = nil
		c.Verbs = map[string]client.VerbFunc{registry.SecretVerb: func(_ context.Context, subject, node, module, name string) (string, error) {
			return subject + "/" + node + "/" + module + "/" + name, nil
		}}
	})
	got, err = other.Render(ctx, "gitea", "${secret:secret-key} ${consumers:x}")
	if !errors.As(err, &re) || got != "" {
		t.Fatalf("Render(secret, consumers) = %q, %v; want a *RenderError for consumers", got, err)
	}
	wantBad = []client.Unresolved{{"${consumers:x}", "no way to ask the verb mesh-vault.consumers is configured (the client has no bus connection for it)", false}}
	if !reflect.DeepEqual(re.Unresolved, wantBad) {
		t.Errorf("Render(secret, consumers) unresolved = %+v; want %+v", re.Unresolved, wantBad)
	}
	got, err = other.Render(ctx, "gitea", "${secret:secret-key}")
	if want := "mesh-vault.secret/ace/gitea/secret-key"; got != want || err != nil {
		t.Errorf("Render(secret through Verbs) = %q, %v; want %q", got, err, want)
	}
}

func FuzzRender(f *testing.F) {
	for _, s := range []string{"", "plain", "${a:x} ${b} ${c:d:e}", "$$HOME ${open", "${Bad:x}", "$}{$", "${:}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := client.Render(in, func(kind, name string) (string, error) { return "<" + kind + "|" + name + ">", nil })
		if !strings.Contains(in, "$") && (got != in || err != nil) {
			t.Errorf("Render(%q) = %q, %v; want it unchanged", in, got, err)
		}
		var re *client.RenderError
		if err != nil && (!errors.As(err, &re) || len(re.Unresolved) == 0 || got != "") {
			t.Errorf("Render(%q) = %q, %v; want \"\" and a *RenderError listing what failed", in, got, err)
		}
	})
}
