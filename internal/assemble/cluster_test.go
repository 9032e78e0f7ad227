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

func (c *counter) dump(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.said {
		t.Log(l)
	}
}

// outcome is what a settled mesh holds: plans (their bytes), provisions
// (state, provider and why) and refusals (their why), by key.
type outcome struct {
	plans, provisions, refused map[string]string
}

// meshRun is one run of the generated mesh: the seat, the ask router and
// the vault, each on its own connection, and an observer's copies of what
// the seat writes.
type meshRun struct {
	t       *testing.T
	ctx     context.Context
	log     *counter
	seat    *assemble.SeatRunning
	first   *seat.Seat
	obs     jetstream.JetStream
	copies  map[string]*bus.Copy
	results atomic.Int64 // compositions of a node the seat reported
}

// startMesh applies the generated mesh at url (a comma-separated list for
// the cluster) with replicas, then starts the seat, the router and the
// vault. onResult, if set, is called from the seat's OnResult.
func startMesh(t *testing.T, url string, replicas int, onResult func(r *meshRun, res *compose.Result, n int64)) *meshRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &meshRun{t: t, ctx: ctx, log: newCounter(), copies: map[string]*bus.Copy{}}
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
	for _, b := range []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket} {
		r.copies[b] = bus.Follow(ctx, ojs, b, bus.Options{Log: log})
	}
	return r
}

// settled reports whether the mesh has settled: every credential key (the
// vault's) is provided, the seat has nothing left to do, and the
// observer's copies hold every write made to the seat's buckets.
func (r *meshRun) settled() bool {
	provs := r.copies[mesh.ProvisionsBucket]
	if provs.Len() == 0 {
		return false
	}
	ok := true
	provs.Range(func(_ string, it bus.Item) bool {
		var p mesh.Provision
		if json.Unmarshal(it.Value, &p) != nil || (p.Provider.Module == mesh.VaultModule && p.State != mesh.Provided) {
			ok = false
		}
		return ok
	})
	if !ok || !r.seat.Seat().Settled(seat.Marks(r.ctx, r.obs)) {
		return false
	}
	for b, c := range r.copies {
		str, err := r.obs.Stream(r.ctx, "KV_"+b)
		if err != nil {
			return false
		}
		info, err := str.Info(r.ctx)
		if err != nil || c.Seen() < info.State.LastSeq {
			return false
		}
	}
	return true
}

// outcome returns what the observer's copies hold.
func (r *meshRun) outcome() outcome {
	o := outcome{plans: map[string]string{}, provisions: map[string]string{}, refused: map[string]string{}}
	r.copies[mesh.PlansBucket].Range(func(k string, it bus.Item) bool {
		o.plans[k] = string(it.Value)
		return true
	})
	r.copies[mesh.ProvisionsBucket].Range(func(k string, it bus.Item) bool {
		var p mesh.Provision
		if err := json.Unmarshal(it.Value, &p); err != nil {
			o.provisions[k] = "undecodable: " + err.Error()
			return true
		}
		o.provisions[k] = fmt.Sprintf("%s by %s: %s", p.State, p.Provider, p.Why)
		return true
	})
	r.copies[mesh.RefusedBucket].Range(func(k string, it bus.Item) bool {
		var f mesh.Refusal
		if err := json.Unmarshal(it.Value, &f); err != nil {
			o.refused[k] = "undecodable: " + err.Error()
			return true
		}
		o.refused[k] = f.Why
		return true
	})
	return o
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
			t.Errorf("%s: key %s is missing; want %s", bucket, k, want[k])
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

// TestClusterFailover runs a generated mesh of 48 nodes x 8 modules on a
// three-server JetStream cluster with R3 buckets (the seat, the ask router
// and the vault each on its own connection, given all three URLs). Once
// the seat has composed 16 of the 48 nodes, the leader of
// mesh-provisioner_provisions is moved to the seat's own server and that
// server is stopped while the seat goes on writing. The mesh must settle on
// the two remaining servers exactly as an uninterrupted run on one server
// does: the same plans (bytes), provisions (state, provider, why) and
// refusals (429 plans; 756 provisions provided, every vault credential
// among them, and 814 asked; no refusal). The seat keeps its lease,
// fences none of its writes, and writes again what the bus did not take
// with backoff (few retry rounds, each node composed at most a few times
// more). The stopped server, started again on its store, catches up: its
// replicas of the seat's buckets hold what the others hold.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster and two runs of a 48-node mesh: not in -short")
	}
	// The uninterrupted run, on one server.
	single := bustest.Server(t)
	plain := startMesh(t, single.URL(), 0, nil)
	bustest.WaitFor(t, 30*time.Second, "the single-server run to settle", plain.settled)
	want := plain.outcome()
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
			nc, _ := r.seat.Conn()
			at := c.Index(nc.ConnectedServerName())
			if at < 0 {
				t.Errorf("the seat is connected to %q, not a server of the cluster", nc.ConnectedServerName())
				return
			}
			c.MoveLeader(stream, at, 10*time.Second)
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
	if !waitFor(60*time.Second, run.settled) {
		run.log.dump(t)
		t.Fatalf("the cluster run did not settle in 60 s after server %d stopped (%d compositions)", stopped+1, run.results.Load())
	}
	if os.Getenv("CLUSTER_TEST_LOG") != "" {
		run.log.dump(t)
	}
	got := run.outcome()
	writeErrs := run.log.count("seat: write failed") + run.log.count("seat: the key changed")
	rounds := run.log.count("seat: writes the bus did not take")
	t.Logf("cluster: settled %v after it started: %d plans, %d provisions %v, %d refusals; %d compositions, %d write errors, %d retry rounds",
		time.Since(began), len(got.plans), len(got.provisions), got.states(), len(got.refused), run.results.Load(), writeErrs, rounds)
	diff(t, mesh.PlansBucket, got.plans, want.plans)
	diff(t, mesh.ProvisionsBucket, got.provisions, want.provisions)
	diff(t, mesh.RefusedBucket, got.refused, want.refused)

	if n := run.log.count("seat: the lease may have lapsed"); n > 0 {
		t.Errorf("the seat fenced its writes %d times; want never", n)
	}
	if n := run.log.count("seat: the lease was lost"); n > 0 {
		t.Errorf("the seat lost its lease %d times; want never", n)
	}
	if st, why := run.seat.Seat().Lease(); st != seat.LeaseHeld || run.seat.Seat() != run.first {
		t.Errorf("the seat's lease is %s (%s), new seat %v; want held by the first seat", st, why, run.seat.Seat() != run.first)
	}
	// What the bus did not take is written again with backoff, not in a
	// loop: a retry round is at least 250 ms after the last (growing), and
	// each node is composed again at most a few times.
	if rounds > 8 {
		t.Errorf("the seat retried its failed writes %d times; want at most 8 (backoff)", rounds)
	}
	if n, most := run.results.Load(), plain.results.Load()+failoverNodes; n > most {
		t.Errorf("the seat composed %d times; want at most %d (the single-server run's %d, and each node once more)",
			n, most, plain.results.Load())
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
