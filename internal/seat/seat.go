// Package seat runs the provisioner's seat: the one instance in the mesh
// that composes plans and judges provisions. It follows every bucket it
// reads as a watched copy, takes each change into an in-memory
// [state.Mesh], composes the nodes a change touches (coalesced per node:
// changes that arrive while a node is composed compose it once more
// afterwards) and re-judges the keys a provider's entry or have answers.
// It writes only what changed. It composes on change events, never on a
// timer.
package seat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Config configures a [Seat].
type Config struct {
	// ID names this instance in the lease. Empty means host name, process
	// id and start time.
	ID string
	// Answer is the connection the seat answers its verb unkeep on (its
	// user in the services account), which tells who asked. Nil means the
	// seat's JetStream connection, with no one named (a server without
	// accounts).
	Answer *bus.Answerer
	// Ask is the connection the seat asks the ask router on (its user in
	// the requests account). Nil means the seat's JetStream connection.
	Ask *nats.Conn
	// LeaseTTL is how long the lease outlives its holder. Zero means 10 s,
	// or [ReplicatedLease] when the seat's connection makes replicated
	// buckets;
	// under [MinLease], [Seat.Run] refuses to start ([ErrBadLease]).
	LeaseTTL time.Duration
	// Log receives the results and every odd key. Nil means slog.Default().
	Log *slog.Logger
	// OnResult, if set, is called on the seat's loop after each node's
	// result is written: once the bus acknowledged every write of it (or
	// refused it), in the order the nodes were composed. It must not
	// block.
	OnResult func(*compose.Result)
	// Slow is the composition time above which a composition that changed
	// nothing is said in the log. Zero means 5 ms.
	Slow time.Duration
	// Now is the seat's clock. Nil means time.Now.
	Now func() time.Time
	// AskTTL is how long a retiring key's ask stays open. Zero means
	// retire.DefaultTTL (7 days).
	AskTTL time.Duration
	// OnLease, if set, is called on its own goroutine once the lease is
	// held, with a context that ends when the seat stops holding it: the
	// place for the work only the holder does (the registry, the leftover
	// needs). Each write it makes must first pass [Seat.Fence].
	OnLease func(ctx context.Context)
	// AskTimeout is how long the seat waits for the ask router to record an
	// ask it raised. Zero means 5 s.
	AskTimeout time.Duration
	// OnWriteError, if set, is called for every write or delete of the
	// seat that the bus refused or did not acknowledge (each is also
	// logged), on the seat's loop. It must not block.
	OnWriteError func(bucket, key string, err error)
}

// readBuckets are the buckets the seat follows besides the providers'
// bound buckets.
var readBuckets = []string{
	mesh.PlacementBucket, mesh.WantsBucket, mesh.ModulesBucket, mesh.ManifestsBucket,
	mesh.BuildsBucket, mesh.HaveBucket,
	mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket,
	mesh.RecordsBucket,
}

// Seat is one instance of the provisioner's seat. Create it with [New] and
// run it with [Seat.Run]; its methods are safe for concurrent use.
type Seat struct {
	js   jetstream.JetStream
	cfg  Config
	log  *slog.Logger
	mesh *state.Mesh

	copies map[string]*bus.Copy // owned by the loop once running

	// answerers is who may sign an operator's answer, learnt from the
	// user JWT of the seat's asking connection; nil on a mesh with no
	// accounts (no JWT), where the router's word is taken.
	answerers *retire.Answerers

	mu      sync.Mutex
	queue   []bus.Change
	wake    chan struct{}
	busy    bool
	counts  map[string]int // compositions per node
	started bool
	watched map[string]*bus.Copy // bucket -> copy, readable by Settled
	lost    []lostAsk            // asks whose record vanished
	reask   reask                // asks no router recorded, raised again after a backoff
	unkeeps []*nats.Msg          // unkeep requests for the loop
	lease   LeaseState           // see Lease
	leaseIs string               // why of lease
	asking  int                  // asks raised and not yet answered by the router
	holding *lease               // set once held
	running context.Context      // Run's while it holds the lease, ended with the cause of its end

	retry     retry        // nodes whose write failed, composed again after a backoff
	mending   sync.Map     // bucket -> true while its store is checked after a put not acknowledged (mend)
	fenceSaid atomic.Bool  // a lease that may have lapsed was said (Fence waited)
	wrote     atomic.Int64 // writes and deletes the bus acknowledged
	paused    pause        // tests hold the seat still with it (export_test.go)
	waitsFor  atomic.Value // "<bucket> <key>" whose write in flight the loop waits for, or ""

	// The write pipeline (write.go), owned by the loop.
	flights  []*flight          // launched and not landed, oldest first
	flying   map[flyKey]*flight // the flight holding each key's write
	inFlight int                // puts published whose ack is not taken
	echoes   map[flyKey]uint64  // revision of an own write of each key the watch handed to the queue
	// window is how many puts may be in flight: maxFlying (tests make it
	// smaller).
	window int
	// roomWait is how long the loop has waited for acks because window
	// puts were in flight (makeRoom), and roomWaits how many times.
	roomWait  time.Duration
	roomWaits atomic.Int64
	// ackWait is how long a try of a put waits for its ack before the put
	// is sent again: ackTimeout (tests make it shorter).
	ackWait time.Duration
	// idPrefix begins the Nats-Msg-Id of each of the seat's puts, random
	// per seat (another instance, or this one started again, gives its
	// writes other ids); puts counts them, for the rest of the id.
	idPrefix string
	puts     uint64
	// resent counts the tries of puts sent again (their ack late, or lost
	// with the connection), recognised counts the puts found written by
	// an earlier try after a try sent again was refused as a conflict.
	resent, recognised atomic.Int64
	// lostAcks says a put's acks were found lost with the connection
	// since the puts in flight were last swept (resendLost), which
	// sweeping says is under way.
	lostAcks, sweeping bool
}

