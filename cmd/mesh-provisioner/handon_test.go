package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider/pgtest"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// upLab is an up process running on a lab file, and the operator's view
// of its bus.
type upLab struct {
	t          *testing.T
	up         *process
	url        string
	data, dir  string
	auth       string
	opCreds    string
	provisions *bus.Copy
}

// startUpLab writes the lab file name (nodes, modules, placement) and runs
// up on it as a process of its own, with args after; it returns once up
// says it runs.
func startUpLab(t *testing.T, name, nodes, modules, placement string, args ...string) *upLab {
	t.Helper()
	l := &upLab{t: t, data: t.TempDir(), dir: t.TempDir()}
	first := l.file(name, nodes, modules, placement)
	l.up = start(t, "up", append([]string{"up", first, "--data", l.data, "--listen", "127.0.0.1:0", "--web", "", "--log-level", "warn"}, args...)...)
	waitFor(t, 90*time.Second, "up to run", []*process{l.up}, func() bool {
		if m := upURL.FindStringSubmatch(l.up.output()); m != nil {
			l.url = m[1]
		}
		return l.url != "" && strings.Contains(l.up.output(), "up: running")
	})
	l.auth = filepath.Join(l.data, "auth")
	l.opCreds = auth.CredsPath(l.auth, access.DefaultOperator)
	_, js := connectWait(t, bus.Dial{URL: l.url, Name: "test-operator", Creds: l.opCreds}, "")
	l.provisions = bus.Follow(bustest.Context(t), js, mesh.ProvisionsBucket, bus.Options{})
	<-l.provisions.Ready()
	return l
}

// file writes a lab file and returns its path.
func (l *upLab) file(name, nodes, modules, placement string) string {
	l.t.Helper()
	path := filepath.Join(l.dir, name)
	text := "nodes: [" + nodes + "]\n" + modules + "placement:\n" + placement
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		l.t.Fatal(err)
	}
	return path
}

// apply applies a lab file with "apply -f", a process of its own.
func (l *upLab) apply(name, nodes, modules, placement string) {
	l.t.Helper()
	path := l.file(name, nodes, modules, placement)
	cmd := exec.Command(os.Args[0], "apply", "-f", path, "--yes", "--nats", l.url, "--creds", l.opCreds)
	cmd.Env = append(os.Environ(), asMain+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("apply -f %s: %v\n%s", path, err, out)
	}
}

// provision returns the provision at key as the operator reads it (the
// zero provision when there is none).
func (l *upLab) provision(key string) mesh.Provision {
	it, ok := l.provisions.Get(key)
	var p mesh.Provision
	if !ok || json.Unmarshal(it.Value, &p) != nil {
		return mesh.Provision{}
	}
	return p
}

// wait waits for up to say want (a line of its output).
func (l *upLab) said(want string) {
	l.t.Helper()
	waitFor(l.t, 30*time.Second, "up to say "+want, []*process{l.up}, func() bool { return strings.Contains(l.up.output(), want) })
}

// askAs connects as user in the requests account (its credentials file of
// up's users).
func (l *upLab) askAs(user string) *nats.Conn {
	l.t.Helper()
	nc, _ := connectWait(l.t, bus.Dial{URL: l.url, Name: "test-" + user, Creds: auth.CredsPath(l.auth, user)}, access.Requests)
	return nc
}

// connectWait connects as d says (in the account in, when set, as
// [bus.ConnectIn] does), trying again while the bus gives an error it
// gives while it recovers or is slow ([bus.Transient]: a handshake cut by
// the 2 s connect timeout on a loaded machine), for up to a minute; the
// connection is closed when the test ends.
func connectWait(t *testing.T, d bus.Dial, in access.Account) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var nc *nats.Conn
	var js jetstream.JetStream
	said := ""
	bustest.WaitFor(t, time.Minute, "a connection as "+d.Name, func() bool {
		var err error
		if in != "" {
			nc, err = bus.ConnectIn(d, in)
		} else {
			nc, js, err = bus.Connect(d)
		}
		switch {
		case err == nil:
			return true
		case !bus.Transient(err):
			t.Fatalf("connect as %s: %v", d.Name, err)
		case err.Error() != said:
			said = err.Error()
			t.Logf("connect as %s: %v; trying again", d.Name, err)
		}
		return false
	})
	t.Cleanup(nc.Close)
	return nc, js
}

