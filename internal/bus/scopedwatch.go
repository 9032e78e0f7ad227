package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// watchHeartbeat is how often the server says a scoped watch's consumer is
// alive while it has nothing to deliver; after three beats missed the watch
// makes its consumer anew (tests shorten it).
var watchHeartbeat = 5 * time.Second

// watchInactive is how long the server keeps a scoped watch's consumer once
// no subscription wants its messages: the party may not delete it.
const watchInactive = 2 * time.Second

// errNamesHeld is start's error when every consumer name of the party's
// on the bucket is held (its watches, and those the server still keeps
// after they stopped, for [watchInactive]).
var errNamesHeld = errors.New("every consumer name of the party's is held")

// chanceName returns a consumer name of chance, "w<16 hex digits>": a
// reader that makes its own consumers (the seat, an operator) names them
// so, as does the seat for an asker on a server without accounts.
func chanceName() string { return fmt.Sprintf("w%016x", rand.Uint64()) }

// checkedWatch follows the keys of kv (bucket's handle) matching pattern,
// every key when pattern is "", with [scopedKV.watch] whatever the user:
// it hands on only a message of the bucket's own stream, from the watch's
// own consumer, on a key the watch follows. The library's watch takes a
// message's key from its subject and does not check the stream named in
// its reply, so a party that may make a push consumer on another bucket
// and learned this watch's inbox (an operator's system user reads every
// consumer's deliver subject in JSZ) could deliver that bucket's messages
// into the seat's copy, as keys of its own choosing. The watch stops when
// ctx is done.
func checkedWatch(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, bucket, pattern string) (jetstream.KeyWatcher, error) {
	if pattern == "" {
		pattern = ">"
	}
	w, err := ownWatch(js, kv, bucket).watch(ctx, pattern, WatchOptions{})
	if err != nil {
		return nil, err
	}
	// Stopped as soon as ctx is done, as the library's watch is: a copy
	// read once (apply's) stops its watch before its own writes, whose
	// echo must not be delivered.
	context.AfterFunc(ctx, func() { _ = w.Stop() })
	return w, nil
}

// ownWatch returns kv as a [scopedKV], whose watch is this package's own:
// kv itself when it is one, else a handle of bucket on js (unscoped: a
// reader of every key, whose consumers take random names) that makes its
// consumers as the library would but takes their deliveries as
// [scopedWatcher.take] does.
func ownWatch(js jetstream.JetStream, kv jetstream.KeyValue, bucket string) *scopedKV {
	if skv, ok := kv.(*scopedKV); ok {
		return skv
	}
	js = unscoped(js)
	return &scopedKV{js: js, nc: js.Conn(), api: apiPrefixOf(js), bucket: bucket, pre: kvPrefix(bucket), inner: kv}
}