// lostAsk is an ask whose record vanished from mesh-asks_records before
// anyone answered it.
type lostAsk struct {
	key, id string
}

// ReplicatedLease is the seat's lease when its connection makes replicated
// buckets ([bus.ReplicasOf] over 1) and no lease is given: 12 s. A lease
// bucket whose leader's server stops has no leader until the others elect
// one, which nats-server does in 4 to 9 s; the seat renews every sixth of
// its lease (2 s) and stops writing at three quarters of it (its fence, 9
// s after the last renewal's request), so that an election of up to 7 s
// right after a renewal passes without fencing the seat. A standby tries
// to take the lease every second, so that it takes over within about 13 s
// of a holder killed right after a renewal (12 s for the key to lapse).
// The lapse is counted by the server from its write of the renewal, which
// is after the request the fence counts from: the holder stops writing 3
// s before the standby can take the lease, whatever the election.
const ReplicatedLease = 12 * time.Second

// New returns a seat that will work through js, the seat's own connection.
func New(js jetstream.JetStream, cfg Config) *Seat {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
		if bus.ReplicasOf(js) > 1 {
			cfg.LeaseTTL = ReplicatedLease
		}
	}
	if cfg.Slow == 0 {
		cfg.Slow = 5 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AskTimeout == 0 {
		cfg.AskTimeout = 5 * time.Second
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano())
	}
	s := &Seat{
		js:       js,
		cfg:      cfg,
		log:      cfg.Log,
		mesh:     state.New(),
		copies:   map[string]*bus.Copy{},
		wake:     make(chan struct{}, 1),
		counts:   map[string]int{},
		watched:  map[string]*bus.Copy{},
		window:   maxFlying,
		ackWait:  ackTimeout,
		idPrefix: writeIDPrefix(),
		flying:   map[flyKey]*flight{},
		echoes:   map[flyKey]uint64{},
		lease:    LeaseWaiting,
		leaseIs:  "the seat has not started",
	}
	s.answerers = answerersOf(s.askConn(), cfg.Log)
	return s
}

// answerersOf returns who may sign an operator's answer: the account of
// nc's user JWT (the seat's user in mesh-requests, the account operators
// answer in) and its issuers ([retire.AnswerersOf]); nil when nc connects
// with no JWT (a mesh with no accounts), said once.
func answerersOf(nc *nats.Conn, log *slog.Logger) *retire.Answerers {
	if nc == nil || nc.Opts.UserJWT == nil {
		log.Info("seat: no user JWT: answers are taken on the ask router's word (a mesh with no accounts)")
		return nil
	}
	token, err := nc.Opts.UserJWT()
	if err != nil {
		a := &retire.Answerers{Err: fmt.Errorf("seat: reading its own user JWT: %w", err)}
		log.Error("seat: no answer can be checked; every warrant is refused", "err", a.Err)
		return a
	}
	a := retire.AnswerersOf(token)
	if a.Err != nil {
		log.Error("seat: no answer can be checked; every warrant is refused", "err", a.Err)
	}
	return a
}

// askConn returns the connection the seat asks the ask router on.
func (s *Seat) askConn() *nats.Conn {
	if s.cfg.Ask != nil {
		return s.cfg.Ask
	}
	return s.js.Conn()
}

// answerer returns the connection the seat answers unkeep on.
func (s *Seat) answerer() *bus.Answerer {
	if s.cfg.Answer != nil {
		return s.cfg.Answer
	}
	return &bus.Answerer{Conn: s.js.Conn()}
}