// TestUpMovesTheVaultWithItsStore moves mesh-vault from control to dell
// with "apply -f" under a running up (one machine): the vault on control
// stops, handing on, and the one on dell starts on the same store (up
// says it moved), so nothing is issued anew: the credential redis shares
// with its consumer keeps its generation 1 and its value (redis, asking
// the vault as itself, is answered the same value after the move), its
// provision provided by mesh-vault on dell, and up logs no lost store.
// Before, dell's vault started on an empty DATA/vault/dell, logged the
// store lost and issued generation 2.
func TestUpMovesTheVaultWithItsStore(t *testing.T) {
	t.Parallel() // its own up, data directory and ports (and mesh name on PostgreSQL)
	const nodes = "control, dell"
	l := startUpLab(t, "lab.yaml", nodes, labModules, "  control: [mesh-vault, redis, app]\n  dell: []\n")
	const cred = "control.redis.credential.redis_cache"
	procs := []*process{l.up}
	waitFor(t, 30*time.Second, cred+" provided by mesh-vault on control", procs, func() bool {
		p := l.provision(cred)
		return p.State == mesh.Provided && p.Provider.Node == "control" && p.Reference != nil
	})
	if g := l.provision(cred).Reference.Generation; g != 1 {
		t.Fatalf("%s at generation %d before the move; want 1", cred, g)
	}
	redis := l.askAs("redis")
	secrets := func() kit.VaultAnswer {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a, err := kit.AskSecrets(ctx, redis, "redis", kit.VaultRequest{})
		if err != nil {
			return kit.VaultAnswer{Error: err.Error()}
		}
		return a
	}
	before := secrets()
	if len(before.Credentials) != 1 || before.Credentials[0].Generation != 1 {
		t.Fatalf("redis is answered %+v before the move; want its one credential at generation 1", before)
	}

	l.apply("lab2.yaml", nodes, labModules, "  control: [redis, app]\n  dell: [mesh-vault]\n")
	l.said("stopped vault on control (mesh-vault is no longer placed on control; its work handed on)")
	l.said("started vault on dell (mesh-vault placed on dell; its store moved from control: the same values, nothing issued anew)")
	waitFor(t, 30*time.Second, cred+" provided by mesh-vault on dell", procs, func() bool {
		p := l.provision(cred)
		return p.State == mesh.Provided && p.Provider.Node == "dell"
	})
	if p := l.provision(cred); p.Reference == nil || p.Reference.Generation != 1 {
		t.Errorf("%s after the move: %+v; want its reference kept at generation 1", cred, p.Reference)
	}
	var after kit.VaultAnswer
	waitFor(t, 20*time.Second, "redis answered by the vault on dell", procs, func() bool {
		after = secrets()
		return after.Error == "" && len(after.Credentials) == 1
	})
	if after.Credentials[0].Generation != 1 || after.Credentials[0].Value != before.Credentials[0].Value {
		t.Errorf("redis is answered generation %d after the move (value kept: %v); want generation 1, the same value",
			after.Credentials[0].Generation, after.Credentials[0].Value == before.Credentials[0].Value)
	}
	for _, bad := range []string{"the store holds no value", "this vault started on an empty store"} {
		if strings.Contains(l.up.output(), bad) {
			t.Errorf("up said %q on a move:\n%s", bad, l.up.output())
		}
	}
	if _, err := os.Stat(filepath.Join(l.data, "vault", "dell", "vault.store")); err != nil {
		t.Errorf("the store is not in DATA/vault/dell after the move: %v", err)
	}
}

