package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// asMain is the environment variable that makes the test binary run the
// command line instead of the tests: the processes of a deployment are
// this binary, started again.
const asMain = "MESH_PROVISIONER_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main()
	}
	// The tests wait on processes and servers far more than they compute
	// (the package's run takes about a sixth of a core): four run at once
	// unless -parallel says otherwise, not GOMAXPROCS (two on CI).
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", "4"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// process is one component running as an OS process of its own.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // how it exited, once done
	// killed is set once the test killed it (see kill): its exit is
	// then no failure.
	killed bool

	mu  sync.Mutex
	out bytes.Buffer // stdout and stderr
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start runs this binary with args as a process of its own. In t.Cleanup
// (before the server stops) it is sent SIGTERM and must exit 0 within 10 s;
// its output is logged when t failed.
func start(t *testing.T, name string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	return startCmd(t, name, cmd)
}

// startCmd runs cmd as a process of its own, stopped as [start] says.
func startCmd(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	args := cmd.Args[1:]
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.done:
			p.mu.Lock()
			killed := p.killed
			p.mu.Unlock()
			if p.err != nil && !killed {
				t.Errorf("%s %s: on SIGTERM it exited with %v; want 0", name, strings.Join(args, " "), p.err)
			}
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("%s did not stop within 10 s of SIGTERM", name)
		}
		if t.Failed() || os.Getenv("DEPLOY_LOG") != "" {
			t.Logf("output of %s:\n%s", name, p.output())
		}
	})
	return p
}

// waitFor polls cond until it holds, failing t after d (0 means 30 s: a
// race-built process or nats-server starting on a loaded machine took over
// 10 s); it fails at once when one of procs has exited.
func waitFor(t *testing.T, d time.Duration, what string, procs []*process, cond func() bool) {
	t.Helper()
	if d == 0 {
		d = 30 * time.Second
	}
	bustest.WaitFor(t, d, what, func() bool {
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("while waiting for %s: %s exited: %v", what, p.name, p.err)
			}
		}
		return cond()
	})
}

// The homelab's credential provisions: the vault provides every one.
var homelabCredentials = []string{
	"ace.gitea.credential.gitea_gitea-read",
	"ace.gitea.credential.keycloak_oidc-client",
	"ace.gitea.credential.postgres_database_main",
	"ace.vaultwarden.credential.postgres_database",
	"control.keycloak.credential.postgres_database",
	"control.redis.credential.redis_cache",
	"g14.grafana.credential.keycloak_oidc-client",
	"g14.grafana.credential.postgres_database",
	"g14.nextcloud.credential.keycloak_oidc-client",
	"g14.nextcloud.credential.postgres_database_main",
	"shanks.immich.credential.postgres_database",
	"shanks.matrix-synapse.credential.keycloak_oidc-client",
	"shanks.matrix-synapse.credential.postgres_database",
	"shanks.woodpecker.credential.gitea_forge-account",
	"shanks.woodpecker.credential.postgres_database",
}

// A deployment beyond one machine: the vault, a node's client, the ask
// router and the seat each run as an OS process of their own ("vault",
// "client", "router", "serve"), against one standalone NATS server, started
// in that order: the vault and the client start before the seat has made
// the buckets they follow, and say that they wait for them. The homelab
// mesh applied, every credential provision turns provided, ace's client
// applies every plan of ace, and removing vaultwarden from ace raises asks
// that the router records.
func TestDeploymentOfSeparateProcesses(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t)
	deploy(t, srv.URL(), func(string) []string { return nil })
}