// Lease returns where the seat stands with its lease and a short text
// saying why (for example "the lease is held by host-1-…"), for a health
// check: a seat that holds the lease or waits for it is healthy. A seat
// that holds the lease but whose renewals the bus does not take (a
// partition: its server cannot reach the lease bucket's leader) is
// [LeaseFailing], saying since when, not held.
func (s *Seat) Lease() (LeaseState, string) {
	s.mu.Lock()
	st, why, l := s.lease, s.leaseIs, s.holding
	s.mu.Unlock()
	if st == LeaseHeld && l != nil {
		if bad := l.unrenewed(); bad != "" {
			return LeaseFailing, fmt.Sprintf("holding the lease as %s, but %s", s.cfg.ID, bad)
		}
	}
	return st, why
}

func (s *Seat) noteLease(st LeaseState, why string) {
	s.mu.Lock()
	s.lease, s.leaseIs = st, why
	s.mu.Unlock()
}

// Run takes the seat's lease (waiting while another instance holds it),
// follows the mesh, composes every node once, then composes on each change
// until ctx is done. It returns nil when ctx is done, an error wrapping
// [ErrLeaseLost] when the lease is lost (a renewal refused, or none taken
// for a whole TTL; see [Seat.Fence]), an error wrapping [ErrBadLease] at once when
// Config.LeaseTTL is under [MinLease], or an error when the seat's buckets
// cannot be made. A seat runs once: after Run returns, make a new one.
func (s *Seat) Run(ctx context.Context) error {
	defer s.noteLease(LeaseStopped, "the seat stopped")
	if err := CheckLease(s.cfg.LeaseTTL); err != nil {
		return err
	}
	l, err := acquire(ctx, s.js, s.cfg.ID, s.cfg.LeaseTTL, s.log, s.noteLease)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	l.wait = s.paused.waitRenew
	s.log.Info("seat: holding the lease", "id", s.cfg.ID, "ttl", l.ttl)
	s.noteLease(LeaseHeld, "holding the lease as "+s.cfg.ID)
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	s.holding, s.running = l, ctx
	s.mu.Unlock()
	held := make(chan struct{})
	go func() {
		defer close(held)
		if err := l.hold(ctx); err != nil {
			s.log.Error("seat: the lease was lost; the seat writes nothing more", "err", err)
			cancel(err)
		}
	}()
	// On the way out: stop renewing, then give the lease back. The asks
	// waiting to be raised again are the next holder's (it asks what its
	// keys name).
	defer func() {
		s.reask.drop()
		cancel(nil)
		<-held
		l.release()
	}()
	if s.cfg.OnLease != nil {
		go s.cfg.OnLease(ctx)
	}

	for _, b := range readBuckets {
		s.follow(ctx, b)
	}
	if err := s.start(ctx); err != nil {
		return err
	}
	if stop, err := s.subscribeUnkeep(ctx); err != nil {
		s.log.Error("seat: cannot answer "+mesh.UnkeepSubject, "err", err)
	} else {
		defer stop()
	}
	for {
		select {
		case <-ctx.Done():
			if err := context.Cause(ctx); errors.Is(err, ErrLeaseLost) {
				return err
			}
			return nil
		case <-s.wake:
			s.paused.wait()
			s.round(ctx)
		}
	}
}

// Fence returns nil while the seat may write: it holds its lease, and the
// request of its last successful renewal was sent less than three quarters
// of the lease's TTL ago, read on the monotonic clock (which runs on while
// the process is stopped, as by SIGSTOP). Past that the lease may have
// lapsed: Fence says so and waits until a renewal is taken (the bus
// answers again: the seat still holds its lease, and writes on), or
// returns an error wrapping [ErrLeaseLost] once the lease is lost (a
// renewal refused, or none taken for a whole TTL: [Seat.Run] ends with
// it) or the seat stops. Every write of the seat (its batches and deletes,
// its asks and withdrawals, and what Config.OnLease writes) is made only
// after Fence returned nil; each is also conditional on the revision it
// read, so that a seat stopped between its Fence and its write overwrites
// nothing.
func (s *Seat) Fence() error {
	s.mu.Lock()
	l, ctx := s.holding, s.running
	s.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%w: the seat holds no lease", ErrLeaseLost)
	}
	var since time.Time
	for {
		age, renewed, changed := l.state()
		if !renewed {
			return fmt.Errorf("%w: its renewal was refused or not taken for its TTL (%v)", ErrLeaseLost, l.ttl)
		}
		if age < l.fence() {
			if !since.IsZero() {
				s.log.Info("seat: the bus took a renewal of the lease; the seat writes again", "id", s.cfg.ID, "fenced_for", time.Since(since).Round(time.Millisecond))
			}
			return nil
		}
		if since.IsZero() {
			since = time.Now()
			s.fenceSaid.Store(true)
			s.log.Warn("seat: the lease may have lapsed; the seat writes nothing until the bus takes a renewal",
				"id", s.cfg.ID, "last_renewal_sent", age.Round(time.Millisecond), "ttl", l.ttl)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: the seat stopped while its lease may have lapsed: %v", ErrLeaseLost, context.Cause(ctx))
		}
	}
}

