package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestUpRestartKeepsTheMesh checks that up with no file on a data
// directory that holds a mesh runs that mesh, not the bundled example.
func TestUpRestartKeepsTheMesh(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	path := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(path, []byte(smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	plans := func(args ...string) map[string]json.RawMessage {
		t.Helper()
		args = append([]string{"up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)
		out, _, err := run(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var kept struct {
			Plans map[string]json.RawMessage `json:"plans"`
		}
		if err := json.Unmarshal([]byte(out), &kept); err != nil {
			t.Fatalf("%v printed %s: %v", args, out, err)
		}
		return kept.Plans
	}
	if got := plans(path); len(got) != 1 || got["control.mesh-vault"] == nil {
		t.Fatalf("up small.yaml kept plans %v; want control.mesh-vault only", got)
	}
	if got := plans(); len(got) != 1 || got["control.mesh-vault"] == nil {
		t.Errorf("up with no file on a data directory holding a mesh kept plans %v; want control.mesh-vault only, not the bundled example", got)
	}
}

// TestUpRestartDecidesFromTheLiveMesh checks that up with no file on a
// data directory that holds a 150-node mesh decides what depends on the
// mesh from that mesh, not from the bundled example's 4 nodes: it counts 150
// nodes and runs no node clients (more than assemble.MaxAutoClients nodes, no
// --clients). It used to start 150 clients. The memory limit's floor is the
// same 256 MiB for 150 nodes and for 4, so the runs show it only through the
// node count; a live mesh of 2000 placed nodes, read as a restart reads it
// (assemble.LiveFile of the bundled example), is decided directly: 500 MiB, not the
// example's 256.
func TestUpRestartDecidesFromTheLiveMesh(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	path := filepath.Join(t.TempDir(), "g150.yaml")
	if _, _, err := run(t, "gen", "--nodes", "150", "--modules", "1", "-o", path); err != nil {
		t.Fatal(err)
	}
	var got []assemble.Decision
	seen := testHooks{upDecided: func(d assemble.Decision) { got = append(got, d) }}
	for _, args := range [][]string{{path}, {}} {
		args = append([]string{"up", "--once", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)
		if _, _, err := runWith(t, seen, args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	if len(got) != 2 {
		t.Fatalf("up decided %d times in 2 runs: %+v", len(got), got)
	}
	want := assemble.Decision{Nodes: 150, Budget: assemble.MemoryBudget(150), AutoNoClients: true}
	for i, what := range []string{"up g150.yaml", "up with no file"} {
		if got[i] != want {
			t.Errorf("%s decided %+v; want %+v", what, got[i], want)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "nodes")); err == nil {
		t.Errorf("up ran node clients (%s exists) for a mesh of 150 nodes", filepath.Join(data, "nodes"))
	}

	example, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string][]byte{}
	for i := range 2000 {
		placed[fmt.Sprintf("n%d", i)] = []byte(`{"modules":[{"module":"mesh-vault"}]}`)
	}
	d, err := decideMesh(assemble.LiveFile(example, placed), upFlags{data: data, clients: true}, true, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Nodes != 2000 || d.Budget != 500<<20 || !d.AutoNoClients || d.Clients {
		t.Errorf("decideMesh of a live mesh of 2000 nodes = %+v; want 2000 nodes, a budget of %d bytes (500 MiB), no clients", d, 500<<20)
	}
	if small := assemble.MemoryBudget(len(example.Nodes)); d.Budget == small {
		t.Errorf("the budget of 2000 nodes equals the bundled example's (%d bytes): the check above tells nothing", small)
	}
}

// TestUpRestartKeepsTheMeshName checks that up FILE keeps the mesh's name
// in DATA/mesh-name, that a restart with no file takes it from there (not
// from the bundled example's mesh: homelab), that a --mesh-name that
// contradicts it is refused, and that up --postgres with no file and no
// name kept is refused rather than run under another mesh's name; and that
// up FILE says on stderr when the file renames the mesh, and only then.
func TestUpRestartKeepsTheMeshName(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	path := filepath.Join(t.TempDir(), "prod.yaml")
	if err := os.WriteFile(path, []byte("mesh: prod\n"+smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []assemble.Decision
	seen := testHooks{upDecided: func(d assemble.Decision) { got = append(got, d) }}
	var stderr string
	up := func(args ...string) (err error) {
		t.Helper()
		_, stderr, err = runWith(t, seen, append([]string{"up", "--once", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)...)
		return err
	}
	kept := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(data, MeshNameFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := up(path); err != nil {
		t.Fatal(err)
	}
	if k := kept(); k != "prod\n" {
		t.Errorf("up prod.yaml kept the name %q; want prod", k)
	}
	if err := up(); err != nil {
		t.Fatalf("up with no file: %v", err)
	}
	if n := len(got); n != 2 || got[1].Name != "prod" {
		t.Errorf("up with no file decided %+v; want the name prod", got)
	}

	err := up("--mesh-name", "other")
	if want := `--mesh-name "other": the mesh in ` + data + ` is named "prod"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("up --mesh-name other with no file = %v; want an error with %q", err, want)
	}
	if k := kept(); k != "prod\n" {
		t.Errorf("a refused --mesh-name left the kept name %q; want prod", k)
	}
	if err := up("--mesh-name", "prod"); err != nil {
		t.Errorf("up --mesh-name prod (the kept name) with no file: %v", err)
	}

	// A data directory an older up ran keeps no name.
	if err := os.Remove(filepath.Join(data, MeshNameFile)); err != nil {
		t.Fatal(err)
	}
	err = up("--postgres", "host=127.0.0.1 port=1 user=postgres sslmode=disable")
	if want := "--postgres: the mesh in " + data + " has no name that up knows"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("up --postgres with no file and no name kept = %v; want an error with %q", err, want)
	}
	// Told it, a restart keeps it.
	if err := up("--mesh-name", "prod"); err != nil {
		t.Fatal(err)
	}
	if k := kept(); k != "prod\n" {
		t.Errorf("up --mesh-name prod with no name kept kept %q; want prod", k)
	}
	// A file with no name leaves none kept: a restart never runs it under
	// the name of the mesh before.
	unnamed := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(unnamed, []byte(smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := up(unnamed); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, MeshNameFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("up small.yaml (no mesh:) after prod left %s (%v); want it removed", MeshNameFile, err)
	}
	// up MESHFILE says that it renames the mesh (it used to say nothing:
	// the kept name was read only with no file).
	if want := `up: the mesh in ` + data + ` was named "prod" and is now without a name`; !strings.Contains(stderr, want) {
		t.Errorf("up small.yaml after prod said on stderr:\n%s\nwant a line with %q", stderr, want)
	}
	if err := up(path); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr, "was named") {
		t.Errorf("up prod.yaml over a mesh without a name said on stderr:\n%s\nwant no rename (none was kept)", stderr)
	}
	if err := up(path); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr, "was named") {
		t.Errorf("up prod.yaml over prod said on stderr:\n%s\nwant no rename", stderr)
	}
}

// TestUpRestartAfterAnInterruptedApply checks that up with no file on a
// data directory whose first apply was cut short (the mesh's modules,
// builds and wants written, its placement not yet) runs what is there and
// never applies the bundled example over it. Found by killing up with
// SIGKILL 12 s into the cold start of gen --nodes 1000 on a loaded machine:
// the restart with no file said "applied bundled example homelab.yaml: 66
// written, 10 unchanged, 9209 removed", then failed on client-ace.creds.
func TestUpRestartAfterAnInterruptedApply(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	path := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(path, []byte(smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	up := func(args ...string) (map[string]json.RawMessage, error) {
		t.Helper()
		args = append([]string{"up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)
		out, _, err := run(t, args...)
		if err != nil {
			return nil, err
		}
		var kept struct {
			Plans map[string]json.RawMessage `json:"plans"`
		}
		if err := json.Unmarshal([]byte(out), &kept); err != nil {
			t.Fatalf("%v printed %s: %v", args, out, err)
		}
		return kept.Plans, nil
	}
	if _, err := up(path); err != nil {
		t.Fatal(err)
	}
	// The apply cut short: the placement bucket holds no key.
	srv, err := bus.StartServer(bus.ServerConfig{Dir: filepath.Join(data, "nats"), Listen: "127.0.0.1:0",
		ConfigFile: filepath.Join(data, AuthDir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	nc, js, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "operator",
		Creds: auth.CredsPath(filepath.Join(data, AuthDir), access.DefaultOperator)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := bustest.Context(t)
	kv, err := js.KeyValue(ctx, mesh.PlacementBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) == 0 {
		t.Fatalf("placement keys %v, %v", keys, err)
	}
	for _, k := range keys {
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	srv.Shutdown()

	plans, err := up()
	if err != nil {
		t.Fatalf("up with no file after an interrupted apply: %v", err)
	}
	for key := range plans {
		if !strings.HasPrefix(key, "control.") {
			t.Errorf("up with no file after an interrupted apply kept plan %s: the bundled example was applied over the mesh", key)
		}
	}
}

// TestUpWithNoFileOnUsersOfAnotherMesh checks that up with no file on a
// data directory whose users were made for another mesh file (up FILE
// stopped before its apply wrote a key) refuses, naming what to run, and
// writes nothing: it used to apply the bundled example and then fail on
// the missing client-ace.creds, and to fail so at every later start.
func TestUpWithNoFileOnUsersOfAnotherMesh(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	small, err := meshfile.Parse("small.yaml", []byte(smallMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(small, nil))
	if err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(data, "nats")
	if _, err := auth.Gen(filepath.Join(data, AuthDir), parties, auth.Options{StoreDir: store, Source: "small.yaml"}); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, "up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error")
	if err == nil || !strings.Contains(err.Error(), "up MESHFILE") {
		t.Fatalf("up with no file on the users of another mesh: %v; want a refusal naming up MESHFILE", err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Dir: store, Listen: "127.0.0.1:0",
		ConfigFile: filepath.Join(data, AuthDir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, js, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "operator",
		Creds: auth.CredsPath(filepath.Join(data, AuthDir), access.DefaultOperator)})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	current, err := meshfile.Current(bustest.Context(t), js)
	if err != nil {
		t.Fatal(err)
	}
	for bucket, keys := range current {
		if len(keys) > 0 {
			t.Errorf("%s holds %d keys after the refusal; want none", bucket, len(keys))
		}
	}
}

// TestUpWithNoFileMendsTheClientsCreds checks that up with no file on a
// data directory whose last up stopped before it wrote the node clients'
// credentials (they are written after the server starts: Gen with Later,
// and its WriteLater never done) writes them, says so on stderr, and runs
// the mesh with its clients. It used to take the configuration as whole
// and fail at every start on the missing client-control.creds.
func TestUpWithNoFileMendsTheClientsCreds(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	path := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(path, []byte(smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error"}
	if _, _, err := run(t, append(args, "--clients=false", path)...); err != nil {
		t.Fatal(err)
	}
	// The last up's Gen, stopped before WriteLater: the client's key is
	// new (its file is gone), its file never written.
	small, err := meshfile.Parse("small.yaml", []byte(smallMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(small, nil))
	if err != nil {
		t.Fatal(err)
	}
	authDir := filepath.Join(data, AuthDir)
	client := auth.CredsPath(authDir, access.ClientUser("control"))
	if err := os.Remove(client); err != nil {
		t.Fatal(err)
	}
	later := func(user string) bool { return user == access.ClientUser("control") }
	if _, err := auth.Gen(authDir, parties, auth.Options{StoreDir: filepath.Join(data, "nats"), Source: path, Later: later}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(client); err == nil {
		t.Fatalf("%s written by a Gen whose WriteLater was not run", client)
	}

	_, stderr, err := run(t, args...)
	if err != nil {
		t.Fatalf("up with no file after an up stopped before it wrote the clients' credentials: %v", err)
	}
	if want := "written now in " + authDir + ": client-control"; !strings.Contains(stderr, want) {
		t.Errorf("up's stderr:\n%s\nwant it to say %q", stderr, want)
	}
	if _, err := os.Stat(client); err != nil {
		t.Errorf("%s after up: %v", client, err)
	}
	if _, stderr, err := run(t, args...); err != nil || strings.Contains(stderr, "written now") {
		t.Errorf("up again: %v, stderr:\n%s\nwant nothing written", err, stderr)
	}
}

func TestListenWarning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		listen string
		warns  bool
	}{
		{"127.0.0.1:4222", false}, {"localhost:4222", false}, {"[::1]:4222", false},
		{"0.0.0.0:4222", true}, {"192.168.1.5:4222", true}, {":4222", true},
	} {
		if got := listenWarning(tc.listen); (got != "") != tc.warns {
			t.Errorf("listenWarning(%q) = %q; want a warning %v", tc.listen, got, tc.warns)
		}
	}
}

// TestSummaryOnlyChangedNodes checks that up's running summary prints only
// the nodes whose row changed since it was last printed.
func TestSummaryOnlyChangedNodes(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "test")
	all := map[string]map[string]json.RawMessage{
		"plans": {"ace.gitea": json.RawMessage(`{}`), "g14.grafana": json.RawMessage(`{}`)},
		"provisions": {
			"ace.gitea.cache":      json.RawMessage(`{"state":"asked"}`),
			"g14.grafana.database": json.RawMessage(`{"state":"asked"}`),
		},
	}
	shown := map[string]string{}
	var first, second bytes.Buffer
	if err := writeSummary(bustest.Context(t), &first, js, all, "--nats "+s.URL(), shown); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first.String(), "\nace ") || !strings.Contains(first.String(), "\ng14 ") {
		t.Fatalf("first summary:\n%s\nwant both nodes", first.String())
	}
	all["provisions"]["g14.grafana.database"] = json.RawMessage(`{"state":"provided"}`)
	if err := writeSummary(bustest.Context(t), &second, js, all, "--nats "+s.URL(), shown); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(second.String(), "\nace ") || !strings.Contains(second.String(), "\ng14 ") {
		t.Errorf("summary after g14 changed:\n%s\nwant g14's row only", second.String())
	}
}

// TestSummaryAsksLineHasTheOperatorsCreds checks that up's running summary
// tells the asks command with the operator's --creds when up runs with
// auth (the same flags as the start banner, from operatorFlags), and with
// --nats alone without auth.
func TestSummaryAsksLineHasTheOperatorsCreds(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "test")
	records, err := bus.Bucket(bustest.Context(t), js, mesh.RecordsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := records.Put(bustest.Context(t), "ace.gitea.cache", []byte(`{"state":"open"}`)); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "auth", "operator.creds")
	for _, tc := range []struct{ creds, want string }{
		{creds, "1 ask open for the operator: mesh-provisioner asks --nats " + s.URL() + " --creds " + creds + "\n"},
		{"", "1 ask open for the operator: mesh-provisioner asks --nats " + s.URL() + "\n"},
	} {
		var out bytes.Buffer
		if err := writeSummary(bustest.Context(t), &out, js, nil, operatorFlags(s.URL(), tc.creds), nil); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("summary with creds %q:\n%s\nwant the line %q", tc.creds, out.String(), tc.want)
		}
	}
}

// TestUpRefusesTheOtherModesData checks that a data directory run with
// --no-auth and started again without it (and one run with users, started
// again with --no-auth) is refused as a usage error saying how it was run
// and what to do, and nothing of it changes: the bundled example is not
// applied into the other mode's empty store, the kept name stays, the
// vault's store does not move, and the mesh runs again in its own mode.
func TestUpRefusesTheOtherModesData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(path, []byte("mesh: shop\n"+smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	up := func(data string, args ...string) error {
		t.Helper()
		args = append([]string{"up", "--once", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)
		_, _, err := run(t, args...)
		return err
	}
	accounts := func(data string) []string {
		t.Helper()
		entries, err := os.ReadDir(filepath.Join(data, "nats", "jetstream"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	for _, tc := range []struct {
		name        string
		first, then []string
		want        string
	}{
		{"no-auth then users", []string{"--no-auth", path}, nil,
			"%s holds a mesh run without users (up --no-auth; its buckets are in %s), which a server with users does not see: " +
				"run \"up --no-auth\" to run it, or give --data another directory for a mesh with users"},
		{"users then no-auth", []string{path}, []string{"--no-auth"},
			"--no-auth: %s holds a mesh run with users (its buckets are in %s), which a server without users does not see: " +
				"run \"up\" without --no-auth to run it, or give --data another directory for a mesh without users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			if err := up(data, tc.first...); err != nil {
				t.Fatal(err)
			}
			before := accounts(data)
			if len(before) != 1 {
				t.Fatalf("the store holds accounts %v after one up; want one", before)
			}
			for _, then := range [][]string{tc.then, append(append([]string{}, tc.then...), path)} {
				err := up(data, then...)
				want := fmt.Sprintf(tc.want, data, filepath.Join(data, "nats", "jetstream", before[0]))
				if err == nil || err.Error() != want || !isUsage(err) {
					t.Fatalf("up %v on the other mode's data: %v (usage %v); want the usage error %q", then, err, err != nil && isUsage(err), want)
				}
			}
			if got := accounts(data); len(got) != 1 || got[0] != before[0] {
				t.Errorf("the store holds accounts %v after the refused ups; want %v alone", got, before)
			}
			if name, err := os.ReadFile(filepath.Join(data, MeshNameFile)); err != nil || string(name) != "shop\n" {
				t.Errorf("%s holds %q (%v) after the refused ups; want shop", MeshNameFile, name, err)
			}
			if _, err := os.Stat(filepath.Join(data, "vault", "control")); err != nil {
				t.Errorf("the vault's store moved from control: %v", err)
			}
			if err := up(data, tc.first[:len(tc.first)-1]...); err != nil {
				t.Errorf("up in the mode the mesh was run in: %v", err)
			}
		})
	}
}

// TestUpFileAsksBeforeRemovingMost checks that up FILE on a data directory
// holding a mesh that FILE no longer places most of is refused as apply -f
// refuses it with no terminal to ask on (how many keys it removes, which
// modules it unplaces, give --yes), and writes nothing: up with no file
// runs the homelab still. With --yes it is applied.
func TestUpFileAsksBeforeRemovingMost(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	path := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(path, []byte(smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	up := func(args ...string) (map[string]json.RawMessage, string, error) {
		t.Helper()
		args = append([]string{"up", "--once", "-o", "json", "--no-auth", "--data", data, "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)
		out, errOut, err := run(t, args...)
		if err != nil {
			return nil, "", err
		}
		var kept struct {
			Plans map[string]json.RawMessage `json:"plans"`
		}
		if err := json.Unmarshal([]byte(out), &kept); err != nil {
			t.Fatalf("%v printed %s: %v", args, out, err)
		}
		return kept.Plans, errOut, nil
	}
	if _, _, err := up(); err != nil {
		t.Fatal(err)
	}
	_, _, err := up(path)
	want := "up: " + path + " removes 28 keys of placement, wants and haves; 17 of 18 placed modules are no longer placed " +
		"(ace.gitea, ace.node-tools, ace.vaultwarden, control.keycloak, control.node-tools, control.postgres, control.redis, control.route-proxy and 9 more): " +
		"not confirmed; nothing written (stdin is not a terminal: give --yes to apply it)"
	if err == nil || err.Error() != want || isUsage(err) {
		t.Fatalf("up of a file unplacing most = %v; want %q", err, want)
	}
	plans, _, err := up()
	if err != nil {
		t.Fatal(err)
	}
	if plans["ace.gitea"] == nil || plans["control.mesh-vault"] == nil {
		t.Errorf("up with no file after the refused up FILE kept plans %d, without ace.gitea or control.mesh-vault; want the homelab's", len(plans))
	}
	plans, said, err := up("--yes", path)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 1 || plans["control.mesh-vault"] == nil || !strings.Contains(said, "28 removed") {
		t.Errorf("up --yes FILE kept %d plans and said %q; want control.mesh-vault alone, 28 removed", len(plans), said)
	}
}
