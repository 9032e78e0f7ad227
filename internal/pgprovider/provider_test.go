package pgprovider_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider/pgtest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// fixture is a mesh of one node (named at random, so that tests sharing a
// server never meet) running mesh-vault and postgres, a seat written by
// kittest, and an admin connection to PostgreSQL.
type fixture struct {
	t     *testing.T
	mesh  string // the mesh's name, random unless given
	node  string
	url   string
	dsn   string
	seat  *kittest.Seat
	vault *vault.Vault
	admin *pgx.Conn
	conns map[string]*nats.Conn
	saids []*kittest.Said // one per start of the provider
	stop  context.CancelFunc
	// advertise is the provider's Config.Advertise at its next start.
	advertise string
}

func start(t *testing.T, dsn string) *fixture {
	t.Helper()
	return startMesh(t, dsn, randomName("m"), randomName("n"))
}

// randomName is prefix and 8 random hex digits.
func randomName(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// startMesh starts a mesh named meshName (its own NATS server, vault and
// provider) whose node is node, against the PostgreSQL server at dsn.
func startMesh(t *testing.T, dsn, meshName, node string) *fixture {
	t.Helper()
	f := &fixture{t: t, mesh: meshName, node: node, url: kittest.Server(t), dsn: dsn, conns: map[string]*nats.Conn{}}
	f.seat = kittest.NewSeat(t, f.url)
	f.seat.Judge(mesh.VaultModule, pgprovider.Module)
	nc, js := kittest.Connect(t, f.url, mesh.VaultModule)
	ctx := bustest.Context(t)
	vlog, _ := kittest.Log()
	// The seat makes every bucket before any component starts; the vault
	// follows the clients' applied records (a rotation waits for a node
	// whose record names the credential), and a copy of a bucket not made
	// yet catches up only at its next try, seconds later.
	if _, err := bus.Bucket(ctx, js, mesh.AppliedBucket, 0); err != nil {
		t.Fatal(err)
	}
	v, err := vault.Start(ctx, vault.Config{Dir: t.TempDir(), Node: f.node, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond}, nc, js, vlog)
	if err != nil {
		t.Fatal(err)
	}
	f.vault = v
	f.admin, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to PostgreSQL at %s: %v", dsn, err)
	}
	t.Cleanup(func() { f.admin.Close(context.Background()) })
	for _, m := range []string{"gitea", "vaultwarden"} {
		nc, _ := kittest.Connect(t, f.url, m)
		f.conns[m] = nc
	}
	f.startProvider(dsn)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("postgres said:\n%s", f.said())
		}
	})
	return f
}

