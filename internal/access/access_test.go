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
		{"operator", access.Make, "anything", "", true},
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

// TestRespondersMayPublishTheAcksOfWhatTheyRead checks the ack subjects:
// a party that may reply may publish the acks of exactly the buckets it
// reads (so that the server keeps no reply permission per delivered
// message), and a party that may not reply gets none.
func TestRespondersMayPublishTheAcksOfWhatTheyRead(t *testing.T) {
	ps := homelab(t)
	for user, want := range map[string][]string{
		"mesh-provisioner": {"$JS.ACK.*.>"},
		"mesh-asks":        {"$JS.ACK.KV_mesh-asks_records.>"},
		"redis":            nil,
		"client-ace":       nil,
	} {
		p := ps[user]
		var acks []string
		for _, s := range p.Permissions().Publish {
			if strings.HasPrefix(s, "$JS.ACK.") {
				acks = append(acks, s)
			}
		}
		if !slices.Equal(acks, want) {
			t.Errorf("%s may publish acks %v; want %v", user, acks, want)
		}
	}
	vault := ps["mesh-vault"].Permissions()
	if !vault.Responses {
		t.Fatal("mesh-vault may not reply; want it to (it answers its verbs)")
	}
	for _, r := range ps["mesh-vault"].Rules() {
		if r.Act != access.Read {
			continue
		}
		if ack := "$JS.ACK.KV_" + r.Target + ".>"; !slices.Contains(vault.Publish, ack) {
			t.Errorf("mesh-vault reads %s but may not publish %s", r.Target, ack)
		}
	}
}
