package access_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

func homelab(t *testing.T) map[string]access.Party {
	t.Helper()
	f, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := access.Parties(auth.MeshOf(f, nil))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]access.Party{}
	for _, p := range ps {
		out[p.User] = p
	}
	return out
}

func TestPartiesOfHomelab(t *testing.T) {
	ps := homelab(t)
	for user, roles := range map[string][]access.Role{
		"mesh-provisioner": {access.Seat},
		"mesh-asks":        {access.Router},
		"mesh-vault":       {access.Module, access.Provider, access.Vault},
		"postgres":         {access.Module, access.Provider},
		"redis":            {access.Module},
		"client-ace":       {access.Client},
		"operator":         {access.Operator},
	} {
		if got := ps[user].Roles; !slices.Equal(got, roles) {
			t.Errorf("roles of %s = %v; want %v", user, got, roles)
		}
	}
}

func TestAllows(t *testing.T) {
	ps := homelab(t)
	tests := []struct {
		user   string
		act    access.Act
		target string
		key    string
		want   bool
	}{
		{"mesh-provisioner", access.Write, "mesh-provisioner_plans", "ace.gitea", true},
		{"operator", access.Write, "mesh-provisioner_plans", "ace.gitea", false},
		{"client-ace", access.Write, "mesh-provisioner_applied", "ace.gitea", true},
		{"client-ace", access.Write, "mesh-provisioner_applied", "g14.gitea", false},
		{"client-ace", access.Read, "mesh-provisioner_plans", "ace.>", true},
		{"client-ace", access.Read, "mesh-provisioner_plans", ">", false},
		{"client-ace", access.Read, "postgres_bound", "ace.>", true},
		{"postgres", access.Write, "postgres_bound", "ace.gitea.database.main", true},
		{"postgres", access.Write, "keycloak_bound", "ace.x.oidc-client", false},
		{"postgres", access.Write, "mesh-provisioner_provisions", "ace.gitea.database", false},
		{"redis", access.Read, "mesh-provisioner_plans", ">", false},
		{"gitea", access.Ask, "mesh-vault.secret.gitea", "", true},
		{"gitea", access.Ask, "mesh-vault.secret.keycloak", "", false},
		{"client-ace", access.Ask, "mesh-vault.secret.gitea", "", true},
		{"client-control", access.Ask, "mesh-vault.secret.gitea", "", false},
		{"client-control", access.Ask, "mesh-vault.consumers.postgres", "", true},
		{"operator", access.Ask, "mesh-asks.answer.operator", "", true},
		{"client-ace", access.Ask, "mesh-asks.answer.client-ace", "", false},
		{"mesh-vault", access.Answer, "mesh-vault.secret.*", "", true},
		{"operator", access.Answer, "mesh-vault.secret.*", "", false},
		{"operator", access.Make, "anything", "", false},
		{"operator", access.Make, "mesh-controller_placement", "", false},
		{"client-ace", access.Make, "mesh-provisioner_clients", "", false},
		{"mesh-provisioner", access.Make, "mesh-provisioner_clients", "", true},
		{"mesh-provisioner", access.Make, "mesh-controller_placement", "", true},
		{"postgres", access.Make, "postgres_bound", "", false},
		{"mesh-provisioner", access.Make, "postgres_bound", "", true},
	}
	for _, tt := range tests {
		p, ok := ps[tt.user]
		if !ok {
			t.Fatalf("no party %s", tt.user)
		}
		if got := p.Allows(tt.act, tt.target, tt.key); got != tt.want {
			t.Errorf("%s.Allows(%s, %s, %q) = %v; want %v", tt.user, tt.act, tt.target, tt.key, got, tt.want)
		}
	}
}