// startProvider starts (or starts again) the provider of f's node.
func (f *fixture) startProvider(dsn string) {
	f.t.Helper()
	if f.stop != nil {
		f.stop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	f.stop = cancel
	nc, js := kittest.Connect(f.t, f.url, pgprovider.Module)
	log, said := kittest.Log()
	f.saids = append(f.saids, said)
	p, err := pgprovider.Start(ctx, pgprovider.Config{DSN: dsn, Node: f.node, Mesh: f.mesh, Timeout: 2 * time.Second, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Check: 50 * time.Millisecond, Advertise: f.advertise}, nc, js, log)
	if err != nil {
		f.t.Fatal(err)
	}
	<-p.Ready()
}

// said returns every line every start of the provider said.
func (f *fixture) said() string {
	var all []string
	for _, s := range f.saids {
		all = append(all, s.Lines())
	}
	return strings.Join(all, "\n")
}

func (f *fixture) ref(module string) mesh.Ref { return mesh.Ref{Module: module, Node: f.node} }

// need writes consumer's database provision (and its credential) as the
// seat composes them.
func (f *fixture) need(consumer, local string) (db, cred mesh.ProvisionKey) {
	key, p := kittest.Requirement(f.ref(consumer), pgprovider.Provision, local, f.ref(pgprovider.Module))
	ck, cp, p := kittest.Credential(key, p, f.ref(mesh.VaultModule))
	f.seat.Need(ck, cp)
	f.seat.Need(key, p)
	return key, ck
}

func (f *fixture) waitProvided(key mesh.ProvisionKey, ref mesh.Reference) {
	f.t.Helper()
	bustest.WaitFor(f.t, 20*time.Second, fmt.Sprintf("%s provided with %+v", key, ref), func() bool {
		p, ok := f.seat.Get(key)
		return ok && p.State == mesh.Provided && p.Reference != nil && *p.Reference == ref
	})
}

// password is what the vault answers consumer for its credential.
func (f *fixture) password(consumer string, cred mesh.ProvisionKey) kit.Credential {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := kit.AskSecrets(ctx, f.conns[consumer], consumer, kit.VaultRequest{Key: cred.String()})
	if err != nil || len(a.Credentials) != 1 {
		f.t.Fatalf("the vault answered %s %+v, %v; want its credential %s", consumer, a.Credentials, err, cred)
	}
	return a.Credentials[0]
}

// login connects to database as role with password; it returns the error.
func (f *fixture) login(role, password, database string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	cc.User, cc.Password, cc.Database = role, password, database
	return pgx.ConnectConfig(context.Background(), cc)
}

func (f *fixture) mustLogin(role, password, database string) *pgx.Conn {
	f.t.Helper()
	c, err := f.login(role, password, database)
	if err != nil {
		f.t.Fatalf("log in as %s to %s: %v; want it to succeed", role, database, err)
	}
	f.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func (f *fixture) refuseLogin(role, password, database, why string) {
	f.t.Helper()
	c, err := f.login(role, password, database)
	if err == nil {
		c.Close(context.Background())
		f.t.Fatalf("log in as %s to %s with %s succeeded; want it refused", role, database, why)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		f.t.Fatalf("log in as %s with %s: %v; want PostgreSQL's refusal", role, why, err)
	}
}

func (f *fixture) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.admin.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (f *fixture) owner(database string) string {
	f.t.Helper()
	var owner string
	if err := f.admin.QueryRow(context.Background(), `SELECT pg_get_userbyid(datdba)::text FROM pg_database WHERE datname = $1`, database).Scan(&owner); err != nil {
		f.t.Fatalf("owner of database %s: %v", database, err)
	}
	return owner
}

func TestDatabaseLogsInWithTheConsumersCredentialOnly(t *testing.T) {
	f := start(t, pgtest.DSN(t))
	db, cred := f.need("gitea", "main")
	_, other := f.need("vaultwarden", "")
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
	e, _ := kittest.Entry(t, mustJS(t, f.url), pgprovider.Module, db)
	role := f.mesh + "_" + f.node + "_gitea_main"
	if e.State != mesh.Provided || e.VaultName != cred.String() || e.Generation != 1 ||
		e.Connection["role"] != role || e.Connection["database"] != role || e.Connection["host"] == "" || e.Connection["port"] == "" {
		t.Errorf("entry at %s = %+v; want provided with %s generation 1, and its connection: host, port, database and role %s", db, e, cred, role)
	}
	if got := pgprovider.RoleName(f.mesh, db); got != role {
		t.Fatalf("RoleName(%s) = %s; want %s", db, got, role)
	}
	pw := f.password("gitea", cred)
	c := f.mustLogin(role, pw.Value, role)
	var user, database string
	c.QueryRow(context.Background(), `SELECT current_user::text, current_database()::text`).Scan(&user, &database)
	if user != role || database != role {
		t.Errorf("logged in as %s to %s; want %s to %s", user, database, role, role)
	}
	if o := f.owner(role); o != role {
		t.Errorf("database %s is owned by %s; want %s", role, o, role)
	}
	f.refuseLogin(role, "not-the-password", role, "a wrong password")
	f.waitProvided(mesh.ProvisionKey{Node: f.node, Consumer: "vaultwarden", Provision: "database"}, mesh.Reference{ID: other.String(), Generation: 1})
	theirs := f.password("vaultwarden", other)
	f.refuseLogin(role, theirs.Value, role, "vaultwarden's password")
	// vaultwarden's own role may not enter gitea's database either.
	f.refuseLogin(f.mesh+"_"+f.node+"_vaultwarden", theirs.Value, role, "vaultwarden's role")

	// Another module cannot read gitea's password through the vault.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := kit.AskSecrets(ctx, f.conns["vaultwarden"], "vaultwarden", kit.VaultRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range a.Credentials {
		if c.Value == pw.Value || c.Key == cred.String() {
			t.Errorf("vaultwarden got gitea's credential %s through mesh-vault.secret", c.Key)
		}
	}
	a, err = kit.AskConsumers(ctx, f.conns["vaultwarden"], "vaultwarden", kit.VaultRequest{Key: db.String()})
	if err != nil || len(a.Credentials) != 0 {
		t.Errorf("vaultwarden asking for postgres' consumers of its own = %+v, %v; want nothing", a.Credentials, err)
	}
}

func TestRotationChangesThePassword(t *testing.T) {
	f := start(t, pgtest.DSN(t))
	db, cred := f.need("gitea", "")
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
	old := f.password("gitea", cred)
	role := pgprovider.RoleName(f.mesh, db)
	f.mustLogin(role, old.Value, role)
	// Now: in force at once (see TestRotationReachesTheConsumer for the
	// grace that waits for the consumer's node).
	if _, err := f.vault.RotateNow(cred.String()); err != nil {
		t.Fatal(err)
	}
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 2})
	cur := f.password("gitea", cred)
	if cur.Generation != 2 || cur.Value == old.Value {
		t.Fatalf("after rotation the vault answers %+v; want a new value at generation 2", cur)
	}
	f.mustLogin(role, cur.Value, role)
	f.refuseLogin(role, old.Value, role, "the password of generation 1")
}

