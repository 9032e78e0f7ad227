package access_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
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
		{"client-ace", access.Write, "mesh-provisioner_applied", "ace.grafana", false},
		{"client-ace", access.Write, "mesh-provisioner_applied", "ace.x", false},
		{"client-ace", access.Write, "mesh-provisioner_collect", "ace.shell=3Azsh=3Anormal.node-tools", true},
		{"client-ace", access.Write, "mesh-provisioner_collect", "ace.environment.node-tools", true},
		{"client-ace", access.Write, "mesh-provisioner_collect", "ace.environment.gitea", false},
		{"client-ace", access.Write, "mesh-provisioner_collect", "ace.x.node-tools", false},
		{"client-ace", access.Read, "mesh-provisioner_plans", "ace.>", true},
		{"client-ace", access.Read, "mesh-provisioner_plans", ">", false},
		{"client-ace", access.Read, "postgres_bound", "ace.>", true},
		{"postgres", access.Write, "postgres_bound", "ace.gitea.database.main", true},
		{"postgres", access.Write, "keycloak_bound", "ace.x.oidc-client", false},
		{"postgres", access.Write, "mesh-provisioner_provisions", "ace.gitea.database", false},
		{"redis", access.Read, "mesh-provisioner_plans", ">", false},
		{"gitea", access.Ask, "mesh-vault.secret.gitea.gitea", "", true},
		{"gitea", access.Ask, "mesh-vault.secret.gitea.client-ace", "", false},
		{"gitea", access.Ask, "mesh-vault.secret.keycloak.gitea", "", false},
		{"client-ace", access.Ask, "mesh-vault.secret.gitea.client-ace", "", true},
		{"client-ace", access.Ask, "mesh-vault.secret.gitea.gitea", "", false},
		{"client-ace", access.Ask, "mesh-vault.secret.gitea.client-g14", "", false},
		{"client-control", access.Ask, "mesh-vault.secret.gitea.client-control", "", false},
		{"client-control", access.Ask, "mesh-vault.consumers.postgres.client-control", "", true},
		{"client-control", access.Ask, "mesh-vault.consumers.postgres.postgres", "", false},
		{"postgres", access.Ask, "mesh-vault.consumers.postgres.postgres", "", true},
		{"operator", access.Ask, "mesh-asks.answer.operator", "", true},
		{"client-ace", access.Ask, "mesh-asks.answer.client-ace", "", false},
		{"mesh-vault", access.Answer, "mesh-vault.secret.*.*", "", true},
		{"operator", access.Answer, "mesh-vault.secret.*.*", "", false},
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
// whole stream, and it reads its own inbox.
func TestScopedReadersNeverGetBareGets(t *testing.T) {
	for user, p := range homelab(t) {
		if p.Has(access.Seat) || p.Has(access.Operator) {
			continue
		}
		for _, s := range p.Permissions().Publish {
			if strings.Contains(s, "MSG.GET") || strings.HasPrefix(s, "$JS.API.DIRECT.GET.") && strings.Count(s, ".") == 4 {
				t.Errorf("%s may publish %s", user, s)
			}
		}
		if subs := p.Permissions().Subscribe; !slices.Contains(subs, "_INBOX_"+user+".>") {
			t.Errorf("%s subscribes %v; want its inbox _INBOX_%s.>", user, subs, user)
		}
	}
}

