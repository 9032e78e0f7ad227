package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

const homelabFile = "../../examples/homelab.yaml"

func TestApplyCommand(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	out, errOut, err := run(t, "apply", "-f", homelabFile, "--nats", s.URL())
	if err != nil {
		t.Fatalf("apply = %v (stderr %s)", err, errOut)
	}
	first := strings.SplitN(out, "\n", 2)[0]
	if want := "applied " + homelabFile + ": 76 written, 0 unchanged, 0 removed"; first != want {
		t.Errorf("apply printed %q; want %q", first, want)
	}
	if !strings.Contains(out, "  mesh-assigner_wants: 17 written, 0 unchanged, 0 removed\n") {
		t.Errorf("apply printed no line for the wants bucket:\n%s", out)
	}
	if errOut != "" {
		t.Errorf("apply said on stderr: %s", errOut)
	}
	out, _, err = run(t, "apply", "-f", homelabFile, "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if want := "applied " + homelabFile + ": 0 written, 76 unchanged, 0 removed\n"; out != want {
		t.Errorf("second apply printed %q; want %q", out, want)
	}
}

// TestApplyCommandOneError checks that a file with one error says so in
// the singular.
func TestApplyCommandOneError(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	path := filepath.Join(t.TempDir(), "one.yaml")
	if err := os.WriteFile(path, []byte("nodes: [control]\ncolour: blue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := run(t, "apply", "-f", path, "--nats", s.URL())
	if want := "apply: " + path + " refused with 1 error; nothing written"; err == nil || err.Error() != want {
		t.Errorf("apply = %v; want %q", err, want)
	}
	if want := path + ":2: unknown key \"colour\" (known: mesh, nodes, modules, placement, wants, haves)\n"; errOut != want {
		t.Errorf("stderr = %q; want %q", errOut, want)
	}
}

// TestApplyCommandBroken checks that a broken file is refused whole: every
// error printed with its line, and no bucket even created.
func TestApplyCommandBroken(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	const broken = "../meshfile/testdata/broken.yaml"
	out, errOut, err := run(t, "apply", "-f", broken, "--nats", s.URL())
	if err == nil || !strings.Contains(err.Error(), "refused with 34 errors; nothing written") {
		t.Fatalf("apply = %v; want refused with 34 errors", err)
	}
	if out != "" {
		t.Errorf("apply printed %q on stdout; want nothing", out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 34 {
		t.Errorf("stderr has %d lines; want 34:\n%s", len(lines), errOut)
	}
	for _, want := range []string{
		broken + `:2: node "Bad_Node" is not a valid name`,
		broken + `:3: unknown key "colour"`,
		broken + `:23: module gitea build b7c100: manifest: requires[1]: unknown field "form"`,
		broken + `:47: wants of ace: gitea wants build "ffffff", which gitea does not list (builds: b7c100)`,
		broken + `:55: haves of ace: gitea: health is missing`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	_, js := bustest.Connect(t, s, "test")
	ctx := bustest.Context(t)
	for _, b := range meshfile.Buckets {
		if _, err := js.KeyValue(ctx, b); !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Errorf("bucket %s: %v; want it never created", b, err)
		}
	}
}

func TestApplyCommandUsage(t *testing.T) {
	t.Parallel()
	_, _, err := run(t, "apply")
	if _, ok := errors.AsType[usageError](err); !ok {
		t.Errorf("apply with no -f = %v; want a usage error", err)
	}
	_, _, err = run(t, "apply", "-f", "no-such-file.yaml", "--nats", "nats://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "no-such-file.yaml") {
		t.Errorf("apply of a missing file = %v; want it named", err)
	}
}

func TestGenCommand(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "gen", "--nodes", "20", "--modules", "3", "--seed", "5")
	if err != nil {
		t.Fatal(err)
	}
	f, err := meshfile.Parse("gen", []byte(out))
	if err != nil {
		t.Fatalf("gen output does not parse: %v", err)
	}
	if len(f.Nodes) != 20 || len(f.Placement["node-0019"]) != 4 {
		t.Errorf("gen wrote %d nodes, node-0019 runs %v; want 20 and 4 modules", len(f.Nodes), f.Placement["node-0019"])
	}
	path := t.TempDir() + "/mesh.yaml"
	if _, _, err := run(t, "gen", "--nodes", "3", "-o", path); err != nil {
		t.Fatal(err)
	}
	if _, err := meshfile.ParseFile(path); err != nil {
		t.Errorf("gen -o file does not parse: %v", err)
	}
	if _, _, err := run(t, "gen", "--nodes", "0"); err == nil {
		t.Errorf("gen --nodes 0 succeeded; want a usage error")
	}
}

// smallMesh places only the vault on control: applied over the homelab,
// it no longer places most of the mesh.
const smallMesh = `nodes: [control]
modules:
  mesh-vault:
    builds:
      - fp: 9c0d51
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound, store],
                   reads: [mesh-provisioner.plans, mesh-provisioner.provisions], dirs: [{name: state, unknown: program}]}
placement:
  control: [mesh-vault]
`

// TestApplyAsksBeforeRemovingMost checks that a file that unplaces most of
// the mesh is refused with no terminal to ask on, saying how many keys it
// removes, writes nothing, and is applied with --yes.
func TestApplyAsksBeforeRemovingMost(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	if _, _, err := run(t, "apply", "-f", homelabFile, "--nats", s.URL()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(path, []byte(smallMesh), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "apply", "-f", path, "--nats", s.URL())
	want := "apply: " + path + " removes 28 keys of placement, wants and haves; 17 of 18 placed modules are no longer placed " +
		"(ace.gitea, ace.node-tools, ace.vaultwarden, control.keycloak, control.node-tools, control.postgres, control.redis, control.route-proxy and 9 more): " +
		"not confirmed; nothing written (stdin is not a terminal: give --yes to apply it)"
	if err == nil || err.Error() != want || isUsage(err) {
		t.Fatalf("apply of a file unplacing most = %v; want %q", err, want)
	}
	if out != "" {
		t.Errorf("a refused apply printed %q", out)
	}
	_, js := bustest.Connect(t, s, "test")
	kv, err := js.KeyValue(bustest.Context(t), "mesh-controller_placement")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(bustest.Context(t), "ace"); err != nil {
		t.Errorf("ace's placement after a refused apply: %v; want it kept", err)
	}
	out, _, err = run(t, "apply", "-f", path, "--yes", "--nats", s.URL())
	if err != nil || !strings.Contains(out, "28 removed") {
		t.Fatalf("apply --yes = %q, %v; want 28 removed (the homelab's have of mesh-vault, written by it, too)", out, err)
	}
	if _, err := kv.Get(bustest.Context(t), "ace"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("ace's placement after apply --yes: %v; want it removed", err)
	}
}

// TestApplyReplicas checks that apply --replicas 3 on a three-server
// cluster makes every bucket it writes with three replicas, and that a
// second apply with the default --replicas 1 uses them as they are.
func TestApplyReplicas(t *testing.T) {
	t.Parallel()
	c := bustest.Cluster(t)
	if _, errOut, err := run(t, "apply", "-f", homelabFile, "--nats", c.URL(), "--replicas", "3"); err != nil {
		t.Fatalf("apply --replicas 3 = %v (stderr %s)", err, errOut)
	}
	out, _, err := run(t, "apply", "-f", homelabFile, "--nats", c.URL())
	if err != nil {
		t.Fatal(err)
	}
	if want := "applied " + homelabFile + ": 0 written, 76 unchanged, 0 removed\n"; out != want {
		t.Errorf("second apply printed %q; want %q", out, want)
	}
	_, js := bustest.Connect(t, c.Server(0), "reader")
	ctx := bustest.Context(t)
	for _, b := range meshfile.Buckets {
		str, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatalf("stream of %s: %v", b, err)
		}
		info, err := str.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 {
			t.Errorf("%s has %d replicas; want 3", b, info.Config.Replicas)
		}
	}
}

// TestApplyWaitsForAClusterToAnswer checks that apply on a three-server
// cluster that has lost its quorum (two servers stopped: JetStream does
// not answer) tries again while the bus's errors are transient, and
// applies the file once the servers are back, saying each retry on
// stderr. It failed with "context deadline exceeded".
func TestApplyWaitsForAClusterToAnswer(t *testing.T) {
	t.Parallel()
	bustest.Long(t, "that apply on a three-server cluster without its quorum tries again, saying so, and applies the file once the servers are back")
	c := bustest.Cluster(t)
	c.Stop(1)
	c.Stop(2)
	back := make(chan struct{})
	go func() {
		defer close(back)
		time.Sleep(3 * time.Second) // the cluster is down for a while
		c.Restart(1)
		c.Restart(2)
	}()
	out, stderr, err := run(t, "apply", "-f", homelabFile, "--nats", c.Server(0).URL(), "--replicas", "3")
	<-back
	if err != nil {
		t.Fatalf("apply on a cluster without quorum for 3 s: %v\nstderr:\n%s", err, stderr)
	}
	if !strings.Contains(out, "applied "+homelabFile) || !strings.Contains(stderr, "the bus did not answer; trying again") {
		t.Errorf("apply printed:\n%s\nstderr:\n%s\nwant it applied after saying it tries again", out, stderr)
	}
	_, js := bustest.Connect(t, c.Server(0), "test")
	kv, err := js.KeyValue(bustest.Context(t), mesh.PlacementBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(bustest.Context(t), "ace"); err != nil {
		t.Errorf("ace's placement after apply: %v", err)
	}
}