// follow starts a watched copy of bucket whose changes go to the queue.
// The copy keeps revisions only: every value is decoded into the seat's
// mesh, which is the one place the seat reads it from.
func (s *Seat) follow(ctx context.Context, bucket string) {
	if _, ok := s.copies[bucket]; ok {
		return
	}
	// The seat writes its own buckets again when they are lost; it only
	// reads the others, whose keys a bucket gone leaves as last known
	// (bus.Options.Writes): a placement deleted is not a mesh emptied.
	c := bus.Follow(ctx, s.js, bucket, bus.Options{Create: true, Log: s.log, OnChange: s.enqueue, RevisionsOnly: true, Leader: true,
		Writes: slices.Contains(ownBuckets, bucket)})
	s.copies[bucket] = c
	s.mu.Lock()
	s.watched[bucket] = c
	s.mu.Unlock()
}

// enqueue hands a change to the loop; it never blocks the watch.
func (s *Seat) enqueue(ch bus.Change) {
	if s.paused.keep(ch) {
		return
	}
	s.mu.Lock()
	s.queue = append(s.queue, ch)
	s.mu.Unlock()
	s.poke()
}

// start waits for every copy's initial values (also of bound buckets found
// on the way), then composes every node once.
func (s *Seat) start(ctx context.Context) error {
	for {
		for _, c := range s.copies {
			select {
			case <-c.Ready():
			case <-ctx.Done():
				return nil
			}
		}
		d := s.drain()
		if len(d.bound) == 0 {
			break
		}
		for _, p := range d.bound {
			s.follow(ctx, mesh.BoundBucket(p))
		}
	}
	nodes := s.mesh.Nodes()
	s.log.Info("seat: composing every node", "nodes", len(nodes))
	s.mu.Lock()
	s.started = true
	s.busy = true // until work has composed every node
	s.mu.Unlock()
	d := &dirty{nodes: map[string]bool{}, keys: map[string]bool{}}
	for _, n := range nodes {
		d.nodes[n] = true
	}
	// Records that vanished while no seat followed them.
	s.mesh.Provisions(func(key string, _ mesh.Provision) { s.vanished(key) })
	s.withdrawOrphans()
	began := time.Now()
	s.work(ctx, d)
	s.log.Info("seat: composed every node and judged what came meanwhile", "nodes", len(nodes),
		"took", time.Since(began), "waited_for_acks", s.roomWait, "wrote", s.wrote.Load())
	return nil
}

// dirty collects what changes touched since the last round.
type dirty struct {
	nodes map[string]bool
	keys  map[string]bool
	bound []string
	junk  map[string]map[string]bool // bucket -> keys holding values not of their kind
	order []string                   // the current sweep's nodes in name order (see next)
	// composed counts the compositions since judgeBetween last looked at
	// keys, and left is how many keys it left there (see judgeBetween).
	composed, left int
}

// drain takes every queued change into the mesh and returns what they
// touched.
func (s *Seat) drain() *dirty {
	d := &dirty{nodes: map[string]bool{}, keys: map[string]bool{}}
	s.drainInto(d)
	return d
}

// addJunk notes key of bucket as holding a value not of its kind.
func (d *dirty) addJunk(bucket, key string) {
	if d.junk == nil {
		d.junk = map[string]map[string]bool{}
	}
	if d.junk[bucket] == nil {
		d.junk[bucket] = map[string]bool{}
	}
	d.junk[bucket][key] = true
}

// drainInto takes every queued change into the mesh, leaving out the
// echoes of the seat's own writes, and notes in d what they touched.
func (s *Seat) drainInto(d *dirty) {
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	again := s.retry.take()
	if len(q) > 0 || len(again) > 0 {
		s.busy = true // until work has handled what q touches
	}
	s.mu.Unlock()
	for _, n := range again {
		d.nodes[n] = true
	}
	for _, ch := range q {
		s.take(ch, d)
	}
}

// take takes one change into the mesh and notes in d what it touched. A
// change of a key whose write is in flight waits until that write has
// landed (see ownEcho).
func (s *Seat) take(ch bus.Change, d *dirty) {
	if s.ownEcho(ch) {
		return
	}
	t := s.mesh.Take(ch)
	if ch.Bucket == mesh.RecordsBucket && ch.Deleted {
		if key, ok := s.mesh.AskedBy(ch.Key); ok {
			s.vanished(key)
		}
	}
	if t.Odd != nil {
		s.log.Warn("seat: odd change", "bucket", ch.Bucket, "key", ch.Key, "why", t.Odd)
	}
	for _, n := range t.Nodes {
		d.nodes[n] = true
	}
	for _, k := range t.Keys {
		d.keys[k] = true
	}
	d.bound = append(d.bound, t.Bound...)
	if t.Junk {
		d.addJunk(ch.Bucket, ch.Key)
	}
}

// round handles what arrived since the last one.
func (s *Seat) round(ctx context.Context) {
	s.work(ctx, s.drain())
}

