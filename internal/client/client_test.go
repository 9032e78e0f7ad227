package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// running is a client started by a test, on its own connection.
type running struct {
	*client.Client
	stop func()
}

// start runs the client of node under root on its own connection, and
// waits until it is ready.
func start(t *testing.T, s *bus.Server, node, root string, tweak ...func(*client.Config)) running {
	t.Helper()
	nc, js := bustest.Connect(t, s, "client-"+node)
	cfg := client.Config{Node: node, Root: root, JS: js, NC: nc}
	for _, f := range tweak {
		f(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("client %s Run = %v; want context.Canceled", node, err)
		}
		nc.Close()
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("client %s stopped before it was ready: %v", node, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("client %s not ready after 10s", node)
	}
	return running{Client: c, stop: stop}
}

// reader follows a bucket on the test's own connection.
func reader(t *testing.T, ctx context.Context, s *bus.Server, bucket string) *bus.Copy {
	t.Helper()
	_, js := bustest.Connect(t, s, "reader-"+bucket)
	c := bus.Follow(ctx, js, bucket, bus.Options{Create: true})
	<-c.Ready()
	return c
}

func keys(c *bus.Copy) []string {
	var ks []string
	c.Range(func(k string, _ bus.Item) bool { ks = append(ks, k); return true })
	sort.Strings(ks)
	return ks
}

func applied(t *testing.T, c *bus.Copy, key string) (mesh.Applied, uint64) {
	t.Helper()
	it, ok := c.Get(key)
	if !ok {
		t.Fatalf("applied has no key %s (has %v)", key, keys(c))
	}
	var a mesh.Applied
	if err := json.Unmarshal(it.Value, &a); err != nil {
		t.Fatalf("applied %s = %s: %v", key, it.Value, err)
	}
	return a, it.Revision
}

// barrier writes and deletes a key of the bucket c follows and waits until
// c has seen both: every write before it has then reached c too.
func barrier(t *testing.T, ctx context.Context, s *bus.Server, c *bus.Copy) {
	t.Helper()
	_, js := bustest.Connect(t, s, "barrier")
	kv, err := js.KeyValue(ctx, c.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "barrier.test", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the barrier", func() bool { _, ok := c.Get("barrier.test"); return ok })
	kv.Delete(ctx, "barrier.test")
	bustest.WaitFor(t, 0, "the barrier gone", func() bool { _, ok := c.Get("barrier.test"); return !ok })
}

func revisions(c *bus.Copy) map[string]uint64 {
	revs := map[string]uint64{}
	c.Range(func(k string, it bus.Item) bool { revs[k] = it.Revision; return true })
	return revs
}

func TestClientAppliesTheHomelab(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, seat := bustest.Connect(t, s, "seat")
	plans := plansBucket(t, ctx, seat)
	for _, p := range homelabPlans() {
		putPlan(t, ctx, plans, p)
	}
	top := t.TempDir()
	roots := map[string]string{"control": filepath.Join(top, "control"), "ace": filepath.Join(top, "ace")}

	// Left from before: a stray file in gitea's tmp (sweep) and in its state
	// (program).
	for _, f := range []string{"gitea/tmp/stray.txt", "gitea/tmp/junk/deep.txt", "gitea/state/gitea.db"} {
		p := filepath.Join(roots["ace"], f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	control := start(t, s, "control", roots["control"])
	ace := start(t, s, "ace", roots["ace"])

	app := reader(t, ctx, s, "mesh-provisioner_applied")
	coll := reader(t, ctx, s, "mesh-provisioner_collect")
	wantApplied := []string{"ace.gitea", "ace.node-tools", "ace.vaultwarden", "control.keycloak", "control.mesh-vault",
		"control.node-tools", "control.postgres", "control.redis", "control.route-proxy"}
	bustest.WaitFor(t, 0, "every applied record", func() bool { return fmt.Sprint(keys(app)) == fmt.Sprint(wantApplied) })
	wantCollect := []string{"ace.environment.node-tools", "ace.shell=3Azsh=3Anormal.node-tools",
		"control.environment.node-tools", "control.shell=3Azsh=3Anormal.node-tools"}
	bustest.WaitFor(t, 0, "every contribution", func() bool { return fmt.Sprint(keys(coll)) == fmt.Sprint(wantCollect) })

	// Directories, under <root>/<module>/<dir>.
	for _, p := range homelabPlans() {
		a, _ := applied(t, app, p.Node+"."+p.Module)
		if a.Fingerprint != p.Fingerprint {
			t.Errorf("applied %s.%s fp = %q; want %q", p.Node, p.Module, a.Fingerprint, p.Fingerprint)
		}
		if len(a.Dirs) != len(p.Dirs) {
			t.Errorf("applied %s.%s dirs = %v; want %d", p.Node, p.Module, a.Dirs, len(p.Dirs))
		}
		for _, d := range p.Dirs {
			want := filepath.Join(roots[p.Node], p.Module, d.Name)
			if a.Dirs[d.Name] != want {
				t.Errorf("applied %s.%s dirs[%s] = %q; want %q", p.Node, p.Module, d.Name, a.Dirs[d.Name], want)
			}
			if st, err := os.Stat(want); err != nil || !st.IsDir() {
				t.Errorf("directory %s: %v", want, err)
			}
		}
	}

	// Ports: every port of a node has its own number.
	portsOf := func() map[string]map[string]int { // node -> module.port -> number
		out := map[string]map[string]int{}
		for _, p := range homelabPlans() {
			a, _ := applied(t, app, p.Node+"."+p.Module)
			if out[p.Node] == nil {
				out[p.Node] = map[string]int{}
			}
			if len(a.Ports) != len(p.Ports) {
				t.Errorf("applied %s.%s ports = %v; want %d ports", p.Node, p.Module, a.Ports, len(p.Ports))
			}
			for name, n := range a.Ports {
				out[p.Node][p.Module+"."+name] = n
			}
		}
		return out
	}
	before := portsOf()
	for node, ports := range before {
		seen := map[int]string{}
		for name, n := range ports {
			if n < client.DefaultPorts.Low || n > client.DefaultPorts.High {
				t.Errorf("port %s on %s = %d; want in %v", name, node, n, client.DefaultPorts)
			}
			if other, dup := seen[n]; dup {
				t.Errorf("ports %s and %s on %s share %d", name, other, node, n)
			}
			seen[n] = name
		}
	}
	if len(before["control"]) != 5 || len(before["ace"]) != 3 {
		t.Errorf("ports = %v; want 5 on control, 3 on ace", before)
	}

	// Sweep: gitea's tmp is emptied into quarantine, its state untouched.
	gitea, _ := applied(t, app, "ace.gitea")
	q := roots["ace"] + ".quarantine"
	wantSwept := []string{filepath.Join(q, "gitea/tmp/junk"), filepath.Join(q, "gitea/tmp/stray.txt")}
	if !reflect.DeepEqual(gitea.Swept, wantSwept) {
		t.Errorf("applied ace.gitea swept = %v; want %v", gitea.Swept, wantSwept)
	}
	if ace.Quarantine() != q {
		t.Errorf("Quarantine() = %q; want %q", ace.Quarantine(), q)
	}
	if b, err := os.ReadFile(filepath.Join(q, "gitea/tmp/stray.txt")); err != nil || string(b) != "gitea/tmp/stray.txt" {
		t.Errorf("quarantined stray.txt = %q, %v; want its content kept", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(q, "gitea/tmp/junk/deep.txt")); err != nil || string(b) != "gitea/tmp/junk/deep.txt" {
		t.Errorf("quarantined junk/deep.txt = %q, %v; want its content kept", b, err)
	}
	if _, err := os.Stat(filepath.Join(roots["ace"], "gitea/tmp/stray.txt")); !os.IsNotExist(err) {
		t.Errorf("stray.txt still in gitea's tmp: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(roots["ace"], "gitea/state/gitea.db")); err != nil || string(b) != "gitea/state/gitea.db" {
		t.Errorf("gitea/state/gitea.db = %q, %v; want untouched (program)", b, err)
	}

	// Contribution of node-tools on control, read back by name.
	it, _ := coll.Get("control.shell=3Azsh=3Anormal.node-tools")
	var ci mesh.CollectItem
	json.Unmarshal(it.Value, &ci)
	if want := (mesh.CollectItem{Item: "export PATH=$PATH:/opt/node-tools/bin", Module: "node-tools", Collection: "shell:zsh:normal"}); ci != want {
		t.Errorf("collect control.shell=3Azsh=3Anormal.node-tools = %+v; want %+v", ci, want)
	}

	// Restart both clients: nothing is re-written, the ports stay.
	revs := revisions(app)
	crevs := revisions(coll)
	control.stop()
	ace.stop()
	control = start(t, s, "control", roots["control"])
	ace = start(t, s, "ace", roots["ace"])
	barrier(t, ctx, s, app)
	barrier(t, ctx, s, coll)
	if after := portsOf(); !reflect.DeepEqual(after, before) {
		t.Errorf("ports after a restart = %v; want %v", after, before)
	}
	if after := revisions(app); !reflect.DeepEqual(after, revs) {
		t.Errorf("applied revisions after a restart = %v; want unchanged %v", after, revs)
	}
	if after := revisions(coll); !reflect.DeepEqual(after, crevs) {
		t.Errorf("collect revisions after a restart = %v; want unchanged %v", after, crevs)
	}

	// A plan change (a new build adds a port) keeps the old numbers.
	kc := homelabPlans()[3]
	kc.Fingerprint = "a11ce6"
	kc.Ports = append(kc.Ports, mesh.Port{Name: "admin"})
	putPlan(t, ctx, plans, kc)
	bustest.WaitFor(t, 0, "keycloak at a11ce6", func() bool {
		a, _ := applied(t, app, "control.keycloak")
		return a.Fingerprint == "a11ce6"
	})
	a, _ := applied(t, app, "control.keycloak")
	if a.Ports["http"] != before["control"]["keycloak.http"] || a.Ports["admin"] == 0 {
		t.Errorf("keycloak ports after the change = %v; want http %d kept and admin assigned", a.Ports, before["control"]["keycloak.http"])
	}
	for name, n := range before["control"] {
		if n == a.Ports["admin"] {
			t.Errorf("keycloak admin got %d, the number of %s", n, name)
		}
	}

	// A file the client wrote stays in a sweep dir; a new stray goes.
	if err := ace.Write("gitea", "tmp", "sessions/own.txt", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(roots["ace"], "gitea/tmp/stray.txt"), []byte("again"), 0o644)
	os.WriteFile(filepath.Join(roots["ace"], "gitea/tmp/sessions/other.txt"), []byte("other"), 0o644)
	g := homelabPlans()[6]
	g.Fingerprint = "b7c2f0"
	putPlan(t, ctx, plans, g)
	bustest.WaitFor(t, 0, "gitea at b7c2f0", func() bool {
		a, _ := applied(t, app, "ace.gitea")
		return a.Fingerprint == "b7c2f0"
	})
	gitea, _ = applied(t, app, "ace.gitea")
	wantSwept = []string{filepath.Join(q, "gitea/tmp/junk"), filepath.Join(q, "gitea/tmp/sessions/other.txt"),
		filepath.Join(q, "gitea/tmp/stray.txt"), filepath.Join(q, "gitea/tmp/stray.txt.1")}
	if !reflect.DeepEqual(gitea.Swept, wantSwept) {
		t.Errorf("applied ace.gitea swept = %v; want %v", gitea.Swept, wantSwept)
	}
	if b, err := os.ReadFile(filepath.Join(roots["ace"], "gitea/tmp/sessions/own.txt")); err != nil || string(b) != "mine" {
		t.Errorf("the client's own file = %q, %v; want kept", b, err)
	}

	// Plans removed: applied and collect keys go, directories stay.
	plans.Delete(ctx, "ace.gitea")
	plans.Delete(ctx, "control.node-tools")
	bustest.WaitFor(t, 0, "ace.gitea and control's contributions gone", func() bool {
		_, g := app.Get("ace.gitea")
		_, n := app.Get("control.node-tools")
		_, c := coll.Get("control.shell=3Azsh=3Anormal.node-tools")
		_, e := coll.Get("control.environment.node-tools")
		return !g && !n && !c && !e
	})
	if got, want := keys(coll), []string{"ace.environment.node-tools", "ace.shell=3Azsh=3Anormal.node-tools"}; !reflect.DeepEqual(got, want) {
		t.Errorf("collect keys = %v; want %v", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(roots["ace"], "gitea/state/gitea.db")); err != nil || string(b) != "gitea/state/gitea.db" {
		t.Errorf("gitea's data after its plan is gone = %q, %v; want kept", b, err)
	}

	// A plan removed while the client is down is cleaned up at start.
	ace.stop()
	plans.Delete(ctx, "ace.vaultwarden")
	start(t, s, "ace", roots["ace"])
	barrier(t, ctx, s, app)
	if _, ok := app.Get("ace.vaultwarden"); ok {
		t.Error("applied ace.vaultwarden is still there after its plan went while the client was down")
	}
	if st, err := os.Stat(filepath.Join(roots["ace"], "vaultwarden/state")); err != nil || !st.IsDir() {
		t.Errorf("vaultwarden's state after its plan is gone: %v; want kept", err)
	}
}

func TestVerbFindsTheShellCollection(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	seatNC, seat := bustest.Connect(t, s, "seat")
	plans := plansBucket(t, ctx, seat)
	for _, p := range homelabPlans() {
		putPlan(t, ctx, plans, p)
	}
	if err := provisioning.Start(ctx, seatNC, seat, provisioning.Options{}); err != nil {
		t.Fatal(err)
	}
	start(t, s, "control", filepath.Join(t.TempDir(), "control"))
	nc, _ := bustest.Connect(t, s, "operator")
	var reply provisioning.Reply
	bustest.WaitFor(t, 0, "the verb to find the contribution", func() bool {
		msg, err := nc.Request(mesh.ProvisioningSubject, []byte(`{"what":"collect","collection":"shell:zsh:normal"}`), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		reply = provisioning.Reply{}
		json.Unmarshal(msg.Data, &reply)
		return len(reply.Entries) > 0
	})
	want := `[{control.shell=3Azsh=3Anormal.node-tools {"item":"export PATH=$PATH:/opt/node-tools/bin","module":"node-tools","collection":"shell:zsh:normal"}}]`
	got := entriesText(reply.Entries)
	if got != want || len(reply.Odd) != 0 || reply.What != "collect" {
		t.Errorf("verb collect shell:zsh:normal = %s odd %v; want %s", got, reply.Odd, want)
	}
}

func entriesText(es []provisioning.Entry) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("{%s %s}", e.Key, e.Value))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
