package assemble_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider/pgtest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestProvidersKeepRunningWhenTheirUsersAreIssuedAnew runs the homelab
// without gitea as up does with its users (the seat, the router, mesh-vault
// and the postgres provider, each its own user) and places gitea while
// mesh-vault's and postgres's users are issued anew: a new key each, their
// old JWTs revoked on the server. Both keep running (no stop, no start),
// reconnect with their new credentials files, and provide gitea's
// credentials and database; their old credentials are refused. Before, the
// follower stopped each and started it again "on its new credentials".
func TestProvidersKeepRunningWhenTheirUsersAreIssuedAnew(t *testing.T) {
	dsn := pgtest.DSN(t)
	without := bytes.Replace(examples.Homelab, []byte("ace: [gitea, vaultwarden, node-tools]"), []byte("ace: [vaultwarden, node-tools]"), 1)
	without = bytes.Replace(without, []byte("ace: {gitea: b7c100, "), []byte("ace: {"), 1)
	without = bytes.Replace(without, []byte("  ace:\n    gitea: {phase: starting, health: unknown, fp: b7c100}\n"), nil, 1)
	// Roles and databases of a mesh of this test's own on the shared server.
	name := fmt.Sprintf("reissue%d", time.Now().UnixNano()%1e9)
	parse := func(text []byte) *meshfile.File {
		t.Helper()
		f, err := meshfile.Parse("homelab.yaml", bytes.Replace(text, []byte("mesh: homelab"), []byte("mesh: "+name), 1))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// The same mesh, its placement of control in another order: a change
	// the follower steps on that changes no permission.
	reordered := bytes.Replace(without, []byte("control: [mesh-vault, postgres, "), []byte("control: [postgres, mesh-vault, "), 1)
	first, again, second := parse(without), parse(reordered), parse(examples.Homelab)
	if len(first.Placement["ace"]) != 2 {
		t.Fatalf("the homelab without gitea places %v on ace", first.Placement["ace"])
	}
	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, nil))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the mesh said:\n%s", said.text())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	data := assemble.Data(t.TempDir())
	m, err := assemble.OpenMachine(ctx, assemble.MachineConfig{Data: data, Listen: "127.0.0.1:0",
		File: second, Source: "homelab.yaml", Given: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); m.Assembly.Wait(); m.Close() })
	cfg := m.MeshConfig(assemble.Decision{Name: name}, dsn)
	users := &anewUsers{Users: cfg.Follow.Users, dir: data.Auth(), store: data.Store(), url: m.Server.URL()}
	cfg.Follow.Users = users
	var mu sync.Mutex
	var events []string
	cfg.Follow.Said = func(e assemble.Event) {
		mu.Lock()
		events = append(events, e.String())
		mu.Unlock()
	}
	run, err := m.Assembly.StartMesh(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	onc, ojs, err := m.Assembly.Connect(assemble.Component{Role: assemble.Operator})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onc.Close)
	provisions, err := ojs.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	provided := func(keys ...string) func() bool {
		return func() bool {
			for _, k := range keys {
				e, err := provisions.Get(ctx, k)
				if err != nil || !strings.Contains(string(e.Value()), `"state":"provided"`) {
					return false
				}
			}
			return true
		}
	}
	if _, err := meshfile.Apply(ctx, ojs, first, time.Now()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 60*time.Second, "vaultwarden's credential and keycloak's database provided",
		provided("ace.vaultwarden.credential.postgres_database", "control.keycloak.database"))
	running := run.Follower.Running()
	if !slices.Contains(running, assemble.Component{Role: assemble.Vault, Node: "control"}) ||
		!slices.Contains(running, assemble.Component{Role: assemble.Postgres, Node: "control"}) {
		t.Fatalf("the follower runs %v; want the vault and postgres on control", running)
	}
	old := map[string][]byte{}
	for _, u := range []string{access.VaultUser, "postgres"} {
		b, err := os.ReadFile(data.Creds(u))
		if err != nil {
			t.Fatal(err)
		}
		old[u] = b
	}
	mu.Lock()
	before := len(events)
	mu.Unlock()

	// The vault's and postgres's users issued anew at the follower's next
	// step; then gitea placed, for both to provide on their new users.
	users.anew(access.VaultUser, "postgres")
	if _, err := meshfile.Apply(ctx, ojs, again, time.Now()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 30*time.Second, "the users issued anew", func() bool { return users.done() == 2 })
	bustest.WaitFor(t, 30*time.Second, "the vault's and postgres's connections back on their new users", func() bool {
		return said.count(`msg="bus: reconnected" component=`+access.VaultUser+" ") > 0 &&
			said.count(`msg="bus: reconnected" component=postgres `) > 0
	})
	if _, err := meshfile.Apply(ctx, ojs, second, time.Now()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 60*time.Second, "gitea's credential and database provided", provided("ace.gitea.credential.postgres_database_main", "ace.gitea.database.main"))
	for _, u := range []string{access.VaultUser, "postgres"} {
		if now, _ := os.ReadFile(data.Creds(u)); bytes.Equal(now, old[u]) {
			t.Errorf("%s's credentials file was not written anew", u)
		}
		// Its old credentials are refused.
		path := filepath.Join(t.TempDir(), u+".creds")
		os.WriteFile(path, old[u], 0o600)
		if nc, _, err := bus.Connect(bus.Dial{URL: m.Server.URL(), Name: "old-" + u, Creds: path, Log: slog.New(slog.DiscardHandler)}); err == nil {
			nc.Close()
			t.Errorf("%s's old credentials still connect", u)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if after := events[before:]; len(after) > 0 {
		t.Errorf("the follower stopped or started components when their users were issued anew: %q", after)
	}
	if r := run.Follower.Running(); !slices.Equal(r, running) {
		t.Errorf("the follower runs %v; want %v", r, running)
	}
}

// anewUsers are up's users, with some issued anew at the next Issue: a
// new key each, its old JWTs revoked and the accounts pushed, as a user
// signed anew is (auth.Authority.Rotate), and named among the users
// changed.
type anewUsers struct {
	assemble.Users
	dir, store, url string

	mu      sync.Mutex
	pending []string
	rotated int
}

// anew issues users anew at the next Issue.
func (u *anewUsers) anew(users ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pending = append(u.pending, users...)
}

// done returns how many users were issued anew.
func (u *anewUsers) done() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.rotated
}

func (u *anewUsers) Issue(m access.Mesh) (changed, revoked []string, err error) {
	changed, revoked, err = u.Users.Issue(m)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil || len(u.pending) == 0 {
		return changed, revoked, err
	}
	a, err := auth.Open(u.dir, auth.Options{StoreDir: u.store, Source: "the live mesh"})
	if err != nil {
		return nil, nil, err
	}
	parties, err := access.Parties(m)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range parties {
		if !slices.Contains(u.pending, p.User) {
			continue
		}
		if _, err := a.Rotate(p); err != nil {
			return nil, nil, err
		}
		changed = append(changed, p.User)
		u.rotated++
	}
	u.pending = nil
	jwts, err := a.Accounts()
	if err != nil {
		return nil, nil, err
	}
	creds, err := a.SystemCreds()
	if err != nil {
		return nil, nil, err
	}
	nc, _, err := bus.Connect(bus.Dial{URL: u.url, Name: auth.PushUser, Creds: creds})
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return changed, revoked, bus.PushClaims(ctx, nc, jwts, 1)
}