// work composes dirty nodes one at a time, taking in the changes that
// arrive meanwhile (a node touched again is composed once more) and judging
// dirty keys of nodes not dirty between compositions (judgeBetween), then
// re-judges the dirty keys left, until nothing is dirty and every write has
// landed. A node is composed while the writes of the ones before are in
// flight (write.go).
func (s *Seat) work(ctx context.Context, d *dirty) {
	defer s.setBusy(false)
	for ctx.Err() == nil {
		s.landReady(ctx, d)
		for _, p := range d.bound {
			s.follow(ctx, mesh.BoundBucket(p))
		}
		d.bound = nil
		if len(d.nodes) > 0 {
			node := d.next()
			s.composeNode(ctx, node, d)
			s.drainInto(d)
			s.judgeBetween(ctx, d)
			continue
		}
		if len(d.junk) > 0 {
			junk := d.junk
			d.junk = nil
			s.dropJunk(ctx, junk, d)
			continue
		}
		if lost := s.takeLost(); len(lost) > 0 {
			s.clearLost(ctx, lost, d)
			continue
		}
		if due := s.reask.take(); len(due) > 0 {
			s.raiseAgain(due)
			continue
		}
		if u := s.takeUnkeeps(); len(u) > 0 {
			s.unkeep(ctx, u, d)
			continue
		}
		if len(d.keys) > 0 {
			keys := make([]string, 0, len(d.keys))
			for k := range d.keys {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			d.keys = map[string]bool{}
			s.judgeKeys(ctx, keys, d)
			s.drainInto(d)
			continue
		}
		if len(s.flights) > 0 {
			// Nothing to compose: wait for the oldest flight's acks, or
			// for a change to take in meanwhile.
			s.landHead(ctx, d, blockOrWake)
			s.drainInto(d)
			continue
		}
		s.drainInto(d)
		s.mu.Lock()
		lost := len(s.lost)
		s.mu.Unlock()
		if len(d.nodes) == 0 && len(d.keys) == 0 && len(d.bound) == 0 && len(d.junk) == 0 && lost == 0 && len(s.flights) == 0 {
			return
		}
	}
}

// Between two compositions the seat judges the keys that changes touched
// (d.keys: a provider's entry or have, an ask's record, a key depended on)
// in bounded batches, so that their writes flow through the pipeline while
// nodes are composed, instead of waiting for the last dirty node and going
// out as one judgement of thousands of keys (at the cold start, the
// vault's entries come a few hundred keys behind the seat's asks).
const (
	// judgeEvery is how many compositions go by before judgeBetween looks
	// at the keys again.
	judgeEvery = 8
	// judgeBatch is the most keys judged at once between two compositions;
	// judgeBetween also looks as soon as judgeBatch keys more than it left
	// the last time wait.
	judgeBatch = 256
)

// judgeBetween, called after each composition while nodes are dirty,
// judges up to judgeBatch keys of d.keys, in name order, every judgeEvery
// compositions or once judgeBatch keys more wait: those whose node is not
// dirty (the node's composition judges its keys, and they are judged again
// once no node is dirty, as before). Each key's judgement reads the mesh
// as composed so far, the puts in flight included.
func (s *Seat) judgeBetween(ctx context.Context, d *dirty) {
	d.composed++
	if len(d.keys) == 0 || (d.composed < judgeEvery && len(d.keys) < d.left+judgeBatch) {
		return
	}
	d.composed = 0
	keys := make([]string, 0, min(len(d.keys), judgeBatch))
	for k := range d.keys {
		if node, _, _ := strings.Cut(k, "."); !d.nodes[node] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	keys = keys[:min(len(keys), judgeBatch)]
	for _, k := range keys {
		delete(d.keys, k)
	}
	d.left = len(d.keys)
	if len(keys) == 0 {
		return
	}
	s.judgeKeys(ctx, keys, d)
	s.drainInto(d)
}

// next takes the first dirty node in name order of the current sweep: the
// dirty nodes are sorted once per sweep, not searched for the least at
// every pick (that made composing every node at start quadratic). A node
// dirtied again behind the sweep is taken in the next one. d.nodes is not
// empty.
func (d *dirty) next() string {
	for {
		if len(d.order) == 0 {
			d.order = sortedKeys(d.nodes)
		}
		node := d.order[0]
		d.order = d.order[1:]
		if d.nodes[node] {
			delete(d.nodes, node)
			return node
		}
	}
}

func (s *Seat) setBusy(b bool) {
	s.mu.Lock()
	s.busy = b
	s.mu.Unlock()
}

// composeNode composes one node and launches its writes; once they have
// landed, it raises the result's asks and says the result.
func (s *Seat) composeNode(ctx context.Context, node string, d *dirty) {
	var res *compose.Result
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("seat: composition panicked", "node", node, "panic", r)
				res = nil
			}
		}()
		res = compose.Node(s.mesh, node, s.cfg.Now().UTC(), compose.AskTTL(s.cfg.AskTTL), compose.Answerers(s.answerers))
	}()
	if res == nil {
		return
	}
	s.mesh.Composed(res)
	start := time.Now()
	w := writes{plans: res.Plans, plansGone: res.PlansRemoved, refusals: res.Refusals, refusalsGone: res.RefusalsRemoved,
		provs: res.Provisions, retired: res.Retired, retiredWhy: res.RetiredWhy}
	s.write(ctx, w, d, func(changed int, wrote map[string]bool) {
		s.raise(written(res.Asks, wrote))
		s.withdraw(res.Withdrawn, res.WithdrawnWhy)
		s.mu.Lock()
		s.counts[node]++
		s.mu.Unlock()
		s.report(res, changed, time.Since(start))
		if s.cfg.OnResult != nil {
			s.cfg.OnResult(res)
		}
	})
	// A key that retires no longer depends on another node's key: that node
	// may now find its own key unneeded.
	for _, k := range res.Retiring {
		p, _ := s.mesh.Provision(k)
		for _, dep := range p.DependsOn {
			if dk, err := mesh.ParseProvisionKey(dep); err == nil && dk.Node != node {
				d.nodes[dk.Node] = true
			}
		}
	}
}