// pgLabModules are the modules of TestUpPostgresPlacedAfterStart:
// mesh-vault, postgres (a database per consumer, its role's password the
// consumer's own credential) and app, which needs a database from it.
const pgLabModules = `modules:
  mesh-vault:
    builds:
      - fp: 9c0d51
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound, store],
                   reads: [mesh-provisioner.plans, mesh-provisioner.provisions], dirs: [{name: state, unknown: program}]}
  postgres:
    builds:
      - fp: 3f2a91
        manifest: {module: postgres, provides: [{name: database, credential: own, answered-by: helper}], state: [bound],
                   reads: [mesh-provisioner.plans, mesh-provisioner.provisions], dirs: [{name: state, unknown: program}], ports: [{name: pg}]}
  app:
    builds:
      - fp: a9a9a9
        manifest: {module: app, requires: [{provision: database, from: postgres}], dirs: [{name: state}]}
`

// TestUpPostgresPlacedAfterStart runs up --postgres (a real PostgreSQL
// server, MESH_TEST_POSTGRES_DSN) on a mesh that places no postgres, then,
// with "apply -f" and no restart:
//   - postgres and its consumer app placed on control: up starts the
//     postgres provider on control (says so), control.app.database turns
//     provided by postgres on control, and its role and database exist in
//     PostgreSQL, the role logging in with app's credential from the vault;
//   - postgres moved to dell: up stops control's provider, its work handed
//     on (says so), before it starts dell's; the key's entry kept its last
//     outcome (the role untouched: nothing retired without a warrant), and
//     dell's provider converges the same key to provided, its reference at
//     the same generation, the role still logging in with the same
//     credential;
//   - mesh-vault moved to dell too: the credential and the database keep
//     their generation, and the role logs in with what dell's vault
//     answers (its store moved with it).
func TestUpPostgresPlacedAfterStart(t *testing.T) {
	t.Parallel() // its own up, data directory and ports (and mesh name on PostgreSQL)
	bustest.Long(t, "that up starts, stops and moves the postgres provider and the vault as apply -f places them, each key provided at its generation and the role logging in throughout")
	dsn := pgtest.DSN(t)
	meshName := fmt.Sprintf("handon%d", time.Now().UnixNano()%1_000_000)
	modules := "mesh: " + meshName + "\n" + pgLabModules
	const nodes = "control, dell"
	l := startUpLab(t, "lab.yaml", nodes, modules, "  control: [mesh-vault]\n  dell: []\n", "--postgres", dsn)
	procs := []*process{l.up}
	if strings.Contains(l.up.output(), "postgres on") {
		t.Fatalf("up said:\n%s\nwant no postgres provider while postgres is not placed", l.up.output())
	}
	const key = "control.app.database"
	role := pgprovider.RoleName(meshName, mesh.ProvisionKey{Node: "control", Consumer: "app", Provision: "database"})
	admin, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{role}.Sanitize())
		admin.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
		admin.Close(ctx)
	})
	exists := func() (roleOK, dbOK bool) {
		ctx := context.Background()
		admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1 AND rolcanlogin)", role).Scan(&roleOK)
		admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", role).Scan(&dbOK)
		return roleOK, dbOK
	}
	app := l.askAs("app")
	login := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a, err := kit.AskSecrets(ctx, app, "app", kit.VaultRequest{})
		if err != nil {
			return err
		}
		if len(a.Credentials) != 1 {
			return fmt.Errorf("app is answered %d credentials: %s", len(a.Credentials), a.Error)
		}
		cc, err := pgx.ParseConfig(dsn)
		if err != nil {
			return err
		}
		cc.User, cc.Password, cc.Database = role, a.Credentials[0].Value, role
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}

	// Placed after start.
	l.apply("lab2.yaml", nodes, modules, "  control: [mesh-vault, postgres, app]\n  dell: []\n")
	l.said("started postgres on control (postgres placed on control)")
	waitFor(t, 30*time.Second, key+" provided by postgres on control", procs, func() bool {
		p := l.provision(key)
		return p.State == mesh.Provided && p.Provider.Node == "control" && p.Reference != nil
	})
	gen := l.provision(key).Reference.Generation
	if r, d := exists(); !r || !d {
		t.Fatalf("%s provided, but in PostgreSQL role %s exists (and logs in): %v, its database: %v", key, role, r, d)
	}
	if err := login(); err != nil {
		t.Fatalf("role %s with app's credential: %v", role, err)
	}

	// Moved to dell: control's provider hands on and stops first.
	l.apply("lab3.yaml", nodes, modules, "  control: [mesh-vault, app]\n  dell: [postgres]\n")
	stopped := "stopped postgres on control (postgres is no longer placed on control; its work handed on)"
	started := "started postgres on dell (postgres placed on dell)"
	l.said(started)
	out := l.up.output()
	if i, j := strings.Index(out, stopped), strings.Index(out, started); i < 0 || i > j {
		t.Errorf("up said:\n%s\nwant %q before %q", out, stopped, started)
	}
	waitFor(t, 30*time.Second, key+" provided by postgres on dell", procs, func() bool {
		p := l.provision(key)
		return p.State == mesh.Provided && p.Provider.Node == "dell"
	})
	if p := l.provision(key); p.Reference == nil || p.Reference.Generation != gen {
		t.Errorf("%s after the move: reference %+v; want generation %d kept", key, p.Reference, gen)
	}
	if r, d := exists(); !r || !d {
		t.Errorf("after the move role %s exists (and logs in): %v, its database: %v", role, r, d)
	}
	if err := login(); err != nil {
		t.Errorf("after the move, role %s with app's credential: %v", role, err)
	}
	if strings.Contains(l.up.output(), "stopped while it provided this key") {
		t.Errorf("control's provider was cut while it provided:\n%s", l.up.output())
	}

	// mesh-vault moved to dell too: its store moves with it, so app's
	// credential, and the password PostgreSQL holds, keep their
	// generation, and the role still logs in with what the vault answers.
	l.apply("lab4.yaml", nodes, modules, "  control: [app]\n  dell: [postgres, mesh-vault]\n")
	l.said("started vault on dell (mesh-vault placed on dell; its store moved from control: the same values, nothing issued anew)")
	cred := "control.app.credential.postgres_database"
	waitFor(t, 30*time.Second, cred+" provided by mesh-vault on dell", procs, func() bool {
		p := l.provision(cred)
		return p.State == mesh.Provided && p.Provider.Node == "dell"
	})
	if p := l.provision(cred); p.Reference == nil || p.Reference.Generation != gen {
		t.Errorf("%s after the vault's move: reference %+v; want generation %d kept", cred, p.Reference, gen)
	}
	if p := l.provision(key); p.State != mesh.Provided || p.Reference == nil || p.Reference.Generation != gen {
		t.Errorf("%s after the vault's move: %s, reference %+v; want provided at generation %d", key, p.State, p.Reference, gen)
	}
	waitFor(t, 20*time.Second, "role "+role+" to log in with app's credential from the vault on dell", procs, func() bool { return login() == nil })
	if strings.Contains(l.up.output(), "the store holds no value") {
		t.Errorf("up said a lost store on the vault's move:\n%s", l.up.output())
	}
}

