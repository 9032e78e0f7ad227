package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/jwt/v2"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/cli"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lockfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider/pgtest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// appliedOf reads the applied records that up left in its store, through
// a server with up's users, as up's operator.
func appliedOf(t *testing.T, data string) map[string]mesh.Applied {
	t.Helper()
	authDir := filepath.Join(data, cli.AuthDir)
	s, err := bus.StartServer(bus.ServerConfig{Dir: filepath.Join(data, "nats"), Listen: "127.0.0.1:0",
		ConfigFile: filepath.Join(authDir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, js, err := bus.Connect(bus.Dial{URL: s.URL(), Name: "test", Creds: auth.CredsPath(authDir, access.DefaultOperator)})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := bus.Follow(ctx, js, mesh.AppliedBucket, bus.Options{})
	<-c.Ready()
	out := map[string]mesh.Applied{}
	c.Range(func(k string, it bus.Item) bool {
		var a mesh.Applied
		if err := json.Unmarshal(it.Value, &a); err != nil {
			t.Errorf("applied %s: %v", k, err)
		}
		out[k] = a
		return true
	})
	return out
}

func TestUpOnceHomelab(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	out, _, err := run(t, "up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("up --once: %v", err)
	}
	var kept struct {
		Plans      map[string]mesh.Plan      `json:"plans"`
		Provisions map[string]mesh.Provision `json:"provisions"`
		Refused    map[string]mesh.Refusal   `json:"refused"`
	}
	if err := json.Unmarshal([]byte(out), &kept); err != nil {
		t.Fatalf("up --once -o json printed no JSON object: %v\n%s", err, out)
	}
	if len(kept.Plans) != 18 || len(kept.Provisions) != 41 || len(kept.Refused) != 0 {
		t.Errorf("up --once kept %d plans, %d provisions, %d refused; want 18, 41, 0",
			len(kept.Plans), len(kept.Provisions), len(kept.Refused))
	}
	// up runs the vault: credentials are provided, and so is redis' cache
	// (by its have, once its shared credential is). No postgres provider
	// runs: database keys wait for its entries.
	if p := kept.Provisions["control.redis.credential.redis_cache"]; p.State != mesh.Provided || p.Reference == nil || p.Reference.Generation != 1 {
		t.Errorf("redis' shared credential = %+v; want provided by the vault, generation 1", p)
	}
	if p := kept.Provisions["ace.gitea.cache"]; p.State != mesh.Provided || p.Provider.Module != "redis" {
		t.Errorf("ace.gitea.cache = %+v; want provided by redis", p)
	}
	if p := kept.Provisions["ace.gitea.database.main"]; p.State != mesh.Asked || !strings.Contains(p.Why, "postgres_bound") {
		t.Errorf("ace.gitea.database.main = %+v; want asked, waiting for postgres' entry", p)
	}
	// up --once prints the settled final state: the vault runs beside the
	// seat, and every key it answers is printed as its entry says, none as
	// the seat judged it before the vault's last entries reached it.
	vaultKeys := 0
	for k, p := range kept.Provisions {
		if p.Provider.Module != mesh.VaultModule {
			continue
		}
		vaultKeys++
		if p.State != mesh.Provided {
			t.Errorf("%s = %s (%s); want provided by the vault", k, p.State, p.Why)
		}
	}
	if vaultKeys == 0 {
		t.Error("no key answered by the vault printed")
	}

	// Every module's folders exist under its node's root.
	for key, plan := range kept.Plans {
		for _, d := range plan.Dirs {
			dir := filepath.Join(data, "nodes", plan.Node, plan.Module, d.Name)
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				t.Errorf("plan %s: folder %s missing: %v", key, dir, err)
			}
		}
	}
	// up made the mesh's users; the operator's credentials are its alone.
	for _, user := range []string{access.DefaultOperator, "mesh-provisioner", "client-ace", "mesh-vault"} {
		if st, err := os.Stat(auth.CredsPath(filepath.Join(data, cli.AuthDir), user)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("up's credentials of %s: %v; want mode 0600", user, err)
		}
	}
	// Ports are distinct per node.
	first := appliedOf(t, data)
	if len(first) != 18 {
		t.Fatalf("%d applied records; want 18", len(first))
	}
	used := map[string]map[int]string{}
	for key, a := range first {
		k, _ := mesh.ParseNodeModule(key)
		if used[k.Node] == nil {
			used[k.Node] = map[int]string{}
		}
		for name, port := range a.Ports {
			if other, dup := used[k.Node][port]; dup {
				t.Errorf("port %d on %s given twice: %s and %s.%s", port, k.Node, other, key, name)
			}
			used[k.Node][port] = key + "." + name
		}
	}
	// Again on the same store: the same ports.
	if _, _, err := run(t, "up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"); err != nil {
		t.Fatalf("up --once again: %v", err)
	}
	again := appliedOf(t, data)
	for key, a := range first {
		for name, port := range a.Ports {
			if again[key].Ports[name] != port {
				t.Errorf("%s port %s = %d after a restart; was %d", key, name, again[key].Ports[name], port)
			}
		}
	}
}

// With PostgreSQL the homelab ends with every database and credential key
// provided, and each consumer's role logs in with its vault credential.
func TestUpOnceHomelabWithPostgres(t *testing.T) {
	t.Parallel()
	pg := pgtest.Start(t)
	data := t.TempDir()
	out, _, err := run(t, "up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0", "--postgres", pg.DSN)
	if err != nil {
		t.Fatalf("up --once --postgres: %v", err)
	}
	var kept struct {
		Provisions map[string]mesh.Provision `json:"provisions"`
	}
	if err := json.Unmarshal([]byte(out), &kept); err != nil {
		t.Fatalf("no JSON: %v", err)
	}
	databases, credentials := 0, 0
	for key, p := range kept.Provisions {
		k, _ := mesh.ParseProvisionKey(key)
		switch {
		case k.Provision == "database":
			databases++
		case k.Provision == mesh.CredentialProvision:
			credentials++
		default:
			continue
		}
		if p.State != mesh.Provided || p.Reference == nil {
			t.Errorf("%s = %s (%s); want provided with a reference", key, p.State, p.Why)
		}
	}
	if databases != 8 || credentials != 15 {
		t.Errorf("%d database and %d credential keys; want 8 and 15", databases, credentials)
	}
	// The roles exist in the server.
	conn, err := pgx.Connect(context.Background(), pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var roles int
	if err := conn.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_roles WHERE rolname IN ('homelab_ace_gitea_main','homelab_ace_vaultwarden','homelab_control_keycloak','homelab_g14_grafana',
		'homelab_g14_nextcloud_main','homelab_shanks_immich','homelab_shanks_matrix-synapse','homelab_shanks_woodpecker')`).Scan(&roles); err != nil {
		t.Fatal(err)
	}
	if roles != 8 {
		t.Errorf("%d of the 8 consumers' roles exist, named after the mesh homelab (the mesh file's mesh:)", roles)
	}
}

// TestUpRestartWithPostgresKeepsTheMeshName checks that up --postgres
// restarted with no file on the data directory of a mesh named prod makes
// its roles under prod, as up prod.yaml did, and none under the bundled
// example's name homelab (which it used to: found by review).
func TestUpRestartWithPostgresKeepsTheMeshName(t *testing.T) {
	t.Parallel()
	pg := pgtest.Start(t)
	data := t.TempDir()
	path := filepath.Join(t.TempDir(), "prod.yaml")
	text := strings.Replace(string(examples.Homelab), "mesh: homelab", "mesh: prod", 1)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	roles := func(prefix string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_roles WHERE starts_with(rolname, $1)`, prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, file := range [][]string{{path}, {}} {
		args := append([]string{"up", "--once", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error", "--postgres", pg.DSN}, file...)
		if _, _, err := run(t, args...); err != nil {
			t.Fatalf("up %v: %v", file, err)
		}
		if prod, homelab := roles("prod_"), roles("homelab_"); prod != 8 || homelab != 0 {
			t.Errorf("after up %v: %d roles prod_* and %d homelab_*; want the 8 consumers' under prod only", file, prod, homelab)
		}
	}
}

// up with a postgres provider needs the mesh's name: a file without mesh:
// and no --mesh-name is refused before anything starts, and so is a
// --mesh-name that is not a name.
func TestUpPostgresNeedsAMeshName(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "nameless.yaml")
	text := strings.Replace(string(examples.Homelab), "mesh: homelab", "", 1)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	dsn := "host=127.0.0.1 port=1 user=postgres sslmode=disable"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no name", []string{file}, file + ` names no mesh: add "mesh: NAME" to it or pass --mesh-name NAME`},
		{"bad flag", []string{file, "--mesh-name", "Home_Lab"}, `--mesh-name "Home_Lab" is not a valid name`},
		{"bad flag over the file's name", []string{"--mesh-name", "a.b"}, `--mesh-name "a.b" is not a valid name`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"up", "--once", "--data", data, "--listen", "127.0.0.1:0", "--postgres", dsn}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("up %v = %v; want an error with %q", c.args, err, c.want)
			}
			if _, err := os.Stat(filepath.Join(data, "nats")); err == nil {
				t.Errorf("up %v started a server before refusing", c.args)
			}
		})
	}
}

