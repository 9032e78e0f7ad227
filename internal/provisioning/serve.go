package provisioning

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Queue is the queue group of the verb's responders, so that one of
// several seat processes answers each request.
const Queue = "mesh-provisioner"

// Options configures [Start].
type Options struct {
	// Log says each request that gets an error answer and each reply that
	// cannot be sent. Nil means slog.Default().
	Log *slog.Logger
	// Idle is how long the verb keeps following a bucket that no request
	// has read: a bucket is followed from the first request that needs it
	// until no request has needed it for Idle. Zero means [DefaultIdle].
	Idle time.Duration
	// Wait is how long a request waits for a bucket's copy to hold every
	// key before it is answered with an error. Zero means [DefaultWait].
	Wait time.Duration
}

// DefaultIdle is how long the verb keeps following a bucket no request
// has read, by default.
const DefaultIdle = time.Minute

// DefaultWait is how long a request waits for its bucket's copy, by
// default: under the 10 s an operator's get waits for the answer.
const DefaultWait = 8 * time.Second

// statusCounts names the verb's tally of [StatusBuckets] among its
// followed copies: no bucket has this name.
const statusCounts = "status counts of " + mesh.PlacementBucket + ", " + mesh.PlansBucket + ", " +
	mesh.ProvisionsBucket + " and " + mesh.RefusedBucket

// bucketOf returns the bucket a request of what reads: needs are derived
// from the plans; status is counted by the tally ([statusCounts]).
func bucketOf(what string) string {
	switch what {
	case WhatNeeds, WhatPlans:
		return mesh.PlansBucket
	case WhatApplied:
		return mesh.AppliedBucket
	case WhatCollect:
		return mesh.CollectBucket
	case WhatProvisions:
		return mesh.ProvisionsBucket
	case WhatRefused:
		return mesh.RefusedBucket
	case WhatStatus:
		return statusCounts
	case WhatDigests:
		return digestSums
	default:
		return mesh.RegistryBucket
	}
}

// Start makes every bucket of [Buckets] that is missing, then answers
// mesh-provisioner.provisioning on nc in queue group [Queue] until ctx is
// done. It returns once the verb is answered, or ctx's error when ctx ends
// first, or an error when a bucket cannot be made or the verb cannot be
// subscribed to.
//
// Each request is answered from a watched copy of the one bucket it reads
// (the plans for needs), followed through js from the first request that
// needs it, kept current while requests come, and stopped once no request
// has needed it for Options.Idle: a process that is not asked holds no
// copy (the seat's process holds its own copies of the plans and
// provisions, decoded, which the verb's raw values would double). Status
// is answered from a tally of [StatusBuckets] counted from Start on and
// kept while the verb runs (each key's node, and each provision's state:
// some 100 bytes a key), so that its first answer is as quick as the next. A
// request whose bucket's copy does not hold every key within Options.Wait
// (the first request, on a bus that does not answer) is answered with an
// error saying so.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, opts Options) error {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	for _, b := range Buckets {
		if _, err := bus.Bucket(ctx, js, b, 0); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("provisioning: bucket %s: %w", b, err)
		}
	}
	f := newFollower(ctx, js, log, opts.Idle)
	// The status tally is counted from the start and kept: counted anew
	// on the first status after an idle minute, it read every provision
	// first (some 7 s at 10,000 nodes, near the asker's 8 s); it keeps
	// each key's node and state only.
	f.hold(statusCounts)
	// So are the digests' sums (some 100 bytes a key: 15 MB at 10,000
	// nodes of 8 modules), so that a dry run or an apply reads only the
	// nodes its file changes from its first request on.
	f.hold(digestSums)
	wait := opts.Wait
	if wait <= 0 {
		wait = DefaultWait
	}
	// Requests are answered on goroutines of their own, at most
	// maxAnswering at once (past that the subscription waits): one waiting
	// up to wait for its bucket's copy does not hold up the others.
	answering := make(chan struct{}, maxAnswering)
	sub, err := nc.QueueSubscribe(mesh.ProvisioningSubject, Queue, func(m *nats.Msg) {
		if m.Reply == "" {
			// Nobody to answer: an answer an asker aimed at the verb's
			// subject comes so (the server routes it back through the
			// import), at the pace of any answer given at once. It takes
			// no answerer and no line of the log.
			log.Debug("provisioning: a message with no reply dropped: nobody to answer", "subject", m.Subject)
			return
		}
		answering <- struct{}{}
		go func() {
			defer func() { <-answering }()
			serveOne(ctx, nc, log, f, wait, m)
		}()
	})
	if err != nil {
		return fmt.Errorf("provisioning: subscribe %s: %w", mesh.ProvisioningSubject, err)
	}
	if err := nc.Flush(); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("provisioning: subscribe %s: %w", mesh.ProvisioningSubject, err)
	}
	go func() {
		<-ctx.Done()
		sub.Unsubscribe()
	}()
	return nil
}

// maxAnswering is how many requests the verb answers at once.
const maxAnswering = 8