// watch follows the keys matching pattern with a push consumer filtered on
// their subjects, bound to the stream by name (no stream info), made by the
// seat for a scoped party ([access.WatchVerb], asked on kv.ask) or by the
// reader itself under a name of chance, with the API's "create" action, so
// that it never takes over a consumer of that name: each key's
// last value, then a nil entry once they are all sent (unless UpdatesOnly),
// then every change. A gap in the consumer's sequence, or three missed
// heartbeats (the consumer removed, the server restarted), makes the
// consumer anew under another name of the set, from the stream sequence
// after the last one handed on.
func (kv *scopedKV) watch(ctx context.Context, pattern string, opts WatchOptions) (jetstream.KeyWatcher, error) {
	w := &scopedWatcher{kv: kv, pattern: pattern, opts: opts, updates: make(chan jetstream.KeyValueEntry, 256),
		done: make(chan struct{}), kick: make(chan struct{}, 1), beat: watchHeartbeat}
	w.mu.Lock()
	defer w.mu.Unlock()
	// While every name is held, a stopped watch's consumer frees one
	// within watchInactive: poll until then.
	deadline := time.Now().Add(3 * watchInactive)
	for {
		err := w.start(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, errNamesHeld) || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
	if opts.UpdatesOnly {
		w.initDone = true
	} else if w.initPending == 0 {
		w.initDone = true
		w.send(nil)
	}
	go w.follow()
	return w, nil
}

// ackPrefix and fcPrefix begin the reply subjects of a push consumer's
// deliveries: a stored message's ack subject (with any account, domain or
// ack policy) and the server's flow-control request.
const (
	ackPrefix = "$JS.ACK."
	fcPrefix  = "$JS.FC."
)

// jsConsumerExists is the server's code for a create (the API's "create"
// action) under a name a consumer of another configuration holds.
const jsConsumerExists = 10148

// consumerReply is the API's answer to a consumer create.
type consumerReply struct {
	nats.ConsumerInfo
	Error *nats.APIError `json:"error,omitempty"`
}

// start has the watch's consumer made and subscribes to its deliveries;
// w.mu is held. From w.last (a stream sequence handed on) it starts after
// it.
func (w *scopedWatcher) start(ctx context.Context) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	kv := w.kv
	inbox := kv.nc.NewInbox()
	sub, err := kv.nc.Subscribe(inbox, w.take)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		_ = sub.Unsubscribe()
		return err
	}
	req := watchRequest{Deliver: inbox, From: "last", MetaOnly: w.opts.MetaOnly, Heartbeat: w.beat}
	switch {
	case w.last > 0:
		req.From, req.Seq = "seq", w.last+1
	case w.opts.UpdatesOnly:
		req.From = "new"
	}
	var raw []byte
	if kv.ask != nil {
		raw, err = kv.askWatch(ctx, w.pattern, req)
	} else {
		cfg := watchConfig(inbox, kv.pre+w.pattern, req.MetaOnly, req.Heartbeat)
		switch req.From {
		case "seq":
			cfg.DeliverPolicy, cfg.OptStartSeq = nats.DeliverByStartSequencePolicy, req.Seq
		case "new":
			cfg.DeliverPolicy = nats.DeliverNewPolicy
		default:
			cfg.DeliverPolicy = nats.DeliverLastPerSubjectPolicy
		}
		raw, _, err = createConsumer(ctx, kv.nc, kv.api, kv.bucket, []string{chanceName()}, cfg)
		if errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("bus: bucket %s: %w", kv.bucket, jetstream.ErrBucketNotFound)
		}
	}
	if err != nil {
		return fail(fmt.Errorf("bus: bucket %s: watch %s: %w", kv.bucket, w.pattern, err))
	}
	var r consumerReply
	if err := json.Unmarshal(raw, &r); err != nil {
		return fail(fmt.Errorf("bus: bucket %s: watch %s: the reply does not decode: %w", kv.bucket, w.pattern, err))
	}
	if r.Error != nil {
		switch r.Error.ErrorCode {
		case nats.JSErrCodeStreamNotFound:
			return fail(fmt.Errorf("bus: bucket %s: %w", kv.bucket, jetstream.ErrBucketNotFound))
		case jsWatchNamesHeld:
			return fail(fmt.Errorf("bus: bucket %s: watch %s: %w (%s)", kv.bucket, w.pattern, errNamesHeld, r.Error.Description))
		}
		return fail(fmt.Errorf("bus: bucket %s: watch %s: %w", kv.bucket, w.pattern, r.Error))
	}
	if r.Name == "" {
		return fail(fmt.Errorf("bus: bucket %s: watch %s: the reply names no consumer", kv.bucket, w.pattern))
	}
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
	}
	w.sub, w.name, w.cons, w.seen = sub, r.Name, 0, time.Now()
	if !w.initDone {
		w.initPending = w.received + r.NumPending
	}
	return nil
}