// judgeKeys re-judges keys whose provider's entry or have changed, or
// whose ask's record changed, and launches the writes; once they have
// landed, it raises the asks and says the result.
func (s *Seat) judgeKeys(ctx context.Context, keys []string, d *dirty) {
	res := compose.Judge(s.mesh, keys, s.mesh.NeedOf, s.cfg.Now().UTC(), compose.AskTTL(s.cfg.AskTTL), compose.Answerers(s.answerers))
	for _, p := range res.Problems {
		s.log.Warn("seat: warrant refused", "why", p)
	}
	// The puts go out in flights of at most a quarter of the window, in
	// name order: each lands on its own (its keys said, the asks of its keys
	// raised), and the last one, which also retires, says the result. A
	// flight lands only once all its acks are in, so a flight the size of
	// the window would let the window run dry before the next put goes out
	// (makeRoom frees it a quarter at a time).
	keys = sortedKeys(res.Provisions)
	for first := true; first || len(keys) > 0; first = false {
		part := keys[:min(len(keys), max(s.window/4, 1))]
		keys = keys[len(part):]
		last := len(keys) == 0
		w := writes{provs: res.Provisions}
		if !first || !last {
			w.provs = make(map[string]mesh.Provision, len(part))
			for _, k := range part {
				w.provs[k] = res.Provisions[k]
			}
		}
		if last {
			w.retired, w.retiredWhy = res.Retired, res.RetiredWhy
		}
		s.write(ctx, w, d, func(_ int, wrote map[string]bool) {
			for _, k := range part {
				if wrote[k] {
					p := res.Provisions[k]
					s.log.Info("seat: judged", "key", k, "state", p.State, "why", p.Why, "ask", p.Ask)
				}
			}
			s.raise(written(res.Asks, wrote))
			if !last {
				return
			}
			s.withdraw(res.Withdrawn, res.WithdrawnWhy)
			if s.cfg.OnResult != nil && (len(res.Provisions) > 0 || len(res.Retired) > 0 || len(res.Problems) > 0) {
				s.cfg.OnResult(res)
			}
		})
	}
}

// written returns the asks whose key's write (naming the ask's id) the bus
// took: an ask is raised only by the seat whose conditional write of its
// key succeeded, so that a seat that lost its lease never raises a second
// ask for a key.
func written(asks []mesh.Ask, wrote map[string]bool) []mesh.Ask {
	var out []mesh.Ask
	for _, a := range asks {
		if wrote[strings.TrimPrefix(a.About, "provision.")] {
			out = append(out, a)
		}
	}
	return out
}

// raise publishes asks on asks.mesh-provisioner as requests, so that the
// router's record of each is confirmed. An ask no router records in time
// (no responders, no reply within AskTimeout) is said and raised again,
// the same ask under the same id, after a backoff (reask): its key keeps
// naming it meanwhile, and a router records an id once.
func (s *Seat) raise(asks []mesh.Ask) {
	if len(asks) == 0 || s.Fence() != nil {
		return
	}
	nc := s.askConn()
	s.mu.Lock()
	s.asking += len(asks)
	s.mu.Unlock()
	for _, a := range asks {
		key := strings.TrimPrefix(a.About, "provision.")
		s.log.Info("seat: asking the operator", "key", key, "ask", a.ID, "headline", a.Headline)
		b, _ := json.Marshal(a)
		go func() {
			err := s.request(nc, b)
			if err != nil {
				wait := s.reask.fail(a, s.poke)
				s.log.Error("seat: no ask router recorded the ask; it is raised again after a backoff",
					"key", key, "ask", a.ID, "err", err, "retry_in", wait)
			} else {
				s.reask.recorded()
			}
			s.mu.Lock()
			s.asking--
			s.mu.Unlock()
		}()
	}
}