func TestRetireHandsTheDatabaseToTheOwner(t *testing.T) {
	f := start(t, pgtest.DSN(t))
	keep, keepCred := f.need("gitea", "keep")
	drop, dropCred := f.need("gitea", "drop")
	f.waitProvided(keep, mesh.Reference{ID: keepCred.String(), Generation: 1})
	f.waitProvided(drop, mesh.Reference{ID: dropCred.String(), Generation: 1})
	role := pgprovider.RoleName(f.mesh, drop)
	c := f.mustLogin(role, f.password("gitea", dropCred).Value, role)
	ctx := context.Background()
	if _, err := c.Exec(ctx, `CREATE TABLE repos (name text); INSERT INTO repos VALUES ('mesh-provisioner')`); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	var dsnUser string
	f.admin.QueryRow(ctx, `SELECT current_user::text`).Scan(&dsnUser)

	f.seat.Retire(keep)
	f.seat.Answer(keep, "no")
	f.seat.Retire(drop)
	f.seat.Answer(drop, "yes")
	bustest.WaitFor(t, 20*time.Second, "the retired key to be deleted by the seat", func() bool { _, ok := f.seat.Get(drop); return !ok })
	if n := f.count(`SELECT count(*) FROM pg_roles WHERE rolname = $1`, role); n != 0 {
		t.Errorf("role %s still exists after yes", role)
	}
	if o := f.owner(role); o != dsnUser {
		t.Errorf("database %s is owned by %s after retirement; want the owner role %s", role, o, dsnUser)
	}
	cc, _ := pgx.ParseConfig(f.dsn)
	cc.Database = role
	dbc, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer dbc.Close(ctx)
	var name, tableOwner string
	if err := dbc.QueryRow(ctx, `SELECT name, (SELECT tableowner::text FROM pg_tables WHERE tablename = 'repos') FROM repos`).Scan(&name, &tableOwner); err != nil {
		t.Fatalf("the row written before retirement: %v", err)
	}
	if name != "mesh-provisioner" || tableOwner != dsnUser {
		t.Errorf("row %q in a table owned by %s; want mesh-provisioner owned by %s", name, tableOwner, dsnUser)
	}

	// With no, nothing changed.
	kept := pgprovider.RoleName(f.mesh, keep)
	if p, _ := f.seat.Get(keep); p.State != mesh.Retiring || p.Warrant == nil || p.Warrant.Option != "no" {
		t.Errorf("%s = %+v; want retiring with the warrant no", keep, p)
	}
	if o := f.owner(kept); o != kept {
		t.Errorf("database %s is owned by %s after no; want %s", kept, o, kept)
	}
	f.mustLogin(kept, f.password("gitea", keepCred).Value, kept)
	if e, ok := kittest.Entry(t, mustJS(t, f.url), pgprovider.Module, keep); !ok || e.State != mesh.Provided {
		t.Errorf("entry of %s after no = %+v, %v; want it kept, provided", keep, e, ok)
	}
}

func TestStoppedServerWaitsAndNothingIsCreatedTwice(t *testing.T) {
	srv := pgtest.Start(t)
	f := start(t, srv.DSN)
	srv.Stop(t)
	db, cred := f.need("gitea", "")
	bustest.WaitFor(t, 20*time.Second, "the key to wait for the server", func() bool {
		p, ok := f.seat.Get(db)
		return ok && p.State == mesh.Waits && strings.HasPrefix(p.Why, "waits for the PostgreSQL server to be reached: ")
	})
	srv.Resume(t)
	f.admin.Close(context.Background())
	var err error
	if f.admin, err = pgx.Connect(context.Background(), srv.DSN); err != nil {
		t.Fatal(err)
	}
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
	role := pgprovider.RoleName(f.mesh, db)
	oids := func() string {
		var r, d uint32
		f.admin.QueryRow(context.Background(), `SELECT (SELECT oid FROM pg_roles WHERE rolname = $1), (SELECT oid FROM pg_database WHERE datname = $1)`, role).Scan(&r, &d)
		return fmt.Sprintf("role %d database %d", r, d)
	}
	before := oids()
	// A restarted provider provides the key again and creates nothing.
	f.startProvider(srv.DSN)
	bustest.WaitFor(t, 20*time.Second, "the restarted provider to provide the key again", func() bool {
		return f.saids[1].Has("postgres: provided", "key="+db.String())
	})
	if n := strings.Count(f.said(), "postgres: role created"); n != 1 {
		t.Errorf("role created %d times; want once", n)
	}
	if after := oids(); after != before {
		t.Errorf("after a restart %s; want the same %s", after, before)
	}
	if n := strings.Count(f.said(), "postgres: database created"); n != 1 {
		t.Errorf("database created %d times; want once", n)
	}
	f.mustLogin(role, f.password("gitea", cred).Value, role)
}

