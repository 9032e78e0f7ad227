package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// faultsEnv runs TestClusterFaults (scripts/clusterfaults sets it); its
// value is the generated mesh's node count ("1" means 300).
const faultsEnv = "MESH_CLUSTER_FAULTS"

// TestClusterFaults runs a mesh as its users run it on three servers and
// puts it through every fault of issue 19, then compares the settled mesh
// with an uninterrupted run of the same input. It takes minutes: it runs
// only when $MESH_CLUSTER_FAULTS is set (scripts/clusterfaults, which CI
// runs with a bound; TestClusterSurvivesKills is its short variant in the
// test command).
//
// The input: a generated mesh of 300 nodes (A), then A with a module
// unplaced from node-0001 to node-0005 (B1), then also from node-0006 to
// node-0010 and keycloak unplaced from the control node (B2): their keys
// retire and ask the operator, and the modules that require keycloak's
// oidc-client are held (refused). The reference
// runs it on one server with the seat, the ask router and the vault as
// processes, waiting for each step to settle.
//
// The faulted run: the three servers auth gen writes with --server
// (nats-server's own binary, R3 buckets, the generated users), each
// route between two servers through a TCP proxy of the test; the vault,
// the ask router and three seats as processes of their own, the router
// and two seats connected to nats-3 only, the third seat to nats-1 and
// nats-2; every apply an "apply" process as the operator. The faults, in
// turn, each followed by the settled mesh compared with the reference's:
//
//  1. kill -9 of the holding seat (seat-1) while it composes A: seat-2
//     takes over;
//  2. SIGSTOP of the holding seat-2 past its lease while B1 is applied
//     (seat-3 takes over), then SIGCONT: it writes nothing from then on
//     (its log names no write before it says it writes nothing more);
//  3. a partition: nats-3, with the holding seat-3 and the router on it,
//     cut off from the other two while B2 is applied; seat-2 on the other
//     side takes over, finds no router for its asks and raises them again
//     with backoff; the cut seat's /healthz is not healthy;
//  4. kill -9 of the provisions stream's leader server, started again;
//  5. every server stopped and started again.
//
// After the last two, a reader started anew reads the settled mesh as
// soon as it has its initial values (nothing older from a replica that
// catches up).
//
// Settled means: every key of plans, provisions (state, why, and whether
// it names an ask) and refused (why) equal to the reference's, times
// aside; the router holds every ask a retiring key names open; no key has
// two open asks and no open ask is about a key that does not name it; as
// many records of asks as the reference's (an ask raised twice would
// leave one more).
func TestClusterFaults(t *testing.T) {
	t.Parallel()
	nodes, _ := strconv.Atoi(os.Getenv(faultsEnv))
	if nodes == 0 {
		t.Skip("$" + faultsEnv + " is not set: scripts/clusterfaults runs this test")
	}
	if nodes == 1 {
		nodes = 300
	}
	work := t.TempDir()
	steps := []string{"A", "B1", "B2"}
	files := map[string]string{}
	a := gen.Generate(nodes, 4, 1)
	b1 := unplace(t, a, workers(1, 5))
	b2 := unplaceModule(t, unplace(t, a, workers(1, 10)), gen.Control, "keycloak")
	for name, text := range map[string][]byte{"A": a, "B1": b1, "B2": b2} {
		files[name] = filepath.Join(work, name+".yaml")
		if err := os.WriteFile(files[name], text, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	ref := referenceRun(t, files, steps)
	for _, s := range steps {
		t.Logf("reference after %s: %s", s, ref[s].summary())
	}
	if ref["B2"].asked() == 0 || ref["B2"].asked() <= ref["B1"].asked() {
		t.Fatalf("the reference retires no more keys with asks in B2 (%d) than in B1 (%d): the input tests nothing", ref["B2"].asked(), ref["B1"].asked())
	}

	// The cluster, each route through a proxy.
	dir := filepath.Join(work, "auth")
	var urls, clusterAddrs []string
	args := []string{"auth", "gen", "-f", files["A"], "-o", dir, "--cluster", "lab"}
	for i := 1; i <= 3; i++ {
		client, route, http, leaf := freePort(t), freePort(t), freePort(t), freePort(t)
		args = append(args, "--server", fmt.Sprintf("nats-%d=127.0.0.1:%d:%d:%d:%d", i, client, route, http, leaf))
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(client))
		clusterAddrs = append(clusterAddrs, "127.0.0.1:"+strconv.Itoa(route))
	}
	runMain(t, args...)
	var confs []string
	proxies := map[[2]int]*proxy{} // {from, to} -> the proxy of from's route to to
	for i := range 3 {
		conf := filepath.Join(dir, auth.ServersDir, "nats-"+strconv.Itoa(i+1), auth.ConfigFile)
		confs = append(confs, conf)
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for j := range 3 {
			if j == i {
				continue
			}
			p := newProxy(t, clusterAddrs[j])
			proxies[[2]int{i, j}] = p
			if !strings.Contains(text, clusterAddrs[j]+"\"") {
				t.Fatalf("%s names no route to %s:\n%s", conf, clusterAddrs[j], text)
			}
			text = strings.Replace(text, clusterAddrs[j]+"\"", p.addr()+"\"", 1)
		}
		// The servers tell each other their routes' addresses: one that
		// nobody listens on keeps every route on its proxy.
		text = strings.Replace(text, "  name: lab\n", fmt.Sprintf("  name: lab\n  advertise: \"127.0.0.1:%d\"\n", freePort(t)), 1)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	servers := make([]*process, 3)
	for i := range servers {
		servers[i] = startNATS(t, confs[i])
	}
	cut := func(x int, on bool) {
		for k, p := range proxies {
			if k[0] == x || k[1] == x {
				p.setCut(on)
			}
		}
	}

	all := strings.Join(urls, ",")
	isolated := urls[2]
	majority := strings.Join(urls[:2], ",")
	as := func(user, url string, args ...string) []string {
		return append(args, "--nats", url, "--creds", auth.CredsPath(dir, user), "--replicas", "3")
	}
	opCreds := auth.CredsPath(dir, access.DefaultOperator)
	var js jetstream.JetStream
	waitFor(t, time.Minute, "the servers to take the operator", servers, func() bool {
		nc, j, err := bus.Connect(bus.Dial{URL: majority, Name: "operator", Creds: opCreds})
		if err == nil {
			t.Cleanup(nc.Close)
			js = j
		}
		return err == nil
	})
	ctx := bustest.Context(t)
	waitFor(t, time.Minute, "the cluster's JetStream", servers, func() bool {
		_, err := js.AccountInfo(ctx)
		return err == nil
	})

	vault := start(t, "vault", as(mesh.VaultModule, all, "vault", "--node", gen.Control, "--data", t.TempDir())...)
	router := start(t, "router", as("mesh-asks", isolated, "router")...)
	health := map[string]string{}
	seat := func(id, url string) *process {
		health[id] = "127.0.0.1:" + strconv.Itoa(freePort(t))
		return start(t, id, as(mesh.Module, url, "serve", "--id", id, "--metrics", health[id])...)
	}
	holds := func(p *process, from int) bool {
		out := p.output()
		return strings.Contains(out[min(from, len(out)):], `msg="seat: holding the lease"`)
	}
	seat1 := seat("seat-1", isolated)
	waitFor(t, time.Minute, "seat-1 to hold the lease", []*process{vault, router, seat1}, func() bool { return holds(seat1, 0) })
	seat2 := seat("seat-2", majority)
	apply := func(step, url string) {
		t.Helper()
		runMain(t, "apply", "-f", files[step], "--nats", url, "--creds", opCreds, "--replicas", "3", "--yes")
	}

	vctx, endView := context.WithCancel(ctx)
	v := newView(vctx, js)
	// fresh follows the buckets anew, as a reader that starts after a
	// server fault does: once its copies have their initial values (from
	// each bucket's leader) they must equal the reference's at once, the
	// mesh being settled before the fault: a replica still catching up
	// must not answer.
	fresh := func(step, after string) {
		t.Helper()
		endView()
		vctx, endView = context.WithCancel(ctx)
		v = newView(vctx, js)
		waitFor(t, 2*time.Minute, "a new reader's copies after "+after, servers, func() bool {
			for _, c := range []*bus.Copy{v.plans, v.provisions, v.refused, v.records} {
				select {
				case <-c.Ready():
				default:
					return false
				}
			}
			return true
		})
		got := v.read()
		if d := got.diff(ref[step]) + got.asksHeld(); d != "" {
			t.Errorf("a reader that started after %s read a mesh older than the settled one:\n%s", after, d)
		}
	}
	settle := func(step, after string, procs ...*process) {
		t.Helper()
		diff := ""
		waitFor(t, 3*time.Minute, "the mesh settled as the reference's after "+step+" ("+after+")", append(procs, servers...), func() bool {
			got := v.read()
			diff = got.diff(ref[step])
			if diff == "" {
				diff = got.asksHeld()
			}
			return diff == ""
		})
		t.Cleanup(func() {
			if t.Failed() && diff != "" {
				t.Logf("last difference after %s (%s):\n%s", step, after, diff)
			}
		})
		t.Logf("settled after %s (%s): %s", step, after, v.read().summary())
	}

	// 1. kill -9 of the holding seat while it composes A.
	apply("A", all)
	written := 0
	waitFor(t, time.Minute, "seat-1 to write A's first provisions", []*process{seat1}, func() bool {
		written = v.provisions.Len()
		return written > 0
	})
	seat1.kill(t)
	if want := len(ref["A"].provisions); written >= want {
		t.Fatalf("seat-1 was killed once it had written %d provisions of %d: not while it composed", written, want)
	}
	t.Logf("fault 1: seat-1 killed with %d of %d provisions written", written, len(ref["A"].provisions))
	waitFor(t, time.Minute, "seat-2 to take over", []*process{seat2}, func() bool { return holds(seat2, 0) })
	seat3 := seat("seat-3", isolated)
	procs := []*process{vault, router, seat2, seat3}
	settle("A", "seat-1 killed while it composed", procs...)

	// 2. SIGSTOP of the holding seat past its lease, B1 applied meanwhile.
	stopped, standby := seat2, seat3
	if !holds(seat2, 0) || strings.Contains(seat2.output(), "writes nothing more") {
		t.Fatalf("seat-2 no longer holds the lease before fault 2:\n%s", seat2.output())
	}
	mark3 := len(standby.output())
	if err := stopped.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = stopped.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	waitFor(t, time.Minute, "seat-3 to take over from the stopped seat-2", []*process{standby}, func() bool { return holds(standby, mark3) })
	apply("B1", majority)
	settle("B1", "seat-2 stopped past its lease", vault, router, standby)
	since := len(stopped.output())
	resume()
	waitFor(t, 30*time.Second, "the resumed seat-2 to say it writes nothing more", procs, func() bool {
		return strings.Contains(stopped.output()[since:], "the seat writes nothing more")
	})
	after := stopped.output()[since:]
	after = after[:strings.Index(after, "the seat writes nothing more")]
	for _, wrote := range []string{`msg="seat: composed"`, `msg="seat: judged"`, `msg="seat: asking the operator"`, `msg="seat: retired"`, `msg="seat: withdrawing an ask"`} {
		if strings.Contains(after, wrote) {
			t.Errorf("seat-2, resumed past its lease, logged %s before it said it writes nothing more:\n%s", wrote, after)
		}
	}
	t.Logf("fault 2: seat-2 stopped past its lease, seat-3 took over; resumed, seat-2 wrote nothing")
	settle("B1", "seat-2 resumed", procs...)

	// 3. The partition: nats-3 with the holding seat-3 and the router.
	if !holds(seat3, 0) {
		t.Fatal("seat-3 holds no lease before the partition")
	}
	mark4, cutAt := len(seat2.output()), len(seat3.output())
	cut(2, true)
	healed := false
	t.Cleanup(func() {
		if !healed {
			cut(2, false)
		}
	})
	waitFor(t, time.Minute, "seat-2 to take over from seat-3, cut off", procs, func() bool { return holds(seat2, mark4) })
	apply("B2", majority)
	waitFor(t, time.Minute, "seat-2 to find no router for an ask", procs, func() bool {
		return strings.Contains(seat2.output()[mark4:], "no ask router recorded the ask")
	})
	// seat-3, cut off, finds its lease lost and waits to take it again:
	// as a standby that reaches no leader it is unhealthy, and stays so.
	waitFor(t, time.Minute, "seat-3, cut off, to find its lease lost", procs, func() bool {
		return strings.Contains(seat3.output()[cutAt:], "the lease was lost; waiting to take it again")
	})
	code, body := 0, ""
	waitFor(t, 30*time.Second, "seat-3's /healthz, cut off while seat-2 holds the lease, to say it is unhealthy", procs, func() bool {
		code, body = healthz(health["seat-3"])
		return code == http.StatusServiceUnavailable
	})
	for tick, end := time.NewTicker(500*time.Millisecond), time.Now().Add(3*time.Second); time.Now().Before(end); <-tick.C {
		if c, b := healthz(health["seat-3"]); c != http.StatusServiceUnavailable {
			t.Errorf("seat-3, cut off while seat-2 holds the lease: /healthz = %d %q; want it unhealthy until the partition heals", c, b)
			break
		}
	}
	t.Logf("seat-3 cut off: /healthz %d %q", code, strings.TrimSpace(body))
	cut(2, false)
	healed = true
	t.Logf("fault 3: nats-3 cut off with seat-3 and the router, B2 applied; seat-2 took over and asked again")
	settle("B2", "nats-3 partitioned and healed", procs...)

	// 4. kill -9 of the provisions stream's leader server.
	leader := streamLeader(t, ctx, js, "KV_"+mesh.ProvisionsBucket)
	servers[leader].kill(t)
	servers[leader] = startNATS(t, confs[leader])
	t.Logf("fault 4: nats-%d, the provisions stream's leader, killed and started again", leader+1)
	fresh("B2", fmt.Sprintf("nats-%d killed", leader+1))
	settle("B2", fmt.Sprintf("nats-%d killed", leader+1), procs...)

	// 5. Every server stopped and started again.
	for i := range servers {
		servers[i].stop(t)
	}
	for i := range servers {
		servers[i] = startNATS(t, confs[i])
	}
	t.Logf("fault 5: every server stopped and started again")
	fresh("B2", "every server restarted")
	settle("B2", "every server restarted", procs...)

	for _, p := range procs {
		for _, said := range []string{"Permissions Violation"} {
			if strings.Contains(p.output(), said) {
				t.Errorf("%s logged %q", p.name, said)
			}
		}
	}
	// The components stop before the servers do.
	for _, p := range procs {
		p.stop(t)
	}
}

// workers returns node-00<from> to node-00<to>.
func workers(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("node-%04d", i))
	}
	return out
}