// request publishes an ask (its JSON b) on asks.mesh-provisioner and waits
// for the router's reply: an error when none comes in time, or when the
// router refused to record it.
func (s *Seat) request(nc *nats.Conn, b []byte) error {
	m, err := nc.Request(mesh.AsksSubject, b, s.cfg.AskTimeout)
	if err != nil {
		return err
	}
	var rep asks.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return fmt.Errorf("the router's reply does not decode: %w", err)
	}
	if rep.Error != "" || rep.Record == nil {
		return fmt.Errorf("the router did not record it: %s (%s)", rep.Error, rep.Code)
	}
	return nil
}

// raiseAgain raises again the asks no router recorded whose key still
// names them, retiring with no warrant, and whose record the seat has not
// seen meanwhile.
func (s *Seat) raiseAgain(due []mesh.Ask) {
	var again []mesh.Ask
	for _, a := range due {
		key := strings.TrimPrefix(a.About, "provision.")
		p, ok := s.mesh.Provision(key)
		if !ok || p.State != mesh.Retiring || p.Ask != a.ID || p.Warrant != nil {
			continue
		}
		if _, recorded := s.mesh.Record(a.ID); recorded {
			continue
		}
		again = append(again, a)
	}
	s.raise(again)
}

// withdraw tells the ask router that the asks of keys (key -> ask id) are no
// longer asked, so that they leave the operator's list, with the why whys
// gives for the key, else that the key is needed again. A failure is said
// and changes nothing else: the key no longer names the ask.
func (s *Seat) withdraw(asked, whys map[string]string) {
	if len(asked) == 0 || s.Fence() != nil {
		return
	}
	nc := s.askConn()
	s.mu.Lock()
	s.asking += len(asked)
	s.mu.Unlock()
	for key, id := range asked {
		why, ok := whys[key]
		if !ok {
			why = "the key " + key + " is needed again"
		}
		s.log.Info("seat: withdrawing an ask", "key", key, "ask", id, "why", why)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AskTimeout)
			defer cancel()
			_, err := asks.Withdraw(ctx, nc, retire.Asker, id, why)
			s.mu.Lock()
			s.asking--
			s.mu.Unlock()
			if err != nil {
				s.log.Warn("seat: the ask router did not withdraw the ask", "key", key, "ask", id, "err", err)
			}
		}()
	}
}

// withdrawOrphans withdraws every open ask of the seat's that no key names
// any more: a seat stopped (its lease taken over) after it wrote the key
// needed again or asked anew, and before it withdrew the old ask, left it
// open for the operator with nothing to answer.
func (s *Seat) withdrawOrphans() {
	s.mesh.Records(func(id string, r mesh.Record) {
		if r.State != mesh.RecordOpen || r.Ask.Asker != retire.Asker {
			return
		}
		if _, named := s.mesh.AskedBy(id); named {
			return
		}
		// One at a time: two orphans may be of the same key.
		s.withdraw(map[string]string{strings.TrimPrefix(r.Ask.About, "provision."): id}, nil)
	})
}

// vanished notes the ask of key as lost when the key is retiring, waits for
// its ask's answer, and the ask router holds no record of that ask: it
// ended with no choice, and is cleared and asked again (clearLost).
func (s *Seat) vanished(key string) {
	p, ok := s.mesh.Provision(key)
	if !ok || p.State != mesh.Retiring || p.Ask == "" || p.Warrant != nil {
		return
	}
	if _, recorded := s.mesh.Record(p.Ask); recorded {
		return
	}
	s.mu.Lock()
	s.lost = append(s.lost, lostAsk{key: key, id: p.Ask})
	s.mu.Unlock()
}

func (s *Seat) takeLost() []lostAsk {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lost
	s.lost = nil
	return l
}

// clearLost clears the ask of keys whose ask's record vanished: they say
// so in their why, and their node is composed again at once, which asks
// them again.
func (s *Seat) clearLost(ctx context.Context, lost []lostAsk, d *dirty) {
	out := map[string]mesh.Provision{}
	vanished := map[string]string{}
	for _, l := range lost {
		p, ok := s.mesh.Provision(l.key)
		if _, recorded := s.mesh.Record(l.id); !ok || p.Ask != l.id || recorded || p.Warrant != nil {
			continue
		}
		p.Ask = ""
		p.At = s.cfg.Now().UTC()
		p.Why = retire.Vanished(p.Why, l.id)
		vanished[l.key] = l.id
		out[l.key] = p
	}
	s.write(ctx, writes{provs: out}, d, func(_ int, wrote map[string]bool) {
		for _, key := range sortedKeys(vanished) {
			if !wrote[key] {
				continue
			}
			s.log.Warn("seat: the record of the key's ask vanished from "+mesh.RecordsBucket+
				" before anyone answered it; the ask is cleared and asked again", "key", key, "ask", vanished[key])
			if k, err := mesh.ParseProvisionKey(key); err == nil {
				d.nodes[k.Node] = true
			}
		}
	})
}