// askWatch asks the seat for the consumer of a watch of pattern
// ([access.WatchVerb]) and returns its reply. The watch's subscription is
// flushed first: the seat's consumer delivers as soon as it is made, on
// another connection's word. No responder is [errNoSeat], which the bus
// takes as transient (the seat starting or taking over); keys the user may
// not read are the server's permissions violation, at once.
func (kv *scopedKV) askWatch(ctx context.Context, pattern string, req watchRequest) ([]byte, error) {
	if err := kv.nc.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	a, err := kv.ask()
	if err != nil {
		return nil, err
	}
	subject, err := access.WatchSubject(a.user, kv.bucket, pattern)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m, err := a.request(ctx, subject, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: %w", errNoSeat, err)
	}
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// follow makes the consumer anew when take saw a gap or the heartbeats
// stop, with backoff while the server refuses, until the watch stops; it
// stops the watch (its updates channel closes) when the bucket is gone.
func (w *scopedWatcher) follow() {
	tick := time.NewTicker(w.beat)
	defer tick.Stop()
	wait := w.beat
	for {
		select {
		case <-w.done:
			return
		case <-w.kick:
		case <-tick.C:
			w.mu.Lock()
			stale := time.Since(w.seen) > 3*w.beat
			w.mu.Unlock()
			if !stale {
				continue
			}
		}
		w.mu.Lock()
		err := w.start(context.Background())
		w.mu.Unlock()
		if err == nil {
			wait = w.beat
			continue
		}
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			// The bucket is gone: the watch ends, as the library's
			// does. Its owner may not have heard of the deletion
			// otherwise: nats-server (2.15) may drop a deleted
			// stream's advisory, which it queues on the stream's own
			// loop just before it stops that loop.
			_ = w.Stop()
			return
		}
		select {
		case <-w.done:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// scopedWatcher is a [scopedKV]'s watch.
type scopedWatcher struct {
	kv      *scopedKV
	pattern string // the keys watched
	opts    WatchOptions
	beat    time.Duration // the consumer's heartbeat
	updates chan jetstream.KeyValueEntry
	done    chan struct{} // closed by Stop: a take blocked on updates gives up
	kick    chan struct{} // take saw a gap: follow makes the consumer anew
	stop    sync.Once
	shut    sync.Once

	mu          sync.Mutex
	sub         *nats.Subscription
	name        string    // the consumer's
	cons        uint64    // the consumer sequence last delivered
	last        uint64    // the stream sequence last handed on
	seen        time.Time // the last delivery or heartbeat
	initDone    bool
	initPending uint64
	received    uint64
}

// Updates returns the channel of entries (nil once the initial values are
// sent); it closes when the watch stops.
func (w *scopedWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop stops the watch. Its consumer is not deleted (the user may not):
// the server removes it once no subscription wants its messages.
func (w *scopedWatcher) Stop() error {
	w.stop.Do(func() {
		close(w.done)
		w.mu.Lock()
		if w.sub != nil {
			_ = w.sub.Unsubscribe()
		}
		w.mu.Unlock()
		w.close()
	})
	return nil
}

func (w *scopedWatcher) close() {
	w.shut.Do(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		close(w.updates)
	})
}

// send hands e on unless the watch stopped; w.mu is held.
func (w *scopedWatcher) send(e jetstream.KeyValueEntry) {
	select {
	case <-w.done:
	case w.updates <- e:
	}
}

// reset asks follow to make the consumer anew; w.mu is held.
func (w *scopedWatcher) reset() {
	w.seen = time.Time{}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// take hands on one message of the consumer as an entry: one of the
// bucket's stream, from the watch's consumer, on a key the watch follows.
// Any other is dropped: the inbox a consumer delivers to is its maker's
// choice, so another party's consumer could deliver another stream's
// messages, or keys outside the pattern, into this watch's inbox had it
// learned its subject. Flow control is answered, a stalled consumer's
// heartbeat too, and a gap in the consumer's sequence resets it.
func (w *scopedWatcher) take(m *nats.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return
	default:
	}
	if m.Sub != w.sub {
		return // a delivery of a consumer made before
	}
	// A stored message comes with its ack subject as reply, whatever its
	// headers: a writer may store an empty value with "Status: 100", and
	// taking it for the server's heartbeat or flow control would drop it
	// uncounted (the next delivery a gap, the consumer made anew, the same
	// message again: every reader of the key blinded for good). Only a
	// message with no reply (a heartbeat) or a flow-control reply is the
	// server's own.
	if m.Header.Get("Status") == "100" && len(m.Data) == 0 && !strings.HasPrefix(m.Reply, ackPrefix) {
		w.seen = time.Now()
		if strings.HasPrefix(m.Reply, fcPrefix) {
			_ = m.Respond(nil) // flow control
			return
		}
		if m.Reply != "" {
			return // neither a stored message nor the server's: dropped
		}
		if stalled := m.Header.Get("Nats-Consumer-Stalled"); stalled != "" {
			_ = w.kv.nc.Publish(stalled, nil)
		}
		if n, err := strconv.ParseUint(m.Header.Get("Nats-Last-Consumer"), 10, 64); err == nil && n != w.cons {
			w.reset()
		}
		return
	}
	md, err := m.Metadata()
	if err != nil || md.Stream != stream(w.kv.bucket) || md.Consumer != w.name {
		return
	}
	if md.Sequence.Consumer != w.cons+1 {
		w.reset()
		return
	}
	w.cons, w.seen = md.Sequence.Consumer, time.Now()
	if len(m.Subject) <= len(w.kv.pre) || !strings.HasPrefix(m.Subject, w.kv.pre) ||
		!access.Matches(w.pattern, m.Subject[len(w.kv.pre):]) {
		return
	}
	w.last = md.Sequence.Stream
	w.send(&scopedEntry{bucket: w.kv.bucket, key: m.Subject[len(w.kv.pre):], value: m.Data, rev: md.Sequence.Stream,
		created: md.Timestamp, delta: md.NumPending, op: operation(m.Header)})
	if !w.initDone {
		w.received++
		if w.received >= w.initPending || md.NumPending == 0 {
			w.initDone = true
			w.send(nil)
		}
	}
}