// TestScopedReadersNeverGetBareGets checks the expansion: a party that may
// read only some keys of a bucket gets no direct or message get of the
// whole stream, and no consumer without its filter.
func TestScopedReadersNeverGetBareGets(t *testing.T) {
	for user, p := range homelab(t) {
		if p.Has(access.Seat) || p.Has(access.Operator) {
			continue
		}
		for _, s := range p.Permissions().Publish {
			if strings.Contains(s, "MSG.GET") || strings.HasPrefix(s, "$JS.API.DIRECT.GET.") && strings.Count(s, ".") == 4 {
				t.Errorf("%s may publish %s", user, s)
			}
			if strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.KV_") && strings.HasSuffix(s, ".>") && !strings.Contains(s, "$KV.") {
				if r := strings.TrimPrefix(s, "$JS.API.CONSUMER.CREATE.KV_"); !p.Allows(access.Read, strings.TrimSuffix(r, ".>"), ">") {
					t.Errorf("%s may create any consumer: %s", user, s)
				}
			}
		}
		if subs := p.Permissions().Subscribe; !slices.Contains(subs, "_INBOX_"+user+".>") {
			t.Errorf("%s subscribes %v; want its inbox _INBOX_%s.>", user, subs, user)
		}
	}
}

func TestPartiesRefusesCollisions(t *testing.T) {
	tests := []struct {
		name string
		m    access.Mesh
		want string
	}{
		{"module named like a client", access.Mesh{Nodes: []string{"ace"}, Modules: []string{"client-ace"}}, `user "client-ace" would be both`},
		{"operator named like a module", access.Mesh{Modules: []string{"gitea"}, Operators: []string{"gitea"}}, `user "gitea" would be both`},
		{"module named like the router", access.Mesh{Modules: []string{"mesh-asks"}}, `module "mesh-asks"`},
		{"operator with a bad name", access.Mesh{Operators: []string{"Bob"}}, `user "Bob" is not a valid name`},
	}
	for _, tt := range tests {
		_, err := access.Parties(tt.m)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Parties = %v; want an error with %q", tt.name, err, tt.want)
		}
	}
}

// TestAccountsOfParties checks where each party has a user: storage for
// all, services for the responders alone (replying there only, to their
// verbs), requests for the askers; no user of storage or requests may
// reply, and none of services may publish.
func TestAccountsOfParties(t *testing.T) {
	ps := homelab(t)
	for user, want := range map[string][]access.Account{
		"mesh-provisioner": {access.Storage, access.Services, access.Requests},
		"mesh-asks":        {access.Storage, access.Services},
		"mesh-vault":       {access.Storage, access.Services, access.Requests},
		"redis":            {access.Storage, access.Requests},
		"client-ace":       {access.Storage, access.Requests},
		"operator":         {access.Storage, access.Requests},
	} {
		p := ps[user]
		if got := p.Accounts(); !slices.Equal(got, want) {
			t.Errorf("accounts of %s = %v; want %v", user, got, want)
		}
		for _, a := range access.Accounts {
			perm := p.PermissionsIn(a)
			if perm.Responses != (a == access.Services && slices.Contains(want, a)) {
				t.Errorf("%s in %s may reply: %v", user, a, perm.Responses)
			}
			if a == access.Services && len(perm.Publish) > 0 {
				t.Errorf("%s in %s may publish %v; want nothing", user, a, perm.Publish)
			}
			for _, s := range perm.Publish {
				if a == access.Requests && (strings.HasPrefix(s, "$") || strings.HasPrefix(s, "_")) {
					t.Errorf("%s in %s may publish %s; want verbs only", user, a, s)
				}
			}
		}
	}
	if got := ps["mesh-vault"].PermissionsIn(access.Services).Subscribe; !slices.Equal(got, []string{access.SecretWildcard, access.ConsumersWild, access.Rotate}) {
		t.Errorf("mesh-vault in services subscribes to %v; want its three verbs only", got)
	}
	verbs := access.Verbs()
	for _, v := range []string{access.SecretWildcard, access.Rotate, access.AsksWildcard, access.Unkeep, access.Provisioning, access.ListAsks} {
		if !slices.Contains(verbs, v) {
			t.Errorf("Verbs = %v; want %s among them", verbs, v)
		}
	}
}
