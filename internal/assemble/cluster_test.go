package assemble_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The generated mesh the failover test runs: a control node with the
// mesh's infrastructure and 47 workers with 8 app modules each.
const (
	failoverNodes   = 48
	failoverModules = 8
	// failoverAt is how many nodes the seat has composed (and written)
	// when the test stops the server leading the provisions bucket.
	failoverAt = 16
)

// applyAt is the time the mesh file is applied at in both runs, so that
// both write the same haves.
var applyAt = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// counter is a slog handler that counts each message and keeps the
// warnings and errors for a failing test's log.
type counter struct {
	mu     sync.Mutex
	counts map[string]int
	said   []string
}

func newCounter() *counter { return &counter{counts: map[string]int{}} }

func (c *counter) Enabled(context.Context, slog.Level) bool { return true }
func (c *counter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *counter) WithGroup(string) slog.Handler            { return c }
func (c *counter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[r.Message]++
	if r.Level >= slog.LevelWarn || os.Getenv("CLUSTER_TEST_LOG") != "" {
		line := r.Time.Format("15:04:05.000") + " " + r.Level.String() + " " + r.Message
		r.Attrs(func(a slog.Attr) bool {
			line += " " + a.String()
			return true
		})
		c.said = append(c.said, line)
	}
	return nil
}

// count returns how many messages starting with prefix were logged.
func (c *counter) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for m, k := range c.counts {
		if strings.HasPrefix(m, prefix) {
			n += k
		}
	}
	return n
}

// countSaid returns how many lines said at warn level or above (the
// message and its attributes) hold every part.
func (c *counter) countSaid(parts ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.said {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			n++
		}
	}
	return n
}

func (c *counter) dump(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.said {
		t.Log(l)
	}
}

// outcome is what a settled mesh holds: plans (their bytes), provisions
// (state, provider and why) and refusals (their why), by key; and the
// state of each credential key (the vault's).
type outcome struct {
	plans, provisions, refused map[string]string
	vault                      map[string]mesh.State
}

// meshRun is one run of the generated mesh: the seat, the ask router and
// the vault, each on its own connection, and the operator's connection
// (obs) that applied the mesh and reads what the seat writes.
type meshRun struct {
	t       *testing.T
	ctx     context.Context
	log     *counter
	seat    *assemble.SeatRunning
	first   *seat.Seat
	obs     jetstream.JetStream
	results atomic.Int64 // compositions of a node the seat reported
	mu      sync.Mutex
	perNode map[string]int // the same, per node
	// started is closed once the router and the vault run: the seat
	// composes while they start.
	started chan struct{}
}