func TestInvalidProvisionsFail(t *testing.T) {
	dsn := pgtest.DSN(t)
	f := start(t, dsn)
	// A provision postgres does not offer.
	key, p := kittest.Requirement(f.ref("gitea"), "cache", "", f.ref(pgprovider.Module))
	f.seat.Need(key, p)
	// A key out of shape.
	bad := mesh.ProvisionKey{Node: f.node, Consumer: "Gitea", Provision: "database"}
	_, bp := kittest.Requirement(mesh.Ref{Module: "Gitea", Node: f.node}, "database", "", f.ref(pgprovider.Module))
	f.seat.Need(bad, bp)
	wantFailed := func(k mesh.ProvisionKey, why string) {
		t.Helper()
		bustest.WaitFor(t, 20*time.Second, fmt.Sprintf("%s failed with %q", k, why), func() bool {
			p, ok := f.seat.Get(k)
			return ok && p.State == mesh.Failed && p.Why == why
		})
	}
	wantFailed(key, `postgres provides only "database" provisions, not "cache"`)
	wantFailed(bad, fmt.Sprintf(`the provision key %s.Gitea.database is out of shape: mesh: key "%s.Gitea.database": consumer "Gitea" is not a valid name`, f.node, f.node))
	if n := f.count(`SELECT count(*) FROM pg_roles WHERE rolname LIKE $1`, f.mesh+"%"); n != 0 {
		t.Errorf("%d roles were made for invalid provisions; want 0", n)
	}

	// PostgreSQL's own refusal: a provider whose role may not create roles.
	ctx := context.Background()
	limited := f.node + "_limited"
	if _, err := f.admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{limited}.Sanitize()+" LOGIN CREATEDB PASSWORD 'limited-pw'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.admin.Exec(context.Background(), "DROP ROLE "+pgx.Identifier{limited}.Sanitize()) })
	cc, _ := pgx.ParseConfig(dsn)
	g := start(t, fmt.Sprintf("host=%s port=%d user=%s password=limited-pw dbname=%s sslmode=disable", cc.Host, cc.Port, limited, cc.Database))
	db, _ := g.need("gitea", "")
	role := pgx.Identifier{pgprovider.RoleName(g.mesh, db)}.Sanitize()
	bustest.WaitFor(t, 20*time.Second, "the key failed with PostgreSQL's message", func() bool {
		p, ok := g.seat.Get(db)
		return ok && p.State == mesh.Failed && p.Why == "postgres: create role "+role+": ERROR: permission denied to create role (SQLSTATE 42501)"
	})
}

func mustJS(t *testing.T, url string) jetstream.JetStream {
	_, js := kittest.Connect(t, url, "reader")
	return js
}

// A database retired with yes and needed again is handed back whole: the
// database and everything in it belong to the new role, so that the
// consumer reads and writes its old tables with its credential.
func TestNeededAgainHandsTheDatabaseBack(t *testing.T) {
	f := start(t, pgtest.DSN(t))
	db, cred := f.need("gitea", "")
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
	role := pgprovider.RoleName(f.mesh, db)
	ctx := context.Background()
	c := f.mustLogin(role, f.password("gitea", cred).Value, role)
	for _, stmt := range []string{
		`CREATE SCHEMA forge`,
		`CREATE TABLE t (id serial PRIMARY KEY, name text)`,
		`CREATE TABLE forge.repos (name text)`,
		`CREATE VIEW names AS SELECT name FROM t`,
		`CREATE FUNCTION forge.count_repos() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM forge.repos'`,
		`CREATE TYPE forge.visibility AS ENUM ('public', 'private')`,
		`INSERT INTO t (name) VALUES ('before')`,
	} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	c.Close(ctx)

	f.seat.Retire(db)
	f.seat.Answer(db, "yes")
	bustest.WaitFor(t, 20*time.Second, "the retired key to be deleted by the seat", func() bool { _, ok := f.seat.Get(db); return !ok })
	if n := f.count(`SELECT count(*) FROM pg_roles WHERE rolname = $1`, role); n != 0 {
		t.Fatalf("role %s still exists after yes", role)
	}

	f.need("gitea", "")
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
	if o := f.owner(role); o != role {
		t.Errorf("database %s is owned by %s when needed again; want %s", role, o, role)
	}
	c = f.mustLogin(role, f.password("gitea", cred).Value, role)
	for _, stmt := range []string{
		`INSERT INTO t (name) VALUES ('after')`,
		`INSERT INTO forge.repos VALUES ('mesh-provisioner')`,
		`ALTER TABLE t ADD COLUMN at timestamptz`,
		`CREATE TABLE forge.more (v forge.visibility)`,
	} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			t.Errorf("%s as %s when needed again: %v", stmt, role, err)
		}
	}
	var names string
	if err := c.QueryRow(ctx, `SELECT string_agg(name, ',' ORDER BY name) FROM names`).Scan(&names); err != nil || names != "after,before" {
		t.Errorf("SELECT from the view names = %q, %v; want after,before", names, err)
	}
	var n int64
	if err := c.QueryRow(ctx, `SELECT forge.count_repos()`).Scan(&n); err != nil || n != 1 {
		t.Errorf("forge.count_repos() = %d, %v; want 1", n, err)
	}
	var left string
	c.QueryRow(ctx, `SELECT coalesce(string_agg(c.relname, ','), '') FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname IN ('public', 'forge') AND pg_get_userbyid(c.relowner) <> current_user`).Scan(&left)
	if left != "" {
		t.Errorf("relations not owned by %s when needed again: %s", role, left)
	}
}