// unplace returns the generated mesh file text with the last app module of
// each of nodes removed from its placement, wants and haves.
func unplace(t *testing.T, text []byte, nodes []string) []byte {
	t.Helper()
	f := parseYAML(t, text)
	placement, _ := f["placement"].(map[string]any)
	for _, n := range nodes {
		mods, _ := placement[n].([]any)
		if len(mods) < 2 {
			t.Fatalf("the generated mesh places %v on %s: no app module to unplace", mods, n)
		}
		text = unplaceModule(t, text, n, mods[len(mods)-1].(string))
	}
	return text
}

// unplaceModule returns the mesh file text with module m removed from
// node's placement, wants and haves.
func unplaceModule(t *testing.T, text []byte, node, m string) []byte {
	t.Helper()
	f := parseYAML(t, text)
	placement, _ := f["placement"].(map[string]any)
	mods, _ := placement[node].([]any)
	var kept []any
	for _, x := range mods {
		if x != m {
			kept = append(kept, x)
		}
	}
	if len(kept) == len(mods) {
		t.Fatalf("the mesh places %v on %s, not %s", mods, node, m)
	}
	placement[node] = kept
	for _, sec := range []string{"wants", "haves"} {
		if w, ok := f[sec].(map[string]any)[node].(map[string]any); ok {
			delete(w, m)
		}
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parseYAML(t *testing.T, text []byte) map[string]any {
	t.Helper()
	var f map[string]any
	if err := yaml.Unmarshal(text, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// referenceRun applies each step's file in turn on one server, with the
// seat, the ask router and the vault as processes, and returns the mesh
// settled after each: unchanged for 3 s, every retiring key's ask held.
func referenceRun(t *testing.T, files map[string]string, steps []string) map[string]settled {
	srv := bustest.Server(t)
	nc, js := bustest.Connect(t, srv, "operator")
	_ = nc
	ctx := bustest.Context(t)
	url := srv.URL()
	procs := []*process{
		start(t, "reference seat", "serve", "--nats", url),
		start(t, "reference router", "router", "--nats", url),
		start(t, "reference vault", "vault", "--node", gen.Control, "--data", t.TempDir(), "--nats", url),
	}
	waitFor(t, time.Minute, "the reference seat to hold the lease", procs, func() bool {
		return strings.Contains(procs[0].output(), `msg="seat: holding the lease"`)
	})
	v := newView(ctx, js)
	out := map[string]settled{}
	for _, step := range steps {
		runMain(t, "apply", "-f", files[step], "--nats", url, "--yes")
		var last settled
		var since time.Time
		why := ""
		t.Cleanup(func() {
			if t.Failed() && why != "" {
				t.Logf("the reference after %s, last: %s", step, why)
			}
		})
		waitFor(t, 3*time.Minute, "the reference to settle after "+step, procs, func() bool {
			got := v.read()
			why = got.diff(last) + got.asksHeld()
			last = got
			if why != "" || len(got.plans) == 0 {
				since = time.Now()
				return false
			}
			return time.Since(since) > 3*time.Second
		})
		out[step] = last
	}
	return out
}

// view follows the buckets a settled mesh is read from, from their
// leaders.
type view struct {
	plans, provisions, refused, records *bus.Copy
}

func newView(ctx context.Context, js jetstream.JetStream) *view {
	f := func(b string) *bus.Copy { return bus.Follow(ctx, js, b, bus.Options{Leader: true}) }
	return &view{plans: f(mesh.PlansBucket), provisions: f(mesh.ProvisionsBucket), refused: f(mesh.RefusedBucket), records: f(mesh.RecordsBucket)}
}

// settled is what a settled mesh is compared by: each key's plan
// fingerprint, provision state and why, refusal why (times aside); and
// the asks: each retiring provision's ask, the open records by key.
type settled struct {
	plans, provisions, refused map[string]string
	retiring                   map[string]string   // provision key -> its ask ("" for none)
	open                       map[string][]string // provision key -> the open records about it
	records                    int                 // records of asks, in any state
	bad                        []string            // values that do not decode
}

// times are the timestamps a why may hold.
var times = regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?`)

func (v *view) read() settled {
	s := settled{plans: map[string]string{}, provisions: map[string]string{}, refused: map[string]string{},
		retiring: map[string]string{}, open: map[string][]string{}}
	v.plans.Range(func(k string, it bus.Item) bool {
		var p mesh.Plan
		if err := json.Unmarshal(it.Value, &p); err != nil {
			s.bad = append(s.bad, "plan "+k)
		}
		s.plans[k] = p.Fingerprint
		return true
	})
	v.provisions.Range(func(k string, it bus.Item) bool {
		var p mesh.Provision
		if err := json.Unmarshal(it.Value, &p); err != nil {
			s.bad = append(s.bad, "provision "+k)
		}
		s.provisions[k] = string(p.State) + ": " + times.ReplaceAllString(p.Why, "<time>")
		if p.Ask != "" {
			s.provisions[k] += " (asked)"
		}
		if p.State == mesh.Retiring {
			s.retiring[k] = p.Ask
		}
		return true
	})
	v.refused.Range(func(k string, it bus.Item) bool {
		var r mesh.Refusal
		if err := json.Unmarshal(it.Value, &r); err != nil {
			s.bad = append(s.bad, "refusal "+k)
		}
		s.refused[k] = times.ReplaceAllString(r.Why, "<time>")
		return true
	})
	v.records.Range(func(id string, it bus.Item) bool {
		s.records++
		var r mesh.Record
		if err := json.Unmarshal(it.Value, &r); err != nil {
			s.bad = append(s.bad, "record "+id)
		} else if r.State == mesh.RecordOpen {
			k := strings.TrimPrefix(r.Ask.About, "provision.")
			s.open[k] = append(s.open[k], id)
		}
		return true
	})
	return s
}

// asked counts the retiring keys that name an ask.
func (s settled) asked() int {
	n := 0
	for _, a := range s.retiring {
		if a != "" {
			n++
		}
	}
	return n
}

func (s settled) summary() string {
	return fmt.Sprintf("%d plans, %d provisions (%d retiring, %d with an ask), %d refused, %d keys with an open ask, %d records of asks",
		len(s.plans), len(s.provisions), len(s.retiring), s.asked(), len(s.refused), len(s.open), s.records)
}

// diff says how s differs from want, key by key (at most 20 lines); ""
// when equal.
func (s settled) diff(want settled) string {
	var lines []string
	cmp := func(what string, got, want map[string]string) {
		var keys []string
		for k := range got {
			keys = append(keys, k)
		}
		for k := range want {
			if _, ok := got[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			g, gok := got[k]
			w, wok := want[k]
			switch {
			case !gok:
				lines = append(lines, fmt.Sprintf("%s %s lost; want %q", what, k, w))
			case !wok:
				lines = append(lines, fmt.Sprintf("%s %s = %q; want no such key", what, k, g))
			case g != w:
				lines = append(lines, fmt.Sprintf("%s %s = %q; want %q", what, k, g, w))
			}
		}
	}
	cmp("plan", s.plans, want.plans)
	cmp("provision", s.provisions, want.provisions)
	cmp("refusal", s.refused, want.refused)
	if s.records != want.records {
		// An ask raised twice leaves a second record (withdrawn or
		// open) beside the first.
		lines = append(lines, fmt.Sprintf("%d records of asks; want %d", s.records, want.records))
	}
	for _, b := range s.bad {
		lines = append(lines, b+" does not decode")
	}
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("... %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}

// asksHeld says what is wrong with s's asks: a retiring key whose ask the
// router holds no open record of, a key with two open asks, or an open ask
// about a key that does not name it. "" when none. (Which keys name an ask
// is compared with the reference by diff: a credential retires without
// one while the database it opens is kept.)
func (s settled) asksHeld() string {
	var lines []string
	for k, a := range s.retiring {
		if ids := s.open[k]; a != "" && (len(ids) != 1 || ids[0] != a) {
			lines = append(lines, fmt.Sprintf("retiring %s names the ask %s; open asks about it: %v", k, a, ids))
		}
	}
	for k, ids := range s.open {
		if a, ok := s.retiring[k]; !ok || a == "" {
			lines = append(lines, fmt.Sprintf("open asks %v about %s, which names none", ids, k))
		}
	}
	sort.Strings(lines)
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("... %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}

// streamLeader returns the index (0 for nats-1) of the server leading
// stream.
func streamLeader(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) int {
	t.Helper()
	leader := -1
	bustest.WaitFor(t, time.Minute, "a leader of "+stream, func() bool {
		st, err := js.Stream(ctx, stream)
		if err != nil || st.CachedInfo().Cluster == nil {
			return false
		}
		n, err := strconv.Atoi(strings.TrimPrefix(st.CachedInfo().Cluster.Leader, "nats-"))
		leader = n - 1
		return err == nil && leader >= 0 && leader < 3
	})
	return leader
}

// healthz returns the status and body of GET http://addr/healthz (0 when
// it does not answer).
func healthz(addr string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends p SIGTERM and waits until it has exited.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stop %s: %v", p.name, err)
	}
	<-p.done
	if p.err != nil {
		t.Errorf("%s exited with %v on SIGTERM; want 0", p.name, p.err)
	}
}
