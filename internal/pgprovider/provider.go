package pgprovider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Module is the provider's module name (entries in "postgres_bound"; its
// bus user asks the vault on "mesh-vault.consumers.postgres.postgres").
const Module = "postgres"

// Provision is the one provision the provider answers.
const Provision = "database"

// Config configures the PostgreSQL provider.
type Config struct {
	// DSN connects to the server as a role that may create roles and
	// databases (a superuser, or CREATEROLE and CREATEDB), in a database of
	// its own (such as "postgres"): a libpq keyword/value string or URL.
	DSN string
	// Node is the node postgres runs on: the provider answers the
	// provisions whose provider is postgres on Node.
	Node string
	// Mesh is the name of the mesh the provider serves (a valid name: the
	// mesh file's "mesh:", or --mesh-name on up and postgres). It begins
	// the name of every role and database the provider makes ([RoleName])
	// and is in the mark each of them carries ([Mark]), so that meshes
	// sharing a PostgreSQL server never take over each other's roles. It
	// travels as configuration, never through the bus: no bus user can
	// turn a provider to another mesh's roles.
	Mesh string
	// Owner is the role that receives what a retired role owned. Empty
	// means the DSN's user.
	Owner string
	// Timeout bounds connecting to the server and asking the vault. 0
	// means 5 s.
	Timeout time.Duration
	// RetryMin and RetryMax bound the kit's backoff (see kit.Config); 0
	// means the kit's defaults.
	RetryMin, RetryMax time.Duration
	// Advertise is the address handed to consumers in each entry's
	// connection ("host:port", the host a name or an IP address): where the
	// consumers' nodes reach the server. Empty means the DSN's own host and
	// port, as the provider connects.
	Advertise string
	// OneMachine says that every node of the mesh runs on this machine (up
	// runs them all in one process), so a loopback address reaches every
	// consumer. Without it, a loopback address handed out (127.0.0.0/8,
	// ::1, localhost, or a Unix socket's directory) is refused to a consumer
	// on another node than Node: its key fails, saying that address and
	// that the consumer cannot reach it, before anything is made for it
	// (said once in the log at start too).
	OneMachine bool
	// Check is how often the provided keys' roles are checked against the
	// credentials handed out, to find what was changed outside the product
	// (a password changed by hand, a role made NOLOGIN or dropped, a
	// database dropped), which is said in the key and mended. 0 means 1
	// minute; a negative value checks never. The check reads pg_authid:
	// the DSN's role must be a superuser for it (else it is said once in
	// the log, and nothing is checked).
	Check time.Duration
	// Ask is the connection the provider asks the vault on (its user in
	// the requests account). Nil means the connection given to [Start] (a
	// server without accounts).
	Ask *nats.Conn
}

// Provider is a running PostgreSQL provider.
type Provider struct {
	cfg       Config
	conn      *pgx.ConnConfig
	host      string // the address handed to consumers: host and port
	port      string
	loopback  bool // host is reached only from this machine
	nc        *nats.Conn
	kit       *kit.Kit
	log       *slog.Logger
	unchecked sync.Once // said once: pg_authid may not be read

	mu    sync.Mutex
	drift map[string]drift // key -> what the check found changed outside the product
}