// Two meshes of different names on one PostgreSQL server, with the same
// node and module names, each get roles and databases of their own: the
// second never resets the first's password. A role of the same name made
// by hand is refused with why and left as it is.
func TestTwoMeshesOnOneServerNeverMeet(t *testing.T) {
	dsn := pgtest.DSN(t)
	node, base := randomName("n"), randomName("m")
	a := startMesh(t, dsn, base+"-a", node)
	dbA, credA := a.need("gitea", "")
	a.waitProvided(dbA, mesh.Reference{ID: credA.String(), Generation: 1})
	pwA := a.password("gitea", credA)
	roleA := pgprovider.RoleName(a.mesh, dbA)
	a.mustLogin(roleA, pwA.Value, roleA)

	b := startMesh(t, dsn, base+"-b", node)
	dbB, credB := b.need("gitea", "")
	b.waitProvided(dbB, mesh.Reference{ID: credB.String(), Generation: 1})
	roleB := pgprovider.RoleName(b.mesh, dbB)
	if dbA != dbB || roleA == roleB {
		t.Fatalf("keys %s and %s, roles %s and %s; want one key, two roles", dbA, dbB, roleA, roleB)
	}
	pwB := b.password("gitea", credB)
	if pwA.Value == pwB.Value {
		t.Fatal("the two meshes' vaults gave the same password")
	}
	// The first mesh's password still works, and only on its own role.
	a.mustLogin(roleA, pwA.Value, roleA)
	b.mustLogin(roleB, pwB.Value, roleB)
	a.refuseLogin(roleA, pwB.Value, roleA, "the other mesh's password")
	a.refuseLogin(roleB, pwA.Value, roleB, "the first mesh's password on the other mesh's role")
	if p, _ := a.seat.Get(dbA); p.State != mesh.Provided {
		t.Errorf("%s of the first mesh = %s %q; want still provided", dbA, p.State, p.Why)
	}
	for _, c := range []struct {
		role, mesh string
		key        mesh.ProvisionKey
	}{{roleA, a.mesh, dbA}, {roleB, b.mesh, dbB}} {
		var roleMark, dbMark string
		a.admin.QueryRow(context.Background(), `SELECT shobj_description((SELECT oid FROM pg_roles WHERE rolname = $1), 'pg_authid'),
			shobj_description((SELECT oid FROM pg_database WHERE datname = $1), 'pg_database')`, c.role).Scan(&roleMark, &dbMark)
		if want := pgprovider.Mark(c.mesh, c.key); roleMark != want || dbMark != want {
			t.Errorf("role %s marked %q, its database %q; want both %q", c.role, roleMark, dbMark, want)
		}
	}

	// A role made by hand with the name a third mesh's key takes.
	cMesh := base + "-c"
	hand := pgprovider.RoleName(cMesh, dbA)
	ctx := context.Background()
	if _, err := a.admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{hand}.Sanitize()+" LOGIN PASSWORD 'made-by-hand'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{hand}.Sanitize()) })
	c := startMesh(t, dsn, cMesh, node)
	dbC, _ := c.need("gitea", "")
	var p mesh.Provision
	bustest.WaitFor(t, 20*time.Second, "the third mesh's key failed, naming the role made by hand", func() bool {
		var ok bool
		p, ok = c.seat.Get(dbC)
		return ok && p.State == mesh.Failed
	})
	want := fmt.Sprintf(`postgres: role %q exists but was not made by this mesh (mesh %s, provision %s): it has no comment; it is left as it is`, hand, cMesh, dbC)
	if !strings.HasPrefix(p.Why, want) {
		t.Errorf("why = %q; want it to begin %q", p.Why, want)
	}
	c.mustLogin(hand, "made-by-hand", "postgres") // its password untouched
	if n := c.count(`SELECT count(*) FROM pg_database WHERE datname = $1`, hand); n != 0 {
		t.Errorf("a database %s was made for a role not made by this mesh", hand)
	}
	// A database of the name, made by hand, is refused too (made before
	// the role goes, so that no try meets neither).
	if _, err := a.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{hand}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{hand}.Sanitize()) })
	if _, err := a.admin.Exec(ctx, "DROP ROLE "+pgx.Identifier{hand}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 20*time.Second, "the third mesh's key failed, naming the database made by hand", func() bool {
		p, _ = c.seat.Get(dbC)
		return p.State == mesh.Failed && strings.HasPrefix(p.Why, fmt.Sprintf("postgres: database %q exists but was not made by this mesh", hand))
	})
	if n := c.count(`SELECT count(*) FROM pg_roles WHERE rolname = $1`, hand); n != 0 {
		t.Errorf("role %s was made beside a database not made by this mesh; want nothing changed", hand)
	}
}