// Wrote returns how many writes and deletes of this seat the bus
// acknowledged.
func (s *Seat) Wrote() int64 { return s.wrote.Load() }

// report logs a node's result.
func (s *Seat) report(res *compose.Result, changed int, write time.Duration) {
	attrs := []any{
		"node", res.Node,
		"plans_written", len(res.Plans), "plans_removed", len(res.PlansRemoved),
		"provisions_changed", len(res.Provisions), "retiring", len(res.Retiring),
		"held", len(res.Held), "problems", len(res.Problems),
		"compose", res.Compose, "judge", res.Judge, "write", write,
	}
	for m, why := range res.Held {
		s.log.Warn("seat: module held", "node", res.Node, "module", m, "why", why)
	}
	for _, p := range res.Problems {
		s.log.Warn("seat: problem", "node", res.Node, "problem", p)
	}
	switch {
	case changed > 0:
		s.log.Info("seat: composed", attrs...)
	case res.Compose+res.Judge > s.cfg.Slow:
		s.log.Warn("seat: slow composition changed nothing", attrs...)
	default:
		s.log.Debug("seat: composed, nothing changed", attrs...)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Compositions returns how many times node has been composed.
func (s *Seat) Compositions(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[node]
}

// Settled reports whether the seat has composed every node once, holds
// every write made to the buckets it follows up to marks (bucket -> stream
// sequence, see [Marks] and [Seat.Marks]), has every write of its own
// acknowledged, and has nothing left to do. A mark of a <provider>_bound
// bucket the seat does not follow is left out (the seat judges nothing on
// it); a bucket it follows must have delivered its initial values.
func (s *Seat) Settled(marks map[string]uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.busy || len(s.queue) > 0 || s.asking > 0 || len(s.lost) > 0 || s.retry.pending() {
		return false
	}
	for _, c := range s.watched {
		select {
		case <-c.Ready():
		default:
			return false
		}
	}
	for b, seq := range marks {
		c, ok := s.watched[b]
		if !ok && strings.HasSuffix(b, boundSuffix) {
			continue
		}
		if !ok || c.Seen() < seq {
			return false
		}
	}
	return true
}

// boundSuffix ends the name of every <provider>_bound bucket.
var boundSuffix = mesh.BoundBucket("")

// inputBuckets are the buckets whose changes the seat composes on, besides
// the providers' bound buckets.
var inputBuckets = []string{mesh.PlacementBucket, mesh.WantsBucket, mesh.ModulesBucket,
	mesh.ManifestsBucket, mesh.BuildsBucket, mesh.HaveBucket}

// ownBuckets are the buckets the seat alone writes.
var ownBuckets = []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket}

// Marks returns the last stream sequence of each bucket the seat composes
// on, read through js (missing and empty buckets are left out): pass it to
// [Seat.Settled] to wait until the seat has taken every write made before.
// It covers placement, wants, modules, manifests, builds and have, and the
// seat's own plans, provisions and refused (a write of the seat's whose
// acknowledgement was lost with a server may have landed after all: the
// seat is settled only once its watch has brought it back and the seat
// judged on it), not the providers' <provider>_bound buckets: see
// [Seat.Marks].
func Marks(ctx context.Context, js jetstream.JetStream) map[string]uint64 {
	marks := map[string]uint64{}
	for _, b := range inputBuckets {
		mark(ctx, js, b, marks)
	}
	for _, b := range ownBuckets {
		mark(ctx, js, b, marks)
	}
	return marks
}

// Marks returns, as [Marks] does, the last stream sequence of each bucket
// the seat composes on, and of each <provider>_bound bucket it follows
// now (whose entries it judges keys on), read through js: once
// [Seat.Settled] holds for them, the seat has judged every entry written
// before. A bound bucket the seat starts to follow later is waited for by
// Settled until its initial values are in.
func (s *Seat) Marks(ctx context.Context, js jetstream.JetStream) map[string]uint64 {
	marks := Marks(ctx, js)
	s.mu.Lock()
	var bound []string
	for b := range s.watched {
		if strings.HasSuffix(b, boundSuffix) {
			bound = append(bound, b)
		}
	}
	s.mu.Unlock()
	for _, b := range bound {
		mark(ctx, js, b, marks)
	}
	return marks
}

// mark puts bucket's last stream sequence into marks, unless the bucket is
// missing, empty or cannot be read.
func mark(ctx context.Context, js jetstream.JetStream, bucket string, marks map[string]uint64) {
	str, err := js.Stream(ctx, "KV_"+bucket) // asks the server for the stream's info
	if err != nil {
		return
	}
	if info := str.CachedInfo(); info.State.Msgs > 0 {
		marks[bucket] = info.State.LastSeq
	}
}