// The same deployment with the users "auth gen" makes: the server runs the
// generated configuration, and each process connects with its own
// party's credentials file (--creds), the operator with operator.creds.
func TestDeploymentOfSeparateProcessesAsTheirUsers(t *testing.T) {
	t.Parallel()
	file, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	parties, err := access.Parties(auth.MeshOf(file, []string{"operator"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Dir: filepath.Join(dir, "jetstream"), Listen: "127.0.0.1:0", ConfigFile: res.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	deploy(t, srv.URL(), func(user string) []string { return []string{"--creds", auth.CredsPath(dir, user)} })
}

// deploy runs the deployment of TestDeploymentOfSeparateProcesses against
// the server at url; creds gives the flags that connect as a user.
func deploy(t *testing.T, url string, creds func(user string) []string) {
	opCreds := ""
	if c := creds("operator"); len(c) == 2 {
		opCreds = c[1]
	}
	nc, js, err := bus.Connect(bus.Dial{URL: url, Name: "operator", Creds: opCreds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx := bustest.Context(t) // stops the test's copies before their connection closes
	root := filepath.Join(t.TempDir(), "ace")
	cmd := func(user string, args ...string) []string {
		return append(append(args, "--nats", url), creds(user)...)
	}

	vault := start(t, "vault", cmd(mesh.VaultModule, "vault", "--node", "control", "--data", t.TempDir())...)
	client := start(t, "client", cmd("client-ace", "client", "--node", "ace", "--root", root)...)
	waitFor(t, 0, "the vault and the client to say they wait for the seat's buckets", []*process{vault, client}, func() bool {
		return strings.Contains(vault.output(), "waiting for a bucket the seat makes") &&
			strings.Contains(client.output(), "waiting for a bucket the seat makes")
	})
	router := start(t, "router", cmd("mesh-asks", "router")...)
	seat := start(t, "seat", cmd(mesh.Module, "serve")...)
	procs := []*process{vault, client, router, seat}

	file, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	// The seat alone makes the buckets (with the mesh's users): the
	// operator waits for them, as apply does.
	for _, b := range meshfile.Buckets {
		if _, err := bus.AwaitBucket(ctx, js, b, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := meshfile.Apply(ctx, js, file, time.Now()); err != nil {
		t.Fatal(err)
	}
	provisions := bus.Follow(ctx, js, mesh.ProvisionsBucket, bus.Options{Create: true})
	plans := bus.Follow(ctx, js, mesh.PlansBucket, bus.Options{Create: true})
	applied := bus.Follow(ctx, js, mesh.AppliedBucket, bus.Options{Create: true})
	records := bus.Follow(ctx, js, mesh.RecordsBucket, bus.Options{Create: true})
	provision := func(key string) (mesh.Provision, bool) {
		it, ok := provisions.Get(key)
		var p mesh.Provision
		return p, ok && json.Unmarshal(it.Value, &p) == nil
	}

	// Every credential provision is provided, and there are no others.
	waitFor(t, 15*time.Second, "every credential provision provided", procs, func() bool {
		for _, k := range homelabCredentials {
			if p, ok := provision(k); !ok || p.State != mesh.Provided {
				return false
			}
		}
		return true
	})
	var credentials []string
	provisions.Range(func(key string, _ bus.Item) bool {
		if k, err := mesh.ParseProvisionKey(key); err == nil && k.Provision == mesh.CredentialProvision {
			credentials = append(credentials, key)
		}
		return true
	})
	sort.Strings(credentials)
	if got, want := strings.Join(credentials, "\n"), strings.Join(homelabCredentials, "\n"); got != want {
		t.Errorf("credential provisions:\n%s\nwant\n%s", got, want)
	}

	// ace's client has applied each of ace's plans at its build, and made
	// its folders under its root.
	acePlans := []string{"ace.gitea", "ace.node-tools", "ace.vaultwarden"}
	waitFor(t, 0, "ace's client to apply "+strings.Join(acePlans, ", "), procs, func() bool {
		for _, k := range acePlans {
			pi, ok := plans.Get(k)
			ai, ok2 := applied.Get(k)
			var p mesh.Plan
			var a mesh.Applied
			if !ok || !ok2 || json.Unmarshal(pi.Value, &p) != nil || json.Unmarshal(ai.Value, &a) != nil || a.Fingerprint != p.Fingerprint {
				return false
			}
		}
		return true
	})
	for _, dir := range []string{"gitea/state", "vaultwarden/state"} {
		if st, err := os.Stat(filepath.Join(root, dir)); err != nil || !st.IsDir() {
			t.Errorf("ace's client made no folder %s under its root: %v", dir, err)
		}
	}
	applied.Range(func(key string, _ bus.Item) bool {
		if !strings.HasPrefix(key, "ace.") {
			t.Errorf("applied holds %s: only ace's client runs", key)
		}
		return true
	})

	// The router started once the seat had made its records bucket: an
	// ask raised before it subscribed is asked again only at its key's
	// next change.
	waitFor(t, 0, "the router to start", procs, func() bool {
		return strings.Contains(router.output(), "asks: router started")
	})

	// vaultwarden leaves ace: its database and route keys retire, and the
	// router records the seat's ask for each.
	text := string(examples.Homelab)
	for _, cut := range [][2]string{
		{"ace: [gitea, vaultwarden, node-tools]", "ace: [gitea, node-tools]"},
		{"ace: {gitea: b7c100, vaultwarden: 4a4a4a, node-tools: 0d0d01}", "ace: {gitea: b7c100, node-tools: 0d0d01}"},
	} {
		if !strings.Contains(text, cut[0]) {
			t.Fatalf("examples/homelab.yaml no longer holds %q", cut[0])
		}
		text = strings.Replace(text, cut[0], cut[1], 1)
	}
	without, err := meshfile.Parse("homelab-without-vaultwarden.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meshfile.Apply(ctx, js, without, time.Now()); err != nil {
		t.Fatal(err)
	}
	retiring := []string{"ace.vaultwarden.database", "ace.vaultwarden.route"}
	waitFor(t, 0, "the asks of "+strings.Join(retiring, ", ")+" recorded", procs, func() bool {
		for _, k := range retiring {
			p, ok := provision(k)
			if !ok || p.State != mesh.Retiring || p.Ask == "" {
				return false
			}
			it, ok := records.Get(p.Ask)
			var r mesh.Record
			if !ok || json.Unmarshal(it.Value, &r) != nil {
				return false
			}
			if r.State != mesh.RecordOpen || r.Ask.About != "provision."+k || r.Ask.Asker != mesh.Module {
				t.Fatalf("record %s of %s = state %q, about %q, asker %q; want open, about provision.%s, asker %s",
					p.Ask, k, r.State, r.Ask.About, r.Ask.Asker, k, mesh.Module)
			}
		}
		return true
	})
	// No process was refused anything by the server, nor gave up a watch.
	for _, p := range procs {
		for _, said := range []string{"Permissions Violation", "watch gave up"} {
			if strings.Contains(p.output(), said) {
				t.Errorf("%s logged %q", p.name, said)
			}
		}
	}
}