// startMesh applies the generated mesh at url (a comma-separated list for
// the cluster) with replicas, then starts the seat, the router and the
// vault. onResult, if set, is called from the seat's OnResult.
func startMesh(t *testing.T, url string, replicas int, onResult func(r *meshRun, res *compose.Result, n int64)) *meshRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &meshRun{t: t, ctx: ctx, log: newCounter(), started: make(chan struct{}), perNode: map[string]int{}}
	log := slog.New(r.log)
	f, err := meshfile.Parse("gen", gen.Generate(failoverNodes, failoverModules, 1))
	if err != nil {
		t.Fatal(err)
	}
	onc, ojs, err := bus.Connect(bus.Dial{URL: url, Name: "operator", Replicas: replicas, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onc.Close)
	if _, err := meshfile.Apply(ctx, ojs, f, applyAt); err != nil {
		t.Fatal(err)
	}
	r.obs = ojs
	a := &assemble.Assembly{Dial: assemble.Shared(url, "", log), Log: log, Replicas: replicas}
	t.Cleanup(func() {
		cancel()
		a.Wait()
	})
	r.seat, err = a.StartSeat(ctx, assemble.SeatConfig{ID: "seat-1", OnResult: func(res *compose.Result) {
		if res.Node == "" {
			return
		}
		n := r.results.Add(1)
		r.mu.Lock()
		r.perNode[res.Node]++
		r.mu.Unlock()
		if onResult != nil {
			onResult(r, res, n)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.first = r.seat.Seat()
	if _, err := a.StartRouter(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartVault(ctx, vault.Config{Dir: t.TempDir(), Node: gen.Control}); err != nil {
		t.Fatal(err)
	}
	close(r.started)
	return r
}

// compositions returns how many times the seat composed each node, the
// most composed first: what a failure of the bound on compositions is read
// from (which nodes, how many each).
func (r *meshRun) compositions() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	nodes := slices.Collect(maps.Keys(r.perNode))
	slices.SortFunc(nodes, func(a, b string) int {
		if c := r.perNode[b] - r.perNode[a]; c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	for i, n := range nodes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", n, r.perNode[n])
	}
	return b.String()
}

// settled reports whether the mesh has settled, and returns what the
// seat's buckets hold then: the seat has nothing left to do (no change
// unread, no write to try again) and every credential key (the vault's) is
// provided. The buckets are read anew each time, through fresh watches on
// the servers that run (a watch whose consumer lived on a stopped server
// may sit silent until nats.go misses its heartbeats).
func (r *meshRun) settled() (outcome, bool) {
	if !r.seat.Seat().Settled(seat.Marks(r.ctx, r.obs)) {
		return outcome{}, false
	}
	o, ok := r.read()
	if !ok || len(o.provisions) == 0 {
		return o, false
	}
	for _, v := range o.vault {
		if v != mesh.Provided {
			return o, false
		}
	}
	return o, true
}

// read returns what the seat's buckets hold, through fresh copies on the
// observer's connection, or false when they are not ready within 5 s.
func (r *meshRun) read() (outcome, bool) {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	copies := map[string]*bus.Copy{}
	for _, b := range []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket} {
		copies[b] = bus.Follow(ctx, r.obs, b, bus.Options{Log: quiet})
	}
	for _, c := range copies {
		select {
		case <-c.Ready():
		case <-ctx.Done():
			return outcome{}, false
		}
	}
	o := outcome{plans: map[string]string{}, provisions: map[string]string{}, refused: map[string]string{}, vault: map[string]mesh.State{}}
	copies[mesh.PlansBucket].Range(func(k string, it bus.Item) bool {
		o.plans[k] = string(it.Value)
		return true
	})
	copies[mesh.ProvisionsBucket].Range(func(k string, it bus.Item) bool {
		var p mesh.Provision
		if err := json.Unmarshal(it.Value, &p); err != nil {
			o.provisions[k] = "undecodable: " + err.Error()
			return true
		}
		o.provisions[k] = fmt.Sprintf("%s by %s: %s", p.State, p.Provider, p.Why)
		if p.Provider.Module == mesh.VaultModule {
			o.vault[k] = p.State
		}
		return true
	})
	copies[mesh.RefusedBucket].Range(func(k string, it bus.Item) bool {
		var f mesh.Refusal
		if err := json.Unmarshal(it.Value, &f); err != nil {
			o.refused[k] = "undecodable: " + err.Error()
			return true
		}
		o.refused[k] = f.Why
		return true
	})
	return o, true
}

// settle waits up to d for the mesh to settle and returns what it holds,
// failing t (with what the components said) when it does not.
func (r *meshRun) settle(d time.Duration, what string) outcome {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if o, ok := r.settled(); ok {
			return o
		}
		if time.Now().After(deadline) {
			r.log.dump(r.t)
			r.t.Fatalf("%s did not settle in %v (%d compositions)", what, d, r.results.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// states counts the provisions of o by state.
func (o outcome) states() map[mesh.State]int {
	n := map[mesh.State]int{}
	for _, v := range o.provisions {
		st, _, _ := strings.Cut(v, " ")
		n[mesh.State(st)]++
	}
	return n
}

// diff says every key of want that got lacks or holds otherwise, and
// every key got has that want lacks, for one bucket.
func diff(t *testing.T, bucket string, got, want map[string]string) {
	t.Helper()
	bad := 0
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: key %s is missing; want %s", bucket, k, short(want[k]))
		case g != want[k]:
			t.Errorf("%s: key %s = %s; want %s", bucket, k, g, want[k])
		default:
			continue
		}
		if bad++; bad > 20 {
			t.Fatalf("%s: more than 20 keys differ", bucket)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected key %s = %s", bucket, k, got[k])
		}
	}
}

// What the generated mesh settles to with the vault as its only provider
// (seed 1): a plan per placed module, and per requirement a provision
// that the vault provides (credentials) or that stays asked of a provider
// that does not run (postgres, redis, keycloak, route-proxy).
const (
	wantPlans    = 429
	wantProvided = 756
	wantAsked    = 814
)

// short returns v, cut to 100 bytes.
func short(v string) string {
	if len(v) > 100 {
		return v[:100] + "…"
	}
	return v
}

// TestClusterFailover runs a generated mesh of 48 nodes x 8 modules on a
// three-server JetStream cluster with R3 buckets (the seat, the ask router
// and the vault each on its own connection, given all three URLs). Once
// the seat has composed 16 of the 48 nodes, the leaders of
// mesh-provisioner_provisions and of the seat's lease bucket are moved to
// the seat's own server, and that server is stopped while the seat goes on
// writing (its writes in flight fail). The mesh must settle on
// the two remaining servers exactly as an uninterrupted run on one server
// does: the same plans (bytes), provisions (state, provider, why) and
// refusals (429 plans; 756 provisions provided, every vault credential
// among them, and 814 asked; no refusal). The seat keeps its lease (it
// may fence its writes while the bus takes no renewal, and writes again
// once it does), and writes again what the bus did not take with backoff
// (few retry rounds, each node composed at most a few times more). The stopped server, started again on its store, catches up: its
// replicas of the seat's buckets hold what the others hold.
func TestClusterFailover(t *testing.T) {
	bustest.Long(t, "that a 48-node mesh settles exactly as on one server when the seat's own server of a three-server cluster stops mid-work, and that server catches up once back")
	// The uninterrupted run, on one server.
	single := bustest.Server(t)
	plain := startMesh(t, single.URL(), 0, nil)
	want := plain.settle(30*time.Second, "the single-server run")
	ws := want.states()
	t.Logf("one server: %d plans, %d provisions %v, %d refusals, %d compositions",
		len(want.plans), len(want.provisions), ws, len(want.refused), plain.results.Load())
	if len(want.plans) != wantPlans || ws[mesh.Provided] != wantProvided || ws[mesh.Asked] != wantAsked ||
		len(want.provisions) != wantProvided+wantAsked || len(want.refused) != 0 {
		t.Fatalf("the single-server run settled with %d plans, provisions %v and %d refusals; want %d plans, %d provided, %d asked, none else",
			len(want.plans), ws, len(want.refused), wantPlans, wantProvided, wantAsked)
	}

	began := time.Now()
	c := bustest.Cluster(t)
	stream := "KV_" + mesh.ProvisionsBucket
	stopped := -1
	stopping := make(chan struct{})
	down := make(chan struct{})
	var stopOnce sync.Once
	// At the 16th composition, on the seat's loop (which waits meanwhile),
	// the worst case: the seat's own server is made the leader of the
	// provisions, so that its connection and the stream's leader go at
	// once, with the seat's next writes in flight.
	run := startMesh(t, c.URL(), 3, func(r *meshRun, _ *compose.Result, n int64) {
		if n != failoverAt {
			return
		}
		stopOnce.Do(func() {
			defer close(stopping)
			// A vault still connecting to the server stopped fails to
			// start: the seat's pipelined writes reach the 16th
			// composition before it may have.
			<-r.started
			nc, _ := r.seat.Conn()
			at := c.Index(nc.ConnectedServerName())
			if at < 0 {
				t.Errorf("the seat is connected to %q, not a server of the cluster", nc.ConnectedServerName())
				return
			}
			c.MoveLeader(stream, at, 10*time.Second)
			c.MoveLeader("KV_"+mesh.SeatBucket, at, 10*time.Second)
			stopped = at
			// The server stops (which takes seconds: it hands its
			// leaderships over first) while the seat goes on
			// composing and writing.
			t.Logf("stopping server %d, the seat's and the leader of %s, after %d compositions, %v after the cluster started",
				stopped+1, stream, n, time.Since(began))
			go func() {
				defer close(down)
				c.Stop(at)
			}()
		})
	})
	select {
	case <-stopping:
	case <-time.After(60 * time.Second):
		t.Fatalf("the seat did not compose %d nodes in 60 s", failoverAt)
	}
	if stopped < 0 {
		t.FailNow()
	}
	defer func() { <-down }()
	got := run.settle(60*time.Second, "the cluster run")
	if os.Getenv("CLUSTER_TEST_LOG") != "" {
		run.log.dump(t)
	}
	writeErrs := run.log.count("seat: write failed") + run.log.count("seat: the key changed")
	rounds := run.log.count("seat: writes the bus did not take")
	t.Logf("cluster: settled %v after it started: %d plans, %d provisions %v, %d refusals; %d compositions, %d write errors, %d retry rounds",
		time.Since(began), len(got.plans), len(got.provisions), got.states(), len(got.refused), run.results.Load(), writeErrs, rounds)
	diff(t, mesh.PlansBucket, got.plans, want.plans)
	diff(t, mesh.ProvisionsBucket, got.provisions, want.provisions)
	diff(t, mesh.RefusedBucket, got.refused, want.refused)

	// Every bucket the components made (the seat's, its lease's, the
	// router's records, the providers' entries) and the operator's have
	// three replicas.
	var r1 []string
	buckets := map[string]bool{}
	for name := range run.obs.StreamNames(run.ctx).Name() {
		str, err := run.obs.Stream(run.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		buckets[strings.TrimPrefix(name, "KV_")] = true
		if n := str.CachedInfo().Config.Replicas; n != 3 {
			r1 = append(r1, fmt.Sprintf("%s (%d)", name, n))
		}
	}
	if len(r1) > 0 {
		t.Errorf("of %d buckets, %v have another replica count than 3", len(buckets), r1)
	}
	for _, b := range []string{mesh.PlacementBucket, mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RegistryBucket,
		mesh.SeatBucket, mesh.RecordsBucket, mesh.BoundBucket(mesh.VaultModule)} {
		if !buckets[b] {
			t.Errorf("bucket %s is missing (of %d)", b, len(buckets))
		}
	}
	// A lease bucket whose election outlasts the fence on a loaded
	// machine fences the seat's writes until the bus takes a renewal:
	// each time, it writes again, holding its lease still. Only when the
	// bus took no renewal for a whole TTL (a cluster electing its leaders
	// for longer, under -race with other test binaries on two cores) has
	// the lease lapsed in the bucket: the seat then ends writing nothing,
	// takes the lease again and the mesh converges (the diffs above). A
	// loss for any other reason (a renewal refused: another holder, a
	// conflict the seat misread) is a fault.
	lost := run.log.count("seat: the lease was lost; the seat writes nothing more")
	silent := run.log.countSaid("seat: the lease was lost; the seat writes nothing more", "renew the lease: not taken within")
	if fenced, again := run.log.count("seat: the lease may have lapsed"), run.log.count("seat: the bus took a renewal of the lease"); fenced != again+silent {
		t.Errorf("the seat fenced its writes %d times, wrote again %d times and lost its lease to a silent bus %d times; want each fence followed by one or the other", fenced, again, silent)
	} else if fenced > 0 {
		t.Logf("the seat fenced its writes %d times while the bus took no renewal: wrote again after %d, lost the lease to a bus silent for a whole TTL after %d", fenced, again, silent)
	}
	if lost != silent {
		t.Errorf("the seat lost its lease %d times, %d of them with no renewal taken for a whole TTL; want no other loss", lost, silent)
	}
	if st, why := run.seat.Seat().Lease(); st != seat.LeaseHeld || (run.seat.Seat() != run.first && silent == 0) {
		t.Errorf("the seat's lease is %s (%s), new seat %v; want held, by the first seat unless it lost the lease to a silent bus", st, why, run.seat.Seat() != run.first)
	}
	// What the bus did not take is written again with backoff, not in a
	// loop: a retry round is at least 250 ms after the last (growing), and
	// each node is composed again at most a few times.
	if rounds > 8 {
		t.Errorf("the seat retried its failed writes %d times; want at most 8 (backoff)", rounds)
	}
	// A node is composed again for each write of its that failed and for
	// each of its writes taken as failed (its ack lost with the server)
	// that comes back from the bus: at most three times more each.
	if n, most := run.results.Load(), plain.results.Load()+3*failoverNodes; n > most {
		t.Errorf("the seat composed %d times; want at most %d (the single-server run's %d, and each node three times more); per node: %s",
			n, most, plain.results.Load(), run.compositions())
	}
	if t.Failed() {
		run.log.dump(t)
		return
	}

	// The stopped server catches up once started again on its store.
	<-down
	began = time.Now()
	c.Restart(stopped)
	for _, b := range []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket, mesh.SeatBucket} {
		str := "KV_" + b
		var mine, theirs string
		if !waitFor(30*time.Second, func() bool {
			mine, theirs = "", ""
			var ok bool
			if mine, ok = localState(c.Server(stopped), str); !ok {
				return false
			}
			for i := range bustest.ClusterSize {
				if i == stopped {
					continue
				}
				if theirs, ok = localState(c.Server(i), str); !ok || theirs != mine {
					return false
				}
			}
			return true
		}) {
			t.Errorf("server %d, started again, holds %s as %q; the others as %q", stopped+1, str, mine, theirs)
		} else if b != mesh.SeatBucket {
			t.Logf("server %d caught up on %s in %v: %s", stopped+1, str, time.Since(began), mine)
		}
	}
}

// localState returns the state of stream (of the global account) as
// server s's own replica holds it: messages, first and last sequence and
// subjects.
func localState(s *bus.Server, stream string) (string, bool) {
	if s == nil {
		return "", false
	}
	info, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return "", false
	}
	for _, acc := range info.AccountDetails {
		for _, st := range acc.Streams {
			if st.Name == stream {
				return fmt.Sprintf("msgs %d, seq %d-%d, subjects %d", st.State.Msgs, st.State.FirstSeq, st.State.LastSeq, st.State.NumSubjects), true
			}
		}
	}
	return "", false
}

// waitFor polls cond every 20 ms until it returns true or d passes, and
// reports whether it did.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