// TestScopedReadersMakeNoConsumer checks that no party but the seat and
// the operators may use the consumer API at all (a party that may create
// a consumer under one name may make a direct sourcing one, which the
// server renames and counts nowhere), and that each scoped read rule
// becomes exactly the seat's watch verb of its keys in the requests
// account: the permission is the server's check of what the seat is asked
// to watch.
func TestScopedReadersMakeNoConsumer(t *testing.T) {
	for user, p := range homelab(t) {
		if p.Has(access.Seat) || p.Has(access.Operator) {
			continue
		}
		for _, acc := range access.Accounts {
			for _, s := range p.PermissionsIn(acc).Publish {
				if strings.Contains(s, "CONSUMER") {
					t.Errorf("%s may publish %s in %s; want no consumer API", user, s, acc)
				}
			}
		}
		var want []string
		for _, r := range p.Rules() {
			if r.Act == access.Read {
				want = append(want, access.WatchVerb+"."+user+"."+r.Target+"."+r.Keys)
			}
		}
		var got []string
		for _, s := range p.PermissionsIn(access.Requests).Publish {
			if strings.HasPrefix(s, access.WatchVerb+".") {
				got = append(got, s)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, slices.Compact(want)) || len(want) == 0 && p.ScopedReader() {
			t.Errorf("%s may ask watches of %v; want those of its reads %v", user, got, want)
		}
	}
}

// TestWatchSubjects checks the watch verb's subjects both ways: the
// asker's name comes first, a last ">" is written "=", and a pattern a
// scoped watch cannot take is refused.
func TestWatchSubjects(t *testing.T) {
	for _, tt := range []struct{ user, bucket, pattern, subject string }{
		{"client-ace", "mesh-provisioner_plans", "ace.>", "mesh-provisioner.watch.client-ace.mesh-provisioner_plans.ace.="},
		{"mesh-asks", "mesh-asks_records", ">", "mesh-provisioner.watch.mesh-asks.mesh-asks_records.="},
		{"client-ace", "mesh-provisioner_clients", "ace", "mesh-provisioner.watch.client-ace.mesh-provisioner_clients.ace"},
		{access.NoUser, "mesh-provisioner_collect", "ace.shell=3Azsh.gitea", "mesh-provisioner.watch._.mesh-provisioner_collect.ace.shell=3Azsh.gitea"},
	} {
		got, err := access.WatchSubject(tt.user, tt.bucket, tt.pattern)
		if err != nil || got != tt.subject {
			t.Errorf("WatchSubject(%s, %s, %s) = %q, %v; want %q", tt.user, tt.bucket, tt.pattern, got, err, tt.subject)
			continue
		}
		u, b, pat, err := access.ParseWatchSubject(got)
		if err != nil || u != tt.user || b != tt.bucket || pat != tt.pattern {
			t.Errorf("ParseWatchSubject(%s) = %s, %s, %s, %v; want %s, %s, %s", got, u, b, pat, err, tt.user, tt.bucket, tt.pattern)
		}
		// The permission of the rule's keys matches the subject asked.
		if !access.Matches(access.WatchVerb+"."+tt.user+"."+tt.bucket+"."+tt.pattern, got) {
			t.Errorf("the permission of %s %s %s does not match its subject %s", tt.user, tt.bucket, tt.pattern, got)
		}
	}
	for _, tt := range []struct{ user, bucket, pattern string }{
		{"u", "plans", "ace.*"}, {"u", "plans", ">.ace"}, {"u", "plans", "ace..x"}, {"u", "plans", "="}, {"u", "pla.ns", "ace"},
		{"u", "", "ace"}, {"", "plans", "ace"}, {"u.v", "plans", "ace"}, {"*", "plans", "ace"},
	} {
		if got, err := access.WatchSubject(tt.user, tt.bucket, tt.pattern); err == nil {
			t.Errorf("WatchSubject(%q, %q, %q) = %q; want an error", tt.user, tt.bucket, tt.pattern, got)
		}
	}
	for _, s := range []string{"mesh-provisioner.watch.u.plans", "mesh-provisioner.watch.plans.a", "mesh-provisioner.watch.u.plans.=.ace",
		"mesh-provisioner.watch.u.plans.a.*", "mesh-provisioner.other.u.plans.a"} {
		if u, b, p, err := access.ParseWatchSubject(s); err == nil {
			t.Errorf("ParseWatchSubject(%q) = %s, %s, %s; want an error", s, u, b, p)
		}
	}
	// A user's permission never matches another's watch.
	if access.Matches("mesh-provisioner.watch.client-ace.mesh-provisioner_plans.ace.>", "mesh-provisioner.watch.client-g14.mesh-provisioner_plans.ace.=") {
		t.Error("client-ace's watch permission matches client-g14's watch")
	}
	// An exact key's permission never matches the rest of its keys.
	if access.Matches("mesh-provisioner.watch.client-ace.mesh-provisioner_clients.ace", "mesh-provisioner.watch.client-ace.mesh-provisioner_clients.=") {
		t.Error("the permission of the key ace matches a watch of every key")
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
		"mesh-asks":        {access.Storage, access.Services, access.Requests},
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
	if got := ps["mesh-vault"].PermissionsIn(access.Services).Subscribe; !slices.Equal(got, []string{access.ConsumersWild, access.Rotate, access.SecretWildcard}) {
		t.Errorf("mesh-vault in services subscribes to %v; want its three verbs only", got)
	}
	verbs := access.Verbs()
	for _, v := range []string{access.SecretWildcard, access.Rotate, access.AsksWildcard, access.Unkeep, access.Provisioning, access.ListAsks} {
		if !slices.Contains(verbs, v) {
			t.Errorf("Verbs = %v; want %s among them", verbs, v)
		}
	}
}

// TestAccountsAreThoseOfTheRules checks that every party's accounts are
// storage, requests for a client or a module, and the account of each of
// its rules (Accounts finds them without filling every rule): a scoped
// read is asked of the seat in requests.
func TestAccountsAreThoseOfTheRules(t *testing.T) {
	for user, p := range homelab(t) {
		want := []access.Account{access.Storage}
		if p.Has(access.Client) || p.Has(access.Module) {
			want = append(want, access.Requests)
		}
		for _, r := range p.Rules() {
			a := access.Storage
			switch {
			case r.Act == access.Read && r.Target != access.AnyBucket:
				want = append(want, access.Requests)
			case r.Act == access.Ask:
				a = access.Requests
			case r.Act == access.Answer:
				a = access.Services
			}
			want = slices.Compact(slices.Sorted(slices.Values(want)))
			if !slices.Contains(want, a) {
				want = append(want, a)
			}
		}
		got := p.Accounts()
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
			t.Errorf("accounts of %s = %v; want those of its rules %v", user, got, want)
		}
	}
}

// TestClientOfAnEmptyNodeHasARequestsUserDeniedEverything checks that the
// client of a node where nothing is placed (and a module that asks
// nothing) still has a user in the requests account, which its component
// dials whenever it starts, and that this user may publish nothing but
// the watches of its reads and subscribe to its own inbox only; once a
// module is placed, the same client may ask that module's secrets there.
func TestClientOfAnEmptyNodeHasARequestsUserDeniedEverything(t *testing.T) {
	m := access.Mesh{Nodes: []string{"ace", "dell"}, Modules: []string{"app"}, Placement: map[string][]string{"ace": {"app"}}}
	ps, err := access.Parties(m)
	if err != nil {
		t.Fatal(err)
	}
	byUser := map[string]access.Party{}
	for _, p := range ps {
		byUser[p.User] = p
	}
	dell := byUser["client-dell"]
	if got, want := dell.Accounts(), []access.Account{access.Storage, access.Requests}; !slices.Equal(got, want) {
		t.Fatalf("accounts of client-dell (nothing placed) = %v; want %v", got, want)
	}
	perm := dell.PermissionsIn(access.Requests)
	for _, s := range perm.Publish {
		if !strings.HasPrefix(s, access.WatchVerb+".") {
			t.Errorf("client-dell in requests may publish %s; want its watches only", s)
		}
	}
	if perm.Responses || !slices.Equal(perm.Subscribe, []string{access.InboxPrefix("client-dell") + ".>"}) {
		t.Errorf("client-dell in requests: %+v; want no replies, its inbox only", perm)
	}
	if got := byUser["client-ace"].PermissionsIn(access.Requests).Publish; !slices.Contains(got, "mesh-vault.secret.app.client-ace") {
		t.Errorf("client-ace (app placed) in requests may publish nothing; want app's asks")
	}
}

// TestClientsFitTheSharedBuckets checks that the buckets every client
// writes beside the others (applied, collect, the leases) hold every
// client's keys at their value bound, as the store counts them (value,
// subject and 30 bytes each), for the homelab and for a mesh of 1,000
// nodes with four modules each, every one contributing to one collection:
// one client filling its keys takes nothing another may write.
func TestClientsFitTheSharedBuckets(t *testing.T) {
	big := access.Mesh{Placement: map[string][]string{}, Contributes: map[string][]string{}}
	for m := range 4 {
		mod := fmt.Sprintf("module-%d", m)
		big.Modules = append(big.Modules, mod)
		big.Contributes[mod] = []string{"shell:zsh:normal"}
	}
	for n := range 1000 {
		node := fmt.Sprintf("node-%04d", n)
		big.Nodes = append(big.Nodes, node)
		big.Placement[node] = big.Modules
	}
	bigParties, err := access.Parties(big)
	if err != nil {
		t.Fatal(err)
	}
	for name, parties := range map[string][]access.Party{"homelab": slices.Collect(maps.Values(homelab(t))), "1,000 nodes": bigParties} {
		held := map[string]int64{}
		keys := map[string]int{}
		for _, p := range parties {
			if !p.Has(access.Client) {
				continue
			}
			for _, r := range p.Rules() {
				if r.Act != access.Write {
					continue
				}
				if strings.ContainsAny(r.Keys, "*>") {
					t.Fatalf("%s: %s may write %s %s: a pattern, not one key", name, p.User, r.Target, r.Keys)
				}
				_, maxValue := access.BucketLimits(r.Target)
				held[r.Target] += int64(maxValue) + 30 + int64(len("$KV."+r.Target+"."+r.Keys))
				keys[r.Target]++
			}
		}
		for _, b := range []string{mesh.AppliedBucket, mesh.CollectBucket, mesh.ClientsBucket} {
			maxBytes, _ := access.BucketLimits(b)
			if keys[b] == 0 || held[b] > maxBytes {
				t.Errorf("%s: the clients hold at most %d bytes of %s in %d keys; want some, within its bound %d", name, held[b], b, keys[b], maxBytes)
			}
		}
	}
}

// TestHeldKeysAreTheNodesOwn checks that a node's held keys give its
// client those exact keys to write, and never a key of another node or a
// pattern.
func TestHeldKeysAreTheNodesOwn(t *testing.T) {
	ps, err := access.Parties(access.Mesh{Nodes: []string{"ace", "g14"}, Modules: []string{"gitea"},
		Placement: map[string][]string{"ace": {}, "g14": {"gitea"}},
		Held: map[string]access.HeldKeys{"ace": {Applied: []string{"ace.gitea", "g14.gitea", "ace.>", "ace.*"},
			Collect: []string{"ace.environment.gitea"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var ace access.Party
	for _, p := range ps {
		if p.User == "client-ace" {
			ace = p
		}
	}
	for _, c := range []struct {
		bucket, key string
		want        bool
	}{
		{"mesh-provisioner_applied", "ace.gitea", true},
		{"mesh-provisioner_collect", "ace.environment.gitea", true},
		{"mesh-provisioner_applied", "g14.gitea", false},
		{"mesh-provisioner_applied", "ace.other", false},
		{"mesh-provisioner_collect", "ace.shell.gitea", false},
	} {
		if got := ace.Allows(access.Write, c.bucket, c.key); got != c.want {
			t.Errorf("client-ace writes %s %s: %v; want %v", c.bucket, c.key, got, c.want)
		}
	}
	for _, s := range ace.Permissions().Publish {
		if strings.HasPrefix(s, "$KV.") && strings.ContainsAny(s, "*>") && !strings.Contains(s, "CONSUMER") {
			t.Errorf("client-ace may publish %s: a pattern of keys", s)
		}
	}
}