// TestUpIssuesAnewAComponentWhoseAccessWasRemoved revokes the user of
// control's client from outside up (as "node leave" or another operator's
// push would) while the live mesh still places control: the client's
// connection is told its access was removed (bus.Dial.OnRemoved, which up
// did not set: before, the client reconnected for ever, refused, and
// nothing was said), so up stops it, saying so, issues client-control a
// new key (the revoked credentials stay refused) and starts it again; the
// client then applies what is placed on control next.
func TestUpIssuesAnewAComponentWhoseAccessWasRemoved(t *testing.T) {
	t.Parallel() // its own up, data directory and ports (and mesh name on PostgreSQL)
	const nodes = "control"
	l := startUpLab(t, "lab.yaml", nodes, labModules, "  control: [redis]\n")
	procs := []*process{l.up}
	nc, js, err := bus.Connect(bus.Dial{URL: l.url, Name: "test-reader", Creds: l.opCreds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	applied := bus.Follow(bustest.Context(t), js, mesh.AppliedBucket, bus.Options{})
	plans := bus.Follow(bustest.Context(t), js, mesh.PlansBucket, bus.Options{})
	appliedAt := func(key string) bool {
		pi, ok := plans.Get(key)
		ai, ok2 := applied.Get(key)
		var p mesh.Plan
		var a mesh.Applied
		return ok && ok2 && json.Unmarshal(pi.Value, &p) == nil && json.Unmarshal(ai.Value, &a) == nil && a.Fingerprint == p.Fingerprint
	}
	waitFor(t, 30*time.Second, "control's client to apply control.redis", procs, func() bool { return appliedAt("control.redis") })

	user := access.ClientUser("control")
	creds := auth.CredsPath(l.auth, user)
	old, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	outside := &assemble.GenUsers{Dir: l.auth, StoreDir: filepath.Join(l.data, "nats"), URL: l.url, Log: slog.New(slog.DiscardHandler)}
	if err := outside.Revoke(user); err != nil {
		t.Fatal(err)
	}
	l.said("client of control stopped (its access to the mesh was removed; its user is issued anew, as the live mesh still runs it)")
	l.said("started client of control (control is in the mesh)")
	waitFor(t, 20*time.Second, "a new "+creds, procs, func() bool {
		b, err := os.ReadFile(creds)
		return err == nil && string(b) != string(old)
	})
	oldPath := filepath.Join(t.TempDir(), "old.creds")
	if err := os.WriteFile(oldPath, old, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "client-control's old credentials refused", procs, refused(l.url, oldPath))

	l.apply("lab2.yaml", nodes, labModules, "  control: [redis, mesh-vault]\n")
	waitFor(t, 30*time.Second, "control's client, started again, to apply control.mesh-vault", procs, func() bool { return appliedAt("control.mesh-vault") })
}

// TestUpPostgresMovedMidWork places postgres with a consumer of 16
// databases and moves it to dell with "apply -f" while control's provider
// is making them: the test holds three of the roles in PostgreSQL (a
// transaction of its own that made them and has not ended, so the
// provider's CREATE ROLE of each waits on it, in hand), waits until
// control's provider has provided the 13 others, applies the move, and
// lets the three go. control's provider hands on (up says so, before
// dell's starts), and dell's converges every key to provided at its
// credential's generation; in PostgreSQL every role exists with its
// database and logs in with app's credential (nothing left half made).
func TestUpPostgresMovedMidWork(t *testing.T) {
	t.Parallel() // its own up, data directory and ports (and mesh name on PostgreSQL)
	bustest.Long(t, "that up hands postgres's work on when it moves to another node mid-work: every database made once and provided, nothing left half made")
	dsn := pgtest.DSN(t)
	meshName := fmt.Sprintf("midwork%d", time.Now().UnixNano()%1_000_000)
	const n = 16
	var locals []string
	for i := range n {
		locals = append(locals, fmt.Sprintf("{provision: database, from: postgres, local: d%02d}", i))
	}
	modules := "mesh: " + meshName + "\n" + strings.Replace(pgLabModules,
		"requires: [{provision: database, from: postgres}]", "requires: ["+strings.Join(locals, ", ")+"]", 1)
	const nodes = "control, dell"
	l := startUpLab(t, "lab.yaml", nodes, modules, "  control: [mesh-vault]\n  dell: []\n", "--postgres", dsn)
	procs := []*process{l.up}
	admin, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for i := range n {
		roles = append(roles, pgprovider.RoleName(meshName, mesh.ProvisionKey{Node: "control", Consumer: "app", Provision: "database", Local: fmt.Sprintf("d%02d", i)}))
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, r := range roles {
			admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{r}.Sanitize())
			admin.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize())
		}
		admin.Close(ctx)
	})

	// Three roles held: the provider's CREATE ROLE of each waits for this
	// transaction (it takes three of its four workers); closing the
	// connection ends it, should the test end first.
	const held = 3
	hold, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Close(context.Background()) })
	holdTx, err := hold.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles[n-held:] {
		if _, err := holdTx.Exec(context.Background(), "CREATE ROLE "+pgx.Identifier{r}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}

	l.apply("lab2.yaml", nodes, modules, "  control: [mesh-vault, postgres, app]\n  dell: []\n")
	l.said("started postgres on control (postgres placed on control)")
	key := func(i int) string { return fmt.Sprintf("control.app.database.d%02d", i) }
	providedBy := func(node string) (done int) {
		for i := range n {
			if p := l.provision(key(i)); p.State == mesh.Provided && p.Provider.Node == node {
				done++
			}
		}
		return done
	}
	waitFor(t, 90*time.Second, fmt.Sprintf("the %d keys not held provided by postgres on control", n-held), procs, func() bool {
		return providedBy("control") == n-held
	})
	l.apply("lab3.yaml", nodes, modules, "  control: [mesh-vault, app]\n  dell: [postgres]\n")
	for i := n - held; i < n; i++ {
		if p := l.provision(key(i)); p.State == mesh.Provided {
			t.Errorf("%s is provided while its role is held; want it in hand", key(i))
		}
	}
	// The three provides in hand go on: control's provider ends them
	// within its grace, and hands on.
	if err := holdTx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := "stopped postgres on control (postgres is no longer placed on control; its work handed on)"
	started := "started postgres on dell (postgres placed on dell)"
	l.said(started)
	if out := l.up.output(); strings.Index(out, stopped) < 0 || strings.Index(out, stopped) > strings.Index(out, started) {
		t.Errorf("up said:\n%s\nwant %q before %q", out, stopped, started)
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("the %d database keys provided by postgres on dell", n), procs, func() bool {
		for i := range n {
			if p := l.provision(key(i)); p.State != mesh.Provided || p.Provider.Node != "dell" {
				return false
			}
		}
		return true
	})
	app := l.askAs("app")
	ctx := context.Background()
	var a kit.VaultAnswer
	waitFor(t, 60*time.Second, fmt.Sprintf("app answered its %d credentials", n), procs, func() bool {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		a, err = kit.AskSecrets(actx, app, "app", kit.VaultRequest{})
		if err != nil {
			t.Logf("app asking its credentials: %v; asking again", err)
		}
		return err == nil && len(a.Credentials) == n
	})
	byName := map[string]kit.Credential{}
	for _, c := range a.Credentials {
		byName[c.Key] = c
	}
	for i := range n {
		p := l.provision(key(i))
		credKey := fmt.Sprintf("control.app.credential.postgres_database_d%02d", i)
		c, ok := byName[credKey]
		if !ok || p.Reference == nil || p.Reference.Generation != c.Generation {
			t.Errorf("%s is provided with %+v; want the generation of %s, %d (answered: %v)", key(i), p.Reference, credKey, c.Generation, ok)
			continue
		}
		var hasDB bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", roles[i]).Scan(&hasDB); err != nil || !hasDB {
			t.Errorf("role %s: its database exists %v (%v); want it", roles[i], hasDB, err)
			continue
		}
		if err := login(t, dsn, roles[i], c.Value); err != nil {
			t.Errorf("role %s: login with app's credential: %v", roles[i], err)
		}
	}
	if strings.Count(l.up.output(), "started postgres on") != 2 {
		t.Errorf("up said:\n%s\nwant postgres started twice (control, then dell)", l.up.output())
	}
}

// login logs in to PostgreSQL at dsn as role, to its database of the same
// name, with password, and returns the refusal when the server refuses it
// (a wrong password, no such role or database: PostgreSQL's own error).
// A try that ends without the server's word (a dial or the SCRAM exchange
// cut by its 20 s bound on a loaded machine) is tried again, for up to a
// minute.
func login(t *testing.T, dsn, role, password string) error {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cc.User, cc.Password, cc.Database = role, password, role
	var refused error
	said := ""
	bustest.WaitFor(t, time.Minute, "a login as "+role, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err == nil {
			conn.Close(ctx)
			return true
		}
		if _, ok := errors.AsType[*pgconn.PgError](err); ok {
			refused = err
			return true
		}
		if err.Error() != said {
			said = err.Error()
			t.Logf("login as %s: %v; trying again", role, err)
		}
		return false
	})
	return refused
}