// Two up processes never share one data directory: while one runs (it
// holds DATA/lock), a second fails at once naming the directory and the
// first one's pid; once the first has stopped, the directory is free.
func TestUpRefusesADataDirectoryInUse(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, _, err := runCmd(ctx, "up", "--data", data, "--listen", "127.0.0.1:0", "--clients=false")
		first <- err
	}()
	lockPath := filepath.Join(data, cli.DataLock)
	bustest.WaitFor(t, 0, "the first up holds "+lockPath, func() bool {
		select {
		case err := <-first:
			t.Fatalf("the first up ended before it held the lock: %v", err)
		default:
		}
		// Probing with Take could take the lock before the first up does;
		// the pid is written only by the up that holds it.
		b, _ := os.ReadFile(lockPath)
		return string(b) == fmt.Sprintf("%d\n", os.Getpid())
	})

	_, _, err := run(t, "up", "--once", "--data", data, "--listen", "127.0.0.1:0")
	if want := fmt.Sprintf("%s is in use by another up (pid %d)", data, os.Getpid()); err == nil || err.Error() != want {
		t.Errorf("a second up on %s = %v; want %q", data, err, want)
	}
	if _, err := lockfile.Take(lockPath); !errors.As(err, new(*lockfile.HeldError)) {
		t.Errorf("Take(%s) while the first up runs = %v; want it held", lockPath, err)
	}

	cancel()
	if err := <-first; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("the first up ended with %v", err)
	}
	l, err := lockfile.Take(lockPath)
	if err != nil {
		t.Fatalf("%s after the first up stopped: %v; want it free", lockPath, err)
	}
	l.Release()
}