func TestRoleNames(t *testing.T) {
	long := strings.Repeat("x", 40)
	for _, c := range []struct {
		mesh string
		key  mesh.ProvisionKey
		want string
	}{
		{"homelab", mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "database"}, "homelab_ace_gitea"},
		{"homelab", mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "database", Local: "main"}, "homelab_ace_gitea_main"},
		{"lab", mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "database"}, "lab_ace_gitea"},
	} {
		if got := pgprovider.RoleName(c.mesh, c.key); got != c.want {
			t.Errorf("RoleName(%s, %s) = %s; want %s", c.mesh, c.key, got, c.want)
		}
	}
	// Long names stay within 63 bytes, and differ where the whole name does.
	seen := map[string]string{}
	for _, m := range []string{long + "-a", long + "-b"} {
		for _, local := range []string{"", "main", "main2"} {
			key := mesh.ProvisionKey{Node: long, Consumer: long, Provision: "database", Local: local}
			got := pgprovider.RoleName(m, key)
			if len(got) > 63 {
				t.Errorf("RoleName(%s, %s) is %d bytes; want at most 63", m, key, len(got))
			}
			if other, dup := seen[got]; dup {
				t.Errorf("RoleName(%s, %s) = %s, as for %s", m, key, got, other)
			}
			seen[got] = m + " " + key.String()
		}
	}
}

// A role that owns objects in another database than its own (issue 20,
// item 10): on the yes it logs in no more and its sessions end at once;
// while what it owns somewhere cannot be handed over (here a database that
// allows no connections) the key stays retiring and says why, its role
// still shut out; once it can, what it owned in both databases is the owner
// role's, with its data, and the role is gone.
func TestRetireShutsTheRoleOutAndHandsOverEveryDatabase(t *testing.T) {
	f := start(t, pgtest.DSN(t))
	db, cred := f.need("gitea", "")
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
	role := pgprovider.RoleName(f.mesh, db)
	ident := pgx.Identifier{role}.Sanitize()
	pw := f.password("gitea", cred).Value
	ctx := context.Background()
	var owner string
	f.admin.QueryRow(ctx, `SELECT current_user::text`).Scan(&owner)

	// A second database, not the provider's, where the consumer made a table.
	other := f.mesh + "_other"
	otherIdent := pgx.Identifier{other}.Sanitize()
	if _, err := f.admin.Exec(ctx, "CREATE DATABASE "+otherIdent); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.admin.Exec(context.Background(), "ALTER DATABASE "+otherIdent+" ALLOW_CONNECTIONS true")
		f.admin.Exec(context.Background(), "DROP DATABASE "+otherIdent+" WITH (FORCE)")
	})
	ocfg, _ := pgx.ParseConfig(f.dsn)
	ocfg.Database = other
	oadmin, err := pgx.ConnectConfig(ctx, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oadmin.Exec(ctx, "GRANT CREATE ON SCHEMA public TO "+ident); err != nil {
		t.Fatal(err)
	}
	oadmin.Close(ctx)
	for _, c := range []struct{ database, stmt string }{
		{role, `CREATE TABLE repos (name text); INSERT INTO repos VALUES ('mesh-provisioner')`},
		{other, `CREATE TABLE issues (title text); INSERT INTO issues VALUES ('item 10')`},
	} {
		c2 := f.mustLogin(role, pw, c.database)
		if _, err := c2.Exec(ctx, c.stmt); err != nil {
			t.Fatalf("%s in %s: %v", c.stmt, c.database, err)
		}
		c2.Close(ctx)
	}
	session := f.mustLogin(role, pw, role) // open when the operator says yes
	if _, err := f.admin.Exec(ctx, "ALTER DATABASE "+otherIdent+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}

	f.seat.Retire(db)
	f.seat.Answer(db, "yes")
	var p mesh.Provision
	bustest.WaitFor(t, 20*time.Second, db.String()+" retiring, saying why its removal failed", func() bool {
		p, _ = f.seat.Get(db)
		return p.State == mesh.Retiring && strings.Contains(p.Why, "has not removed it yet")
	})
	for _, want := range []string{
		"; approved with yes, but postgres on " + f.node + " has not removed it yet; its entry says: the removal approved with yes failed",
		fmt.Sprintf("postgres: role %q logs in no more, but it cannot be dropped: ERROR: role %q cannot be dropped because some objects depend on it (SQLSTATE 2BP01)", role, role),
		fmt.Sprintf("2 objects in database %s", other), // the table and its type, which PostgreSQL cannot name from another database
		fmt.Sprintf("what it holds in database %q was not handed to %s: it allows no connections", other, owner),
	} {
		if !strings.Contains(p.Why, want) {
			t.Errorf("why = %q; want it to say %q", p.Why, want)
		}
	}
	f.refuseLogin(role, pw, role, "the password of a role removed on yes")
	dsnCfg, _ := pgx.ParseConfig(f.dsn)
	f.refuseLogin(role, pw, dsnCfg.Database, "the password of a role removed on yes, into a database open to PUBLIC")
	if _, err := session.Exec(ctx, `SELECT 1`); err == nil {
		t.Error("the role's session opened before the yes still runs; want it ended")
	}
	var canLogin, hasPassword bool
	f.admin.QueryRow(ctx, `SELECT rolcanlogin, rolpassword IS NOT NULL FROM pg_authid WHERE rolname = $1`, role).Scan(&canLogin, &hasPassword)
	if canLogin || hasPassword {
		t.Errorf("role %s: login %v, password %v; want neither while its removal fails", role, canLogin, hasPassword)
	}

	if _, err := f.admin.Exec(ctx, "ALTER DATABASE "+otherIdent+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 20*time.Second, db.String()+" retired", func() bool { _, ok := f.seat.Get(db); return !ok })
	if n := f.count(`SELECT count(*) FROM pg_roles WHERE rolname = $1`, role); n != 0 {
		t.Errorf("role %s still exists after its retirement", role)
	}
	if o := f.owner(role); o != owner {
		t.Errorf("database %s is owned by %s; want %s", role, o, owner)
	}
	for _, c := range []struct{ database, query, want string }{
		{role, `SELECT name || ' ' || (SELECT tableowner::text FROM pg_tables WHERE tablename = 'repos') FROM repos`, "mesh-provisioner " + owner},
		{other, `SELECT title || ' ' || (SELECT tableowner::text FROM pg_tables WHERE tablename = 'issues') FROM issues`, "item 10 " + owner},
	} {
		cc, _ := pgx.ParseConfig(f.dsn)
		cc.Database = c.database
		dbc, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := dbc.QueryRow(ctx, c.query).Scan(&got); err != nil || got != c.want {
			t.Errorf("in %s: %q, %v; want %q (the row kept, its table the owner's)", c.database, got, err, c.want)
		}
		dbc.Close(ctx)
	}
}