// Start checks cfg's DSN, starts the provider's kit on its own bus
// connection (nc, js) and returns at once; it runs until ctx is done. It
// returns an error when the DSN does not parse, Node is empty, or Mesh is
// not a valid name ([ErrNoMesh] when it is empty); an unreachable server is
// not an error (its keys wait).
func Start(ctx context.Context, cfg Config, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (*Provider, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Node == "" {
		return nil, errors.New("postgres: the node is not set")
	}
	if cfg.Mesh == "" {
		return nil, ErrNoMesh
	}
	if !mesh.ValidName(cfg.Mesh) {
		return nil, fmt.Errorf("postgres: mesh name %q is not a valid name (lower-case [a-z0-9][a-z0-9-]*)", cfg.Mesh)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	cc, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: DSN: %w", err)
	}
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > cfg.Timeout {
		cc.ConnectTimeout = cfg.Timeout
	}
	if cfg.Check == 0 {
		cfg.Check = time.Minute
	}
	if cfg.Ask != nil {
		nc = cfg.Ask
	}
	p := &Provider{cfg: cfg, conn: cc, nc: nc, log: log.With("component", Module), drift: map[string]drift{},
		host: cc.Host, port: strconv.Itoa(int(cc.Port))}
	if cfg.Advertise != "" {
		if p.host, p.port, err = advertised(cfg.Advertise); err != nil {
			return nil, err
		}
	}
	if p.loopback = loopback(p.host); p.loopback && !cfg.OneMachine {
		p.log.Warn("postgres: the address handed to consumers is a loopback address: consumers on other nodes are refused it (their keys fail); give --advertise HOST:PORT that they reach",
			"address", net.JoinHostPort(p.host, p.port), "node", cfg.Node)
	}
	p.kit, err = kit.Start(ctx, kit.Config{
		Module: Module, Node: cfg.Node, JetStream: js, Handler: handler{p}, Log: log,
		RetryMin: cfg.RetryMin, RetryMax: cfg.RetryMax,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Check > 0 {
		go p.checkLoop(ctx)
	}
	return p, nil
}

// Ready is closed once the provider follows the provisions and its entries.
func (p *Provider) Ready() <-chan struct{} { return p.kit.Ready() }

// Done is closed once the provider has stopped (its ctx is done) and
// handed on its work ([kit.Kit.Done]): each provide or retire in hand
// ended within the kit's grace (or was cut, its entry saying so), and every
// entry is written; the provider placed next takes over from the bus.
func (p *Provider) Done() <-chan struct{} { return p.kit.Done() }

// advertised splits addr, "host:port", into its host and port, or says why
// it is no such address.
func advertised(addr string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("postgres: advertise %q: %w (give host:port, such as db.example.net:5432)", addr, err)
	}
	if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("postgres: advertise %q: the port %q is not a number from 1 to 65535", addr, port)
	}
	if host == "" {
		return "", "", fmt.Errorf("postgres: advertise %q: no host", addr)
	}
	return host, port, nil
}

// loopback reports whether host is reached from this machine only: a
// loopback IP address, "localhost" (or a name under it), or a Unix
// socket's directory.
func loopback(host string) bool {
	if strings.HasPrefix(host, "/") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// connect opens a connection to database (empty: the DSN's own).
func (p *Provider) connect(ctx context.Context, database string) (*pgx.Conn, error) {
	cc := p.conn.Copy()
	if database != "" {
		cc.Database = database
	}
	return pgx.ConnectConfig(ctx, cc)
}

// unreachable reports whether err says the server could not be reached
// (rather than PostgreSQL refusing something).
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}

// statementError wraps a refused statement with what was tried; the
// PostgreSQL message stays whole in its text.
func statementError(what string, err error) error {
	return fmt.Errorf("postgres: %s: %w", what, err)
}

type handler struct{ p *Provider }

func (h handler) Provide(ctx context.Context, key mesh.ProvisionKey, prov mesh.Provision) (kit.Result, error) {
	p := h.p
	if key.Provision != Provision {
		return kit.Failing(whyNotDatabase(key.Provision)), nil
	}
	if p.loopback && !p.cfg.OneMachine && key.Node != p.cfg.Node {
		return kit.Failing(whyLoopback(net.JoinHostPort(p.host, p.port), key, p.cfg.Node)), nil
	}
	if why, ok := p.sayDrift(key.String()); ok {
		// Said in the key first; the next try (with backoff) mends it.
		return kit.Result{}, errors.New(why)
	}
	cred, err := p.credential(ctx, key, prov)
	if errors.Is(err, kit.ErrNoVault) && ctx.Err() == nil {
		return kit.Waiting(whyNoVault(err)), nil
	}
	if err != nil {
		return kit.Result{}, err
	}
	if cred == nil {
		return kit.Failing(whyNoCredential(key.String())), nil
	}
	verifier, err := scramVerifier(cred.Value)
	if err != nil {
		return kit.Result{}, err
	}
	name := RoleName(p.cfg.Mesh, key)
	role := pgx.Identifier{name}.Sanitize()
	conn, err := p.connect(ctx, "")
	if err != nil {
		if unreachable(err) {
			return kit.Waiting(whyUnreachable(err)), nil
		}
		return kit.Result{}, statementError("connect", err)
	}
	defer conn.Close(context.Background())
	if err := p.provide(ctx, conn, key, name, role, verifier); err != nil {
		if _, notOurs := errors.AsType[*NotOursError](err); notOurs {
			return kit.Result{}, err // failed, its why this error's text; tried again with backoff
		}
		if unreachable(err) && ctx.Err() == nil {
			return kit.Waiting(whyUnreachable(err)), nil
		}
		return kit.Result{}, err
	}
	p.forgetDrift(key.String()) // mended, if it had drifted
	p.log.Debug("postgres: provided", "key", key.String(), "role", name, "generation", cred.Generation)
	res := kit.Provided(cred.VaultName, cred.Generation)
	res.Connection = map[string]string{"host": p.host, "port": p.port, "database": name, "role": name}
	return res, nil
}

// provide makes the role and the database of the provision when missing,
// each marked as this mesh's ([Mark]), and sets the role's password. A role
// or database of that name that is not marked so is refused with a
// [*NotOursError] before anything is changed. A database with no mark that
// our own role owns was cut short between CREATE DATABASE and its mark
// (the two cannot share a transaction): it is marked.
func (p *Provider) provide(ctx context.Context, conn *pgx.Conn, key mesh.ProvisionKey, name, role, verifier string) error {
	mark := Mark(p.cfg.Mesh, key)
	var roleMark, dbMark, owner *string
	var hasRole, hasDB bool
	if err := conn.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1),
		(SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1),
		EXISTS (SELECT 1 FROM pg_database WHERE datname = $1),
		(SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1),
		(SELECT pg_get_userbyid(datdba)::text FROM pg_database WHERE datname = $1)`, name).
		Scan(&hasRole, &roleMark, &hasDB, &dbMark, &owner); err != nil {
		return statementError("look up role and database "+role, err)
	}
	if hasRole && deref(roleMark) != mark {
		return &NotOursError{Object: "role", Name: name, Mesh: p.cfg.Mesh, Key: key.String(), Comment: deref(roleMark)}
	}
	cutShort := hasRole && hasDB && dbMark == nil && deref(owner) == name
	if hasDB && deref(dbMark) != mark && !cutShort {
		return &NotOursError{Object: "database", Name: name, Mesh: p.cfg.Mesh, Key: key.String(), Comment: deref(dbMark)}
	}

	if !hasRole {
		// The role and its mark are made together: a role of this name
		// with no mark was never made by this mesh.
		tx, err := conn.Begin(ctx)
		if err != nil {
			return statementError("create role "+role, err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD "+literal(verifier)); err != nil {
			return statementError("create role "+role, err)
		}
		if _, err := tx.Exec(ctx, "COMMENT ON ROLE "+role+" IS "+literal(mark)); err != nil {
			return statementError("comment on role "+role, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return statementError("create role "+role, err)
		}
		p.log.Info("postgres: role created", "key", key.String(), "role", name)
	} else if _, err := conn.Exec(ctx, "ALTER ROLE "+role+" LOGIN PASSWORD "+literal(verifier)); err != nil {
		return statementError("set the password of role "+role, err)
	}

	switch {
	case !hasDB:
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+role+" OWNER "+role); err != nil {
			return statementError("create database "+role, err)
		}
		if _, err := conn.Exec(ctx, "COMMENT ON DATABASE "+role+" IS "+literal(mark)); err != nil {
			return statementError("comment on database "+role, err)
		}
		if _, err := conn.Exec(ctx, "REVOKE ALL ON DATABASE "+role+" FROM PUBLIC"); err != nil {
			return statementError("revoke public access to database "+role, err)
		}
		p.log.Info("postgres: database created", "key", key.String(), "database", name)
	case cutShort:
		if _, err := conn.Exec(ctx, "COMMENT ON DATABASE "+role+" IS "+literal(mark)); err != nil {
			return statementError("comment on database "+role, err)
		}
		if _, err := conn.Exec(ctx, "REVOKE ALL ON DATABASE "+role+" FROM PUBLIC"); err != nil {
			return statementError("revoke public access to database "+role, err)
		}
	case deref(owner) != name:
		if owner != nil {
			if err := p.handBack(ctx, name, role, *owner); err != nil {
				return err
			}
		}
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+role+" OWNER TO "+role); err != nil {
			return statementError("hand database "+role+" to its role", err)
		}
		p.log.Info("postgres: database handed back to its role", "key", key.String(), "database", name, "owner_was", deref(owner))
	}
	return nil
}

// handBackObjects lists, inside a database, what from owns there that a
// consumer may have made: schemas, relations (a sequence owned by a column
// follows its table), routines, types and large objects, outside the
// system schemas and not part of an extension. Each row is the ALTER
// statement's object kind and its name, fully qualified and quoted (the
// session's search_path is empty). $1 is from's name.
const handBackObjects = `
WITH o AS (SELECT oid FROM pg_roles WHERE rolname = $1),
ns AS (SELECT oid, nspname FROM pg_namespace WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname !~ '^pg_(toast|temp_|toast_temp_)'),
ext AS (SELECT objid, classid FROM pg_depend WHERE deptype = 'e')
SELECT 'SCHEMA', quote_ident(n.nspname) FROM pg_namespace n JOIN ns ON ns.oid = n.oid, o
	WHERE n.nspowner = o.oid AND (n.oid, 'pg_namespace'::regclass) NOT IN (SELECT objid, classid FROM ext)
UNION ALL
SELECT CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE'
		WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, c.oid::regclass::text
	FROM pg_class c JOIN ns ON ns.oid = c.relnamespace, o
	WHERE c.relowner = o.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
	AND (c.oid, 'pg_class'::regclass) NOT IN (SELECT objid, classid FROM ext)
	AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
		AND d.objid = c.oid AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
UNION ALL
SELECT 'ROUTINE', f.oid::regprocedure::text FROM pg_proc f JOIN ns ON ns.oid = f.pronamespace, o
	WHERE f.proowner = o.oid AND (f.oid, 'pg_proc'::regclass) NOT IN (SELECT objid, classid FROM ext)
UNION ALL
SELECT CASE y.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, y.oid::regtype::text
	FROM pg_type y JOIN ns ON ns.oid = y.typnamespace, o
	WHERE y.typowner = o.oid AND y.typtype IN ('d', 'e', 'r', 'c')
	AND (y.typtype <> 'c' OR (SELECT relkind FROM pg_class WHERE oid = y.typrelid) = 'c')
	AND (y.oid, 'pg_type'::regclass) NOT IN (SELECT objid, classid FROM ext)
UNION ALL
SELECT 'LARGE OBJECT', l.oid::text FROM pg_largeobject_metadata l, o WHERE l.lomowner = o.oid`

// handBack gives role, inside its database name, everything that from
// (the role the database was handed to when the consumer's role retired)
// owns there (see handBackObjects), in one transaction. It runs before the
// database itself is handed back, so that a provide cut short between the
// two is taken up again at the next try.
func (p *Provider) handBack(ctx context.Context, name, role, from string) error {
	db, err := p.connect(ctx, name)
	if err != nil {
		return statementError("connect to database "+role+" to hand back what "+from+" owns there", err)
	}
	defer db.Close(context.Background())
	tx, err := db.Begin(ctx)
	if err != nil {
		return statementError("hand back database "+role, err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', '', true)`); err != nil {
		return statementError("hand back database "+role, err)
	}
	rows, err := tx.Query(ctx, handBackObjects, from)
	if err != nil {
		return statementError("list what "+from+" owns in database "+role, err)
	}
	type object struct{ kind, name string }
	var objects []object
	for rows.Next() {
		var o object
		if err := rows.Scan(&o.kind, &o.name); err != nil {
			rows.Close()
			return statementError("list what "+from+" owns in database "+role, err)
		}
		objects = append(objects, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return statementError("list what "+from+" owns in database "+role, err)
	}
	for _, o := range objects {
		stmt := "ALTER " + o.kind + " " + o.name + " OWNER TO " + role
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return statementError("hand "+strings.ToLower(o.kind)+" "+o.name+" in database "+role+" back to its role", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return statementError("hand back database "+role, err)
	}
	if len(objects) > 0 {
		p.log.Info("postgres: what the database holds handed back to its role", "database", name, "objects", len(objects), "owner_was", from)
	}
	return nil
}

// credential asks the vault for the consumer's credential that prov
// depends on; it returns nil when prov depends on no credential.
func (p *Provider) credential(ctx context.Context, key mesh.ProvisionKey, prov mesh.Provision) (*kit.Credential, error) {
	var creds []string
	for _, d := range prov.DependsOn {
		if dk, err := mesh.ParseProvisionKey(d); err == nil && dk.Provision == mesh.CredentialProvision {
			creds = append(creds, d)
		}
	}
	if len(creds) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	a, err := kit.AskConsumers(ctx, p.nc, Module, kit.VaultRequest{Key: key.String()})
	if err != nil {
		return nil, fmt.Errorf("postgres: ask the vault for the credential of %s: %w", key, err)
	}
	for _, c := range a.Credentials {
		if slices.Contains(creds, c.Key) {
			return &c, nil
		}
	}
	return nil, fmt.Errorf("postgres: the vault answered no credential %s for %s", creds[0], key)
}

func (h handler) Retire(ctx context.Context, key mesh.ProvisionKey, _ mesh.Provision) error {
	p := h.p
	p.forgetDrift(key.String()) // what the check found no longer matters: the role goes
	name := RoleName(p.cfg.Mesh, key)
	role := pgx.Identifier{name}.Sanitize()
	conn, err := p.connect(ctx, "")
	if err != nil {
		return fmt.Errorf("postgres: retire %s: connect: %w", key, err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1 AND shobj_description(oid, 'pg_authid') = $2)`,
		name, Mark(p.cfg.Mesh, key)).Scan(&exists); err != nil {
		return statementError("look up role "+role, err)
	}
	if !exists {
		// None, or not made by this mesh: nothing of ours to remove.
		p.log.Info("postgres: retired; no role of this mesh to remove", "key", key.String(), "role", name)
		return nil
	}
	owner := p.cfg.Owner
	if owner == "" {
		if err := conn.QueryRow(ctx, `SELECT current_user::text`).Scan(&owner); err != nil {
			return statementError("look up the owner role", err)
		}
	}
	// The consumer is shut out first: whatever fails after this, the
	// credential it was given no longer logs in.
	if _, err := conn.Exec(ctx, "ALTER ROLE "+role+" NOLOGIN PASSWORD NULL"); err != nil {
		return statementError("take login away from role "+role, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, name); err != nil {
		return statementError("end the sessions of role "+role, err)
	}
	left := p.handOver(ctx, conn, name, role, owner)
	if _, err := conn.Exec(ctx, "DROP ROLE "+role); err != nil {
		return &RetireError{Role: name, Owner: owner, Err: err, Left: left}
	}
	p.log.Info("postgres: role retired; what it owned is the owner role's, its database and data stay", "key", key.String(), "role", name, "owner", owner)
	return nil
}

// handOver gives owner what role (named name) owns, and drops what was
// granted to it, in every database of the server where it owns or was
// granted something (pg_shdepend names them, as DROP ROLE reads them), and
// in conn's own database (where what it owns of the server's shared objects,
// its database among them, is handed over). It returns, per database whose
// hand-over failed, why.
func (p *Provider) handOver(ctx context.Context, conn *pgx.Conn, name, role, owner string) map[string]string {
	left := map[string]string{}
	stmts := []string{"REASSIGN OWNED BY " + role + " TO " + pgx.Identifier{owner}.Sanitize(), "DROP OWNED BY " + role}
	run := func(c *pgx.Conn, database string) {
		for _, stmt := range stmts {
			if _, err := c.Exec(ctx, stmt); err != nil {
				left[database] = strings.ToLower(stmt) + ": " + pgText(err)
				return
			}
		}
	}
	run(conn, conn.Config().Database)
	rows, err := conn.Query(ctx, `SELECT DISTINCT d.datname::text, d.datallowconn FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid
		WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = (SELECT oid FROM pg_roles WHERE rolname = $1) AND d.datname <> current_database()
		ORDER BY 1`, name)
	if err != nil {
		left["(every other)"] = "list the databases where it owns objects: " + pgText(err)
		return left
	}
	type database struct {
		name  string
		enter bool
	}
	var dbs []database
	for rows.Next() {
		var d database
		if err := rows.Scan(&d.name, &d.enter); err != nil {
			break
		}
		dbs = append(dbs, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		left["(every other)"] = "list the databases where it owns objects: " + pgText(err)
		return left
	}
	for _, d := range dbs {
		if !d.enter {
			left[d.name] = "it allows no connections (ALTER DATABASE " + pgx.Identifier{d.name}.Sanitize() + " ALLOW_CONNECTIONS true lets it be handed over)"
			continue
		}
		c, err := p.connect(ctx, d.name)
		if err != nil {
			left[d.name] = "connect: " + pgText(err)
			continue
		}
		run(c, d.name)
		c.Close(context.Background())
	}
	return left
}

// pgText is err's text, with PostgreSQL's detail (which names the objects
// in the way, for SQLSTATE 2BP01) when it has one.
func pgText(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Detail != "" {
		return err.Error() + ": " + strings.ReplaceAll(pgErr.Detail, "\n", "; ")
	}
	return err.Error()
}

// deref is *s, or empty for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// literal quotes s as an SQL string literal (standard_conforming_strings).
func literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