// TestUpOnceWithoutClientsWritesEveryUsersCreds runs up --once with no
// node clients, whose credentials files up writes while its server starts:
// when it returns, every party of the homelab has its file, with a user
// key in it.
func TestUpOnceWithoutClientsWritesEveryUsersCreds(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	if _, _, err := run(t, "up", "--once", "--data", data, "--listen", "127.0.0.1:0", "--clients=false"); err != nil {
		t.Fatalf("up --once: %v", err)
	}
	f, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, nil))
	if err != nil {
		t.Fatal(err)
	}
	clients := 0
	for _, p := range parties {
		if p.Has(access.Client) {
			clients++
		}
		b, err := os.ReadFile(auth.CredsPath(filepath.Join(data, cli.AuthDir), p.User))
		if err != nil {
			t.Errorf("%s: %v", p.User, err)
			continue
		}
		if _, err := jwt.ParseDecoratedUserNKey(b); err != nil {
			t.Errorf("%s's credentials: %v", p.User, err)
		}
	}
	if clients != len(f.Nodes) || clients == 0 {
		t.Errorf("%d clients among the parties; want one per node (%d)", clients, len(f.Nodes))
	}
}

// syncBuffer is a bytes.Buffer a test reads while a command writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestUpSaysItStopped runs up until it says it is running, then ends its
// context (as Ctrl-C does): up returns and its last line says it stopped,
// once its components did.
func TestUpSaysItStopped(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		root := cli.Root()
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetArgs([]string{"up", "--data", data, "--listen", "127.0.0.1:0", "--clients=false", "--log-level", "error"})
		done <- root.ExecuteContext(ctx)
	}()
	bustest.WaitFor(t, time.Minute, "up running", func() bool {
		select {
		case err := <-done:
			t.Fatalf("up ended before it ran: %v\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), "up: running; Ctrl-C stops\n")
	})
	if strings.Contains(out.String(), "up: stopped") {
		t.Fatalf("up says it stopped while it runs:\n%s", out.String())
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("up ended with %v", err)
	}
	if !strings.HasSuffix(out.String(), "\nup: stopped; its components stopped\n") {
		t.Errorf("up's output after its context ended:\n%s\nwant its last line to say it stopped", out.String())
	}
}