// serveOne answers the request m from the copy of the bucket it reads
// (status from the kept tally), waiting at most wait for that copy to be
// read.
func serveOne(ctx context.Context, nc *nats.Conn, log *slog.Logger, f *follower, wait time.Duration, m *nats.Msg) {
	src := Sources{}
	var out []byte
	var err error
	if req, perr := ParseRequest(m.Data); perr == nil {
		b := bucketOf(req.What)
		fl, done := f.take(b)
		defer done()
		select {
		case <-fl.ready():
		case <-time.After(wait):
			answer(log, m, req.What, whyNotReady(b, wait))
			return
		case <-ctx.Done():
			return
		}
		switch {
		case fl.t != nil:
			out, _ = json.Marshal(fl.t.answer(req)) // plain counts and strings always encode
		case fl.s != nil:
			if why := fl.s.caughtUp(ctx, req, wait); why != "" {
				answer(log, m, req.What, why)
				return
			}
			out, _ = json.Marshal(fl.s.answer(req)) // plain sums and strings always encode
		default:
			src[b] = fl.c
		}
	}
	if out == nil {
		out, err = Handle(m.Data, src)
	}
	if err != nil {
		log.Warn("provisioning: request answered with an error", "subject", m.Subject, "request", string(m.Data), "err", err)
	}
	if max := nc.MaxPayload(); int64(len(out)) > max {
		answer(log, m, whatOf(m.Data), tooLarge(len(out), max))
		return
	}
	respond(log, m, out)
}

// tooLarge is the error of an answer of n bytes that the server would not
// carry (its max_payload is max bytes): said to the asker rather than
// dropped.
func tooLarge(n int, max int64) string {
	return fmt.Sprintf("the answer is %d bytes, more than the server's max payload of %d bytes: narrow the request by node or module", n, max)
}

// whatOf is the what of a request body, or "" when it does not parse.
func whatOf(body []byte) string {
	req, _ := ParseRequest(body)
	return req.What
}

// answer answers m with an error reply of why, and says it.
func answer(log *slog.Logger, m *nats.Msg, what, why string) {
	log.Warn("provisioning: request answered with an error", "subject", m.Subject, "request", string(m.Data), "err", why)
	out, _ := json.Marshal(Reply{What: what, Entries: []Entry{}, Odd: []Odd{}, Error: why}) // plain strings always encode
	respond(log, m, out)
}

func respond(log *slog.Logger, m *nats.Msg, out []byte) {
	if err := m.Respond(out); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		log.Error("provisioning: reply", "subject", m.Subject, "err", err)
	}
}

// follower keeps the verb's watched copies, one per bucket asked of, each
// from the first request that takes it until it has been idle (not taken)
// for idle.
type follower struct {
	ctx    context.Context
	js     jetstream.JetStream
	log    *slog.Logger
	idle   time.Duration
	mu     sync.Mutex
	copies map[string]*followed
}

// followed is one bucket's copy while the verb follows it, or the tally
// of status.
type followed struct {
	c      *bus.Copy
	t      *tally
	s      *sums
	stop   context.CancelFunc
	users  int       // requests that took it and are not done
	last   time.Time // when the last of them was done
	expiry *time.Timer
}

func newFollower(ctx context.Context, js jetstream.JetStream, log *slog.Logger, idle time.Duration) *follower {
	if idle <= 0 {
		idle = DefaultIdle
	}
	return &follower{ctx: ctx, js: js, log: log, idle: idle, copies: map[string]*followed{}}
}

// ready is closed once the copy (or the tally) holds every key.
func (fl *followed) ready() <-chan struct{} {
	if fl.t != nil {
		return fl.t.Ready()
	}
	if fl.s != nil {
		return fl.s.Ready()
	}
	return fl.c.Ready()
}

// take returns the copy of bucket (the tally for [statusCounts]),
// following it from now if the verb does not yet, and done, which the
// request calls once it has read the copy.
func (f *follower) take(bucket string) (*followed, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.copies[bucket]
	if !ok {
		ctx, stop := context.WithCancel(f.ctx)
		fl = &followed{stop: stop}
		switch bucket {
		case statusCounts:
			fl.t = followTally(ctx, f)
		case digestSums:
			fl.s = followSums(ctx, f)
		default:
			fl.c = bus.Follow(ctx, f.js, bucket, bus.Options{Create: true, Log: f.log})
		}
		f.copies[bucket] = fl
		fl.expiry = time.AfterFunc(f.idle, func() { f.expire(bucket, fl) })
	}
	fl.users++
	var once sync.Once
	return fl, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			fl.users--
			fl.last = time.Now()
		})
	}
}

// hold follows bucket from now for as long as the verb runs: its copy
// never expires.
func (f *follower) hold(bucket string) {
	f.take(bucket) // never done: a copy taken expires only once done
}

// expire stops following bucket when no request has taken its copy for
// f.idle and none reads it now; otherwise it looks again when that time
// will have passed.
func (f *follower) expire(bucket string, fl *followed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.copies[bucket] != fl {
		return
	}
	if left := f.idle - time.Since(fl.last); fl.users > 0 || left > 0 {
		if fl.users > 0 {
			left = f.idle
		}
		fl.expiry.Reset(left)
		return
	}
	delete(f.copies, bucket)
	fl.stop()
}

// DropNeeds deletes every key of the retired bucket mesh-provisioner_needs
// and returns how many it deleted; a missing bucket is none. The seat calls
// it once at start and says the count. It returns an error naming the key
// when a delete fails.
func DropNeeds(ctx context.Context, js jetstream.JetStream) (int, error) {
	kv, err := js.KeyValue(ctx, mesh.NeedsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("provisioning: bucket %s: %w", mesh.NeedsBucket, err)
	}
	all, err := bus.ListKeys(ctx, js, kv, ">")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, fmt.Errorf("provisioning: keys of %s: %w", mesh.NeedsBucket, err)
	}
	n := 0
	for _, k := range all {
		if err := kv.Delete(ctx, k); err != nil {
			return n, fmt.Errorf("provisioning: delete %s %s: %w", mesh.NeedsBucket, k, err)
		}
		n++
	}
	return n, nil
}