// states records every state and why the seat writes at key, in order.
func (f *fixture) states(key mesh.ProvisionKey) func() []string {
	f.t.Helper()
	var mu sync.Mutex
	var seen []string
	_, js := kittest.Connect(f.t, f.url, "states")
	c := bus.Follow(bustest.Context(f.t), js, mesh.ProvisionsBucket, bus.Options{OnChange: func(ch bus.Change) {
		if ch.Key != key.String() || ch.Deleted {
			return
		}
		var p mesh.Provision
		if err := json.Unmarshal(ch.Value, &p); err != nil {
			return
		}
		mu.Lock()
		seen = append(seen, string(p.State)+" "+p.Why)
		mu.Unlock()
	}})
	<-c.Ready()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// A role changed by hand (issue 20, item 14): its password changed, removed,
// or the role made NOLOGIN, the value handed to the consumer is refused.
// The provider finds it, says it in the key (failed, naming the role, what
// changed and the credential), and sets the handed-out value again: the
// consumer logs in with it, the value set by hand is refused, and the
// credential's generation is unchanged.
func TestRoleChangedByHandIsSaidAndMended(t *testing.T) {
	f := start(t, pgtest.DSN(t))
	db, cred := f.need("gitea", "")
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
	role := pgprovider.RoleName(f.mesh, db)
	ident := pgx.Identifier{role}.Sanitize()
	pw := f.password("gitea", cred).Value
	f.mustLogin(role, pw, role)
	seen := f.states(db)
	ctx := context.Background()
	for _, c := range []struct{ stmt, why string }{
		{"ALTER ROLE " + ident + " PASSWORD 'set-by-hand'", fmt.Sprintf("postgres: the password of role %q was changed outside mesh-provisioner: it refuses the credential %s (generation 1) handed to the consumer; it is set to that value again", role, cred)},
		{"ALTER ROLE " + ident + " PASSWORD NULL", fmt.Sprintf("postgres: the password of role %q was removed outside mesh-provisioner", role)},
		{"ALTER ROLE " + ident + " NOLOGIN", fmt.Sprintf("postgres: role %q was made NOLOGIN outside mesh-provisioner: it refuses the credential %s (generation 1) handed to the consumer; it is given LOGIN and that value again", role, cred)},
	} {
		if _, err := f.admin.Exec(ctx, c.stmt); err != nil {
			t.Fatal(err)
		}
		bustest.WaitFor(t, 20*time.Second, "the key failed, then provided again, after "+c.stmt, func() bool {
			h := seen()
			for i, s := range h {
				if strings.HasPrefix(s, "failed "+c.why) && slices.Contains(h[i+1:], "provided ") {
					return true
				}
			}
			return false
		})
		f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
		f.mustLogin(role, pw, role)
	}
	f.refuseLogin(role, "set-by-hand", role, "the password set by hand")
	if n := strings.Count(f.said(), "postgres: a role was changed outside mesh-provisioner; its key fails, then it is set back"); n != 3 {
		t.Errorf("the provider said a role changed by hand %d times; want 3, once per change", n)
	}
	if got := f.password("gitea", cred); got.Generation != 1 || got.Value != pw {
		t.Errorf("the vault answers generation %d; want the value handed out, generation 1, unchanged", got.Generation)
	}
}

// The address handed to consumers (issue 20, item 11): the DSN's loopback
// host is refused to a consumer on another node (its key fails, saying
// why, and nothing is made for it) and handed to one on postgres' own node;
// with --advertise, that address is handed to both.
func TestConnectionIsAnAddressTheConsumerReaches(t *testing.T) {
	dsn := pgtest.DSN(t)
	f := start(t, dsn)
	cc, _ := pgx.ParseConfig(dsn)
	if !strings.HasPrefix(cc.Host, "127.") {
		t.Fatalf("the test server's DSN host is %s; this test needs a loopback one", cc.Host)
	}
	dsnAddr := fmt.Sprintf("%s:%d", cc.Host, cc.Port)
	local, localCred := f.need("gitea", "")
	remote, p := kittest.Requirement(mesh.Ref{Module: "gitea", Node: randomName("far")}, pgprovider.Provision, "", f.ref(pgprovider.Module))
	rc, rcp, p := kittest.Credential(remote, p, f.ref(mesh.VaultModule))
	f.seat.Need(rc, rcp)
	f.seat.Need(remote, p)
	f.waitProvided(local, mesh.Reference{ID: localCred.String(), Generation: 1})
	wantWhy := fmt.Sprintf("postgres: the address handed to consumers, %s, is a loopback address, which gitea on node %s cannot reach (postgres runs on node %s): "+
		"nothing is made for it; run postgres with --advertise HOST:PORT, an address %s reaches", dsnAddr, remote.Node, f.node, remote.Node)
	bustest.WaitFor(t, 20*time.Second, remote.String()+" failed, saying the loopback address", func() bool {
		p, _ := f.seat.Get(remote)
		return p.State == mesh.Failed && p.Why == wantWhy
	})
	if n := f.count(`SELECT count(*) FROM pg_roles WHERE rolname = $1`, pgprovider.RoleName(f.mesh, remote)); n != 0 {
		t.Errorf("a role was made for %s, refused its address", remote)
	}
	js := mustJS(t, f.url)
	if e, _ := kittest.Entry(t, js, pgprovider.Module, local); e.Connection["host"] != cc.Host || e.Connection["port"] != fmt.Sprint(cc.Port) {
		t.Errorf("connection of %s (postgres' own node) = %v; want the DSN's %s", local, e.Connection, dsnAddr)
	}
	if !strings.Contains(f.said(), "postgres: the address handed to consumers is a loopback address") {
		t.Error("the provider did not say at start that it hands out a loopback address")
	}

	// Advertised: both are provided with that address.
	f.advertise = "db.homelab.example:6432"
	f.startProvider(dsn)
	f.waitProvided(remote, mesh.Reference{ID: rc.String(), Generation: 1})
	for _, k := range []mesh.ProvisionKey{local, remote} {
		bustest.WaitFor(t, 20*time.Second, k.String()+" handed the advertised address", func() bool {
			e, _ := kittest.Entry(t, js, pgprovider.Module, k)
			return e.State == mesh.Provided && e.Connection["host"] == "db.homelab.example" && e.Connection["port"] == "6432" &&
				e.Connection["database"] == pgprovider.RoleName(f.mesh, k)
		})
	}

	// An address that is no host:port is refused at start.
	for addr, want := range map[string]string{
		"db.homelab.example": `postgres: advertise "db.homelab.example": address db.homelab.example: missing port in address`,
		"db:99999":           `postgres: advertise "db:99999": the port "99999" is not a number from 1 to 65535`,
		":5432":              `postgres: advertise ":5432": no host`,
	} {
		nc, js := kittest.Connect(t, f.url, pgprovider.Module)
		_, err := pgprovider.Start(bustest.Context(t), pgprovider.Config{DSN: dsn, Node: f.node, Mesh: f.mesh, Advertise: addr}, nc, js, nil)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Start with --advertise %q: %v; want an error beginning %q", addr, err, want)
		}
	}
}
