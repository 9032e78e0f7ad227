package bus

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Item is one key of a [Copy]: its value as stored and its revision (the
// stream sequence of its last write). Value is nil in a copy made with
// Options.RevisionsOnly.
type Item struct {
	Value    []byte
	Revision uint64
}

// Change is one change of a followed bucket, handed to a [Copy]'s OnChange
// callback. Deleted is set for a delete, a purge, or a key found gone when
// the watch was started again on the same stream; for a copy with
// Options.Writes also for a key of a bucket found deleted or made anew
// without it. Value is then nil. Revision is the stream sequence of the
// change (0 for a key found gone, which has no message left).
type Change struct {
	Bucket   string
	Key      string
	Value    []byte
	Revision uint64
	Deleted  bool
}

// Options configures a [Copy].
type Options struct {
	// OnChange, if set, is called for every change the copy takes from the
	// bus, on the copy's goroutine, after the copy holds it. It must not
	// block: hand work off quickly. Changes the owner takes with
	// [Copy.Took] are not reported.
	OnChange func(Change)
	// Create makes the copy create its bucket when it is missing (with the
	// replicas of its connection, see [Dial.Replicas]). Without
	// it a missing bucket is said once and waited for with backoff, and the
	// copy is ready (holding what it last knew, empty at first) and not
	// [Copy.Known] meanwhile.
	Create bool
	// Writes says the copy's owner writes the keys it follows (the seat
	// its plans, provisions and refusals; a client its applied and collect
	// keys; a provider its entries; the registry's keeper): when the
	// bucket is found deleted, or made anew without keys the copy held,
	// those keys are taken as deleted (Change.Revision 0) so that the
	// owner writes them again. Without it the copy only reads the bucket,
	// and a bucket gone is unknown, not empty: the copy keeps every key it
	// held (reporting nothing) until the bucket exists again, then takes
	// the keys the bucket has, whatever their revisions, and keeps those
	// it lacks as last known (said once) until they are written or deleted
	// there. A reader so never acts on keys that vanished with their
	// bucket: nothing is revoked, stopped, removed or asked for it.
	Writes bool
	// Log receives every give-up of the watch. Nil means slog.Default().
	Log *slog.Logger
	// Filter, if set, follows only the keys matching this one key pattern
	// (for example "<node>.>"), so that a user allowed to read only those
	// keys can follow the bucket. Empty means every key.
	Filter string
	// RevisionsOnly makes the copy keep each key's revision but not its
	// value: for an owner that takes every change from OnChange into a
	// state of its own (decoded, or only the part it needs) and never
	// reads a value back from the copy, so that the bucket's values are
	// not held twice. [Copy.Get] and [Copy.Range] then give items with a
	// nil Value; [PutIfChanged] and [PutAt], which cannot compare with the
	// value held, write every time.
	RevisionsOnly bool
	// Leader makes each watch's initial values complete from the leader of
	// the bucket's stream: once the watch has sent them, the messages past
	// the last revision it sent are read from the leader ([LeaderNext]) and
	// taken before the copy is ready. A watch is served by the replica that
	// holds its consumer, which may be one still catching up after its
	// server restarted: without Leader the copy may start at state older
	// than what was acknowledged (and than what its owner saw before). It
	// needs the permission to publish $JS.API.STREAM.MSG.GET.KV_<bucket>
	// (the seat and the operator have it).
	Leader bool
}

// Copy is a key-value bucket held in memory and kept current by a
// JetStream watch. The watch runs under a supervisor that starts it again
// with backoff whenever it breaks (server restart, lost connection, bucket
// missing), saying each give-up in the log. Every change is taken only when
// its revision is newer than the copy's, so replays are harmless.
//
// A bucket is one stream, known by the time it was created. When the
// bucket is found deleted (its stream gone), the copy is not [Copy.Known]
// until it exists again, said once in the log; a copy with Options.Create
// makes the bucket again. A reader keeps every key it holds meanwhile; a
// copy with Options.Writes takes every key as deleted and reports it to
// OnChange. When the bucket is found made anew (after it was found gone,
// or another creation time, or, when the server does not say its creation
// time, a last sequence below what the copy has seen: a server back on a
// wiped store), the new stream's keys are taken whatever their revision;
// the keys it lacks are taken as deleted by a copy with Options.Writes and
// kept as last known by a reader. A watch started again on the same
// stream (the same creation time: a server that rejoined its cluster, a
// replica behind its leader) takes only what changed. The
// copy hears of a deletion or creation at once through the stream
// advisories ($JS.EVENT.ADVISORY.STREAM.CREATED|DELETED.KV_<bucket>, which
// a scoped user must be allowed to subscribe to), and otherwise when its
// watch breaks or the connection comes back. The server may drop a
// deletion's advisory (nats-server 2.15.2 queues it on the stream's loop
// and stops that loop at once, and a loop busy delivering stops without
// sending it): the watch then ends when its consumer's heartbeats stop,
// 15 to 20 s after the deletion. On a cluster, the watch also
// starts again when the bucket's stream elects a new leader
// ($JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_<bucket>): the server that
// held it, and perhaps the watch's consumer, has stopped.
//
// A Copy is safe for concurrent use. Values handed out are the copy's own:
// read them, never change them.
type Copy struct {
	bucket   string
	js       jetstream.JetStream
	opts     Options
	log      *slog.Logger
	kv       jetstream.KeyValue
	kvReady  chan struct{}
	ready    chan struct{}
	readyOne sync.Once
	healthy  atomic.Bool   // the last watch delivered its initial values
	broke    bool          // a watch gave up since the last one delivered its initial values (run's own)
	known    atomic.Bool   // the copy follows its bucket: initial values delivered, and not found gone since
	goneSaid bool          // the bucket's absence was said since the last watch delivered its initial values (run's own)
	seatSaid bool          // that no seat answers watches was said since the last watch delivered its initial values (run's own)
	made     bool          // the copy made its bucket, not checked since a watch of it ran (run's own; see Mend)
	seen     atomic.Uint64 // the highest revision the watch has delivered

	wmu sync.Mutex // held across an owner's write, so that its echo is not taken first
	// While an owner holds the copy (Hold), the watch goes on reading and
	// keeps what it reads in held, in order, to take it once released:
	// the changes wait as key, value and revision, not as messages queued
	// in the client (each with its subject, reply and headers).
	hmu     sync.Mutex
	holders int      // owners holding the copy
	held    []queued // changes read while held, oldest first
	resumed chan struct{}
	mu      sync.RWMutex
	items   held
	gone    map[string]removal // how each key the copy knows removed was removed
	// created is when the stream the copy holds was created (zero before
	// the first watch, after the bucket was found gone, or when the
	// server does not say).
	created time.Time
	// stale holds, while a watch of a stream made anew delivers its
	// initial values, the keys the copy held from the old stream and
	// their revisions: each is replaced by the new stream's value whatever
	// the revisions, or dropped when the new stream lacks it.
	stale map[string]uint64
	// lost is set once the bucket was found gone, until a watch of the
	// stream it has again starts (see renew): that stream is new, whatever
	// the server says of it (a scoped user is not told its creation time).
	lost bool
	// kept holds the keys a reader keeps from a stream it lost, which the
	// current stream has neither written nor deleted, and their revisions:
	// the next write or delete of each is taken whatever its revision.
	kept map[string]uint64
}

// Follow starts following bucket into a new [Copy] and returns it at once.
// The copy follows until ctx is done. Wait for [Copy.Ready] before trusting
// it to hold every key.
func Follow(ctx context.Context, js jetstream.JetStream, bucket string, opts Options) *Copy {
	c := &Copy{
		bucket:  bucket,
		js:      js,
		opts:    opts,
		log:     opts.Log,
		kvReady: make(chan struct{}),
		ready:   make(chan struct{}),
		resumed: make(chan struct{}, 1),
		items:   newHeld(opts.RevisionsOnly),
		gone:    map[string]removal{},
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	go c.run(ctx)
	return c
}

// Bucket returns the name of the followed bucket.
func (c *Copy) Bucket() string { return c.bucket }

// Ready is closed once the copy holds every key the bucket held when it was
// first watched (or once a missing bucket has been said).
func (c *Copy) Ready() <-chan struct{} { return c.ready }

// Known reports whether the copy follows its bucket: its watch has
// delivered the bucket's keys, and the bucket has not been found gone
// since (deleted, or not made yet). A copy not known holds what it last
// knew (see Options.Writes).
func (c *Copy) Known() bool { return c.known.Load() }

// KV returns the bucket handle, waiting until the copy has one or ctx is
// done.
func (c *Copy) KV(ctx context.Context) (jetstream.KeyValue, error) {
	select {
	case <-c.kvReady:
		return c.kv, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Seen returns the highest revision (stream sequence) the watch has
// delivered: once it reaches a bucket's last sequence, the copy has taken
// every write made before that.
func (c *Copy) Seen() uint64 { return c.seen.Load() }

// Get returns the item at key, and whether the copy holds it.
func (c *Copy) Get(key string) (Item, bool) {
	c.mu.RLock()
	it, ok := c.items.get(key)
	c.mu.RUnlock()
	return it, ok
}

// Len returns how many keys the copy holds.
func (c *Copy) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.items.len()
}

// Range calls f for every key the copy holds, in no order, until f returns
// false. The copy is read-locked meanwhile: f must not call the copy's
// writing methods.
func (c *Copy) Range(f func(key string, it Item) bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	c.items.each(f)
}

// Hold keeps the watch from taking changes until release is called. An
// owner that writes asynchronously either holds the copy from before its
// first publish until it has called [Copy.Took] for every ack, so that the
// echo of its own write is never reported as a change, nor taken after a
// later write of its own; or it does not hold it, and leaves out the
// changes for which Took reported that the watch took them first. The
// watch goes on reading meanwhile: what it reads waits in the copy (key,
// value and revision) and is taken, in order, once released. Never call
// Took's siblings PutIfChanged or DeleteIfPresent while holding.
func (c *Copy) Hold() (release func()) {
	c.wmu.Lock()
	c.hmu.Lock()
	c.holders++
	c.hmu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.hmu.Lock()
			c.holders--
			c.hmu.Unlock()
			c.wmu.Unlock()
			select {
			case c.resumed <- struct{}{}:
			default:
			}
		})
	}
}

// queued is one change the watch read while the copy was held.
type queued struct {
	key      string
	value    []byte
	rev      uint64
	deleted  bool
	sentinel bool // not a change: the end of the initial values
}

// queue keeps q to take later when the copy is held, or when changes read
// earlier still wait (so that changes are taken in order); it reports
// whether it kept q.
func (c *Copy) queue(q queued) bool {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.holders == 0 && len(c.held) == 0 {
		return false
	}
	c.held = append(c.held, q)
	return true
}

// next returns the oldest change waiting, unless the copy is held or none
// waits.
func (c *Copy) next() (queued, bool) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.holders > 0 || len(c.held) == 0 {
		return queued{}, false
	}
	q := c.held[0]
	c.held[0] = queued{}
	c.held = c.held[1:]
	if len(c.held) == 0 {
		c.held = nil
	}
	return q, true
}

// waiting returns how many changes wait for the copy to be released.
func (c *Copy) waiting() int {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	return len(c.held)
}

// DeletedAt returns the revision of the delete (or purge) that removed key,
// as far as the copy knows it, and whether it knows one; false when the
// copy holds a value at key. It covers a delete the copy took of a key it
// never held (its watch's initial values after a restart), which is not
// reported to OnChange: a conditional write of key expects this revision.
// A key found gone (no message of it left: Change.Revision 0) has revision
// 0, which such a write expects too.
func (c *Copy) DeletedAt(key string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, held := c.items.get(key); held {
		return 0, false
	}
	g, ok := c.gone[key]
	return g.rev, ok
}

// removal is how a key the copy no longer holds was removed.
type removal struct {
	// rev is the revision of the delete (or purge) that removed the key:
	// what a conditional write of the key expects. 0 for a key found gone
	// (no message of it left in the stream).
	rev uint64
	// upTo is the revision up to which a change of the key is older than
	// its removal, and is not taken: the delete's own revision, or for a
	// key found gone the stream's last sequence when the watch that found
	// it gone began.
	upTo uint64
}

// deletion is the removal of a key by a delete (or purge) at revision rev.
func deletion(rev uint64) removal { return removal{rev: rev, upTo: rev} }

// Took takes the owner's own write into the copy at once: value at key with
// the revision the write returned, or a delete when value is nil (rev 0
// for a delete whose revision is not known). A change of key newer than
// rev that the copy holds already (a value, or a delete) is kept. Took
// reports whether the copy held this very write already: its watch took
// it first, and reported it to [Options].OnChange (or is about to) as if
// another writer had made it.
func (c *Copy) Took(key string, value []byte, rev uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if value == nil {
		it, had := c.items.get(key)
		if rev != 0 {
			if g, ok := c.gone[key]; ok && !had && g.upTo >= rev {
				return g.rev == rev
			}
			if had && it.Revision > rev {
				return false
			}
			c.items.del(key)
			c.gone[key] = deletion(rev)
			return false
		}
		if had {
			c.items.del(key)
			c.gone[key] = deletion(it.Revision + 1) // the delete's own revision is newer than the value's
		}
		return false
	}
	if it, ok := c.items.get(key); ok && it.Revision >= rev {
		return it.Revision == rev
	}
	if g, ok := c.gone[key]; ok && g.upTo >= rev {
		return false // older than the key's removal
	}
	delete(c.gone, key)
	c.items.set(key, value, rev)
	return false
}

// take applies one change from the watch; it reports whether the copy
// changed.
func (c *Copy) take(key string, value []byte, rev uint64, removed bool) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	it, had := c.items.get(key)
	old, ok := c.stale[key]
	if !ok {
		old, ok = c.kept[key]
	}
	if ok && had && it.Revision == old {
		// The old stream's value: the new stream's is taken whatever
		// the revisions, and reported even when its bytes are the same,
		// so that a conditional write expects the new revision.
		delete(c.stale, key)
		delete(c.kept, key)
		if removed {
			c.items.del(key)
			c.gone[key] = deletion(rev)
			return true
		}
		c.items.set(key, value, rev)
		return true
	}
	if had && it.Revision >= rev {
		return false
	}
	if g, ok := c.gone[key]; ok && g.upTo >= rev {
		return false
	}
	if removed {
		if !had {
			c.gone[key] = deletion(rev)
			return false
		}
		c.items.del(key)
		c.gone[key] = deletion(rev)
		return true
	}
	delete(c.gone, key)
	c.items.set(key, value, rev)
	return true
}

func (c *Copy) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	for ctx.Err() == nil {
		err := c.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		countGiveUp(c.bucket)
		c.broke = true
		wait := bo.NextBackOff()
		switch {
		case err == nil:
			err = errors.New("updates channel closed")
		case gone(err):
			c.missing()
			c.readyOne.Do(func() { close(c.ready) })
		}
		noSeat := errors.Is(err, errNoSeat)
		switch {
		case gone(err) && c.goneSaid:
			// Said once: the copy waits for its bucket with backoff.
			c.log.Debug("bus: the bucket is still gone; looking again", "bucket", c.bucket, "err", err, "retry_in", wait)
		case noSeat && c.seatSaid:
			c.log.Debug("bus: still no seat answers watches; asking again", "bucket", c.bucket, "retry_in", wait)
		case noSeat:
			// A scoped party's watch is the seat's to make: until a seat
			// runs (it starts, or takes over) the copy waits, said once.
			c.seatSaid = true
			c.log.Info("bus: waiting for a seat to make the watch (no seat answers watches yet)", "bucket", c.bucket, "retry_in", wait)
		default:
			if gone(err) {
				c.goneSaid = true
			}
			// A watch ended by its connection coming back is routine (a
			// server restarted, a user signed anew): said at info.
			level := slog.LevelWarn
			if errors.Is(err, errReconnected) {
				level = slog.LevelInfo
			}
			c.log.Log(ctx, level, "bus: watch gave up; starting it again", "bucket", c.bucket, "err", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if c.healthy.Swap(false) {
			bo.Reset()
		}
	}
}

func (c *Copy) handle(ctx context.Context) (jetstream.KeyValue, error) {
	if c.kv != nil {
		return c.kv, nil
	}
	var kv jetstream.KeyValue
	var err error
	if c.opts.Create {
		var made bool
		kv, made, err = bucket(ctx, c.js, c.bucket, 0)
		c.made = made
	} else {
		kv, err = c.js.KeyValue(ctx, c.bucket)
	}
	if err != nil {
		return nil, err
	}
	c.kv = kv
	close(c.kvReady)
	return kv, nil
}

// gone reports whether err says the bucket (its stream) does not exist.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// info returns the bucket's stream info, or nil with a nil error when the
// server does not give it (a user not allowed to ask); an error when the
// bucket does not exist.
func (c *Copy) info(ctx context.Context, kv jetstream.KeyValue) (*jetstream.StreamInfo, error) {
	st, err := kv.Status(ctx)
	if gone(err) {
		return nil, err
	}
	if err != nil {
		return nil, nil
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil, nil
	}
	return bs.StreamInfo(), nil
}

// missing takes the bucket as gone (deleted, or not made yet): the copy
// is not known until a watch of the bucket delivers its keys again. A
// reader keeps every key it holds, and the stream the bucket has next is
// taken as new (see renew); a copy with Options.Writes loses its keys
// (lose). Each loss of a stream the copy followed is said once.
func (c *Copy) missing() {
	c.known.Store(false)
	if c.opts.Writes {
		c.lose()
		return
	}
	c.mu.Lock()
	n := c.items.len()
	followed := !c.created.IsZero() || n > 0
	first := followed && !c.lost
	if followed {
		c.lost = true // a bucket never followed is not lost: its first stream is not new
	}
	c.mu.Unlock()
	if first && followed {
		c.goneSaid = true
		c.log.Warn("bus: the bucket is gone; the copy keeps the keys it held as last known until the bucket exists again",
			"bucket", c.bucket, "keys", n)
	}
}

// lose takes every key the copy holds as deleted: the bucket is gone (the
// owner of a copy with Options.Writes writes them again). It says so once
// per stream lost, and reports each key to OnChange.
func (c *Copy) lose() {
	c.wmu.Lock()
	c.mu.Lock()
	var out []Change
	c.items.each(func(k string, _ Item) bool {
		// No message left: a conditional write expects revision 0.
		out = append(out, Change{Bucket: c.bucket, Key: k, Revision: 0, Deleted: true})
		return true
	})
	lost := !c.created.IsZero() || len(out) > 0
	c.items = newHeld(c.opts.RevisionsOnly)
	c.gone = map[string]removal{}
	c.stale = nil
	c.created = time.Time{}
	c.seen.Store(0)
	c.mu.Unlock()
	c.wmu.Unlock()
	if lost {
		c.goneSaid = true
		c.log.Warn("bus: the bucket is gone; every key it held is taken as deleted, to be written again", "bucket", c.bucket, "keys", len(out))
	}
	c.report(out)
}

// renew compares the stream the watch is about to follow (info, nil when
// the server does not give it) with the one the copy holds: a stream made
// anew has its keys taken whatever their revision. The stream is new when
// the copy found its bucket gone since it last followed it, when the two
// creation times differ, or, only when either is not known, when its last
// sequence is below what the copy has seen. The same creation time is the
// same stream, however far behind its replica (a server that rejoined):
// the watch then takes what changed. It reports whether the stream is new.
func (c *Copy) renew(info *jetstream.StreamInfo) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.created
	var created time.Time
	var last uint64
	if info != nil {
		created, last = info.Created, info.State.LastSeq
		c.created = created
	}
	var anew bool
	switch {
	case c.lost:
		anew = true
	case info == nil:
	case !prev.IsZero() && !created.IsZero():
		anew = !prev.Equal(created)
	default:
		anew = last < c.seen.Load()
	}
	c.lost = false
	c.stale = nil
	if !anew {
		return false
	}
	c.stale = make(map[string]uint64, c.items.len())
	c.items.each(func(k string, it Item) bool {
		c.stale[k] = it.Revision
		return true
	})
	c.kept = nil
	c.gone = map[string]removal{}
	c.seen.Store(0)
	c.log.Warn("bus: the bucket was made anew; its keys are taken whatever their revision",
		"bucket", c.bucket, "keys_held", c.items.len(), "created", created, "last_seq", last)
	return true
}

func (c *Copy) report(changes []Change) {
	if c.opts.OnChange == nil {
		return
	}
	for _, ch := range changes {
		c.opts.OnChange(ch)
	}
}

// errStreamChanged ends a watch when its bucket's stream was deleted or
// created.
var errStreamChanged = errors.New("the bucket was deleted or made anew; the watch starts again")

// watch runs one watch until its channel closes. When the initial values are
// done, keys the copy holds that the bucket no longer has (deleted while no
// watch ran) are taken as deleted. A bucket found gone has every key taken
// as deleted (and is made again with Options.Create); a bucket made anew
// has its keys taken whatever their revision.
func (c *Copy) watch(ctx context.Context) error {
	c.settle(ctx)
	kv, err := c.handle(ctx)
	if err != nil {
		return err // a missing bucket is said by run (missing)
	}
	info, err := c.info(ctx, kv)
	if gone(err) {
		if !c.opts.Create {
			return err
		}
		// Made again before the loss is reported, so that an owner
		// answering the loss at once writes into a bucket that exists.
		_, made, err := bucket(ctx, c.js, c.bucket, 0)
		c.missing()
		if err != nil {
			return err
		}
		c.made = c.made || made
		c.log.Warn("bus: made the bucket again", "bucket", c.bucket)
		if info, err = c.info(ctx, kv); err != nil {
			return err
		}
	}
	anew := c.renew(info)
	var lastSeq uint64
	hint := 0 // how many keys the initial values may bring
	if info != nil {
		lastSeq = info.State.LastSeq
		if c.opts.Filter == "" { // a filter's keys are not counted
			hint = sizeHint(info.State)
		}
		c.presize(hint)
	}
	nc := c.js.Conn()
	// Room for a few advisories: one of the stream's own creation, which the
	// watch passes over, must not crowd out a deletion or a new leader.
	changed := make(chan error, 8)
	adv, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.*.KV_"+c.bucket, func(m *nats.Msg) {
		var why error
		switch {
		case strings.HasPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM.CREATED."):
			why = errStreamCreated
		case strings.HasPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM.DELETED."):
			why = errStreamDeleted
		case strings.HasPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."):
			why = errNewLeader
		default:
			return
		}
		select {
		case changed <- why:
		default:
		}
	})
	if err == nil {
		defer adv.Unsubscribe()
	}
	w, err := checkedWatch(ctx, c.js, kv, c.bucket, c.opts.Filter)
	if err != nil {
		return err
	}
	defer w.Stop()
	// A watch may sit silent for many seconds after the connection comes
	// back (its consumer is re-made only after missed heartbeats): start it
	// again at once on a reconnect instead.
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	seen := make(map[string]bool, hint)
	initial := true
	var last uint64 // the last revision of the initial values
	// apply takes one change read by this watch, or ends its initial
	// values.
	apply := func(q queued) {
		if !q.sentinel {
			c.apply(q)
			return
		}
		c.dropUnseen(seen, lastSeq, anew)
		seen = nil
		if c.made {
			// The bucket this copy made may have lost its store since
			// it was checked (see ErrStoreLost): checked again now that
			// a watch of it has run, and made again if so (the watch
			// then starts again on the deletion).
			c.made = false
			again, err := Mend(ctx, c.js, c.bucket)
			switch {
			case err != nil && (ctx.Err() != nil || gone(err)):
				// Deleted again meanwhile: the watch hears of it.
				c.log.Debug("bus: the bucket the copy made is gone again", "bucket", c.bucket, "err", err)
			case err != nil:
				c.log.Error("bus: the bucket the copy made could not be checked or made again", "bucket", c.bucket, "err", err)
			case again:
				c.log.Warn("bus: the bucket the copy made had lost its store on the server; made again", "bucket", c.bucket)
			}
		}
		if c.broke {
			countRestart(c.bucket)
			c.broke = false
		}
		if c.goneSaid {
			c.log.Info("bus: the bucket exists again; the copy follows it", "bucket", c.bucket, "keys", c.Len())
			c.goneSaid = false
		}
		if c.seatSaid {
			c.log.Info("bus: a seat made the watch; the copy follows its bucket", "bucket", c.bucket, "keys", c.Len())
			c.seatSaid = false
		}
		c.healthy.Store(true)
		c.known.Store(true)
		c.readyOne.Do(func() { close(c.ready) })
	}
	// drain takes the changes that waited while the copy was held, unless
	// it is held again.
	drain := func() {
		for {
			q, ok := c.next()
			if !ok {
				return
			}
			apply(q)
		}
	}
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-reconnected:
			return errReconnected
		case why := <-changed:
			if why == errStreamCreated && c.follows(ctx, kv, info) {
				// The advisory of the stream this watch follows (the
				// copy's own creation of the bucket, or another
				// component's just before the watch started).
				c.log.Debug("bus: the stream the watch follows is the one created; the watch goes on", "bucket", c.bucket)
				continue
			}
			if why == errStreamDeleted && !c.opts.Writes {
				// The stream the bucket has next is new, even to a
				// watch that is not told its creation time (a scoped
				// user), and it may be made again before that watch
				// starts. A copy that writes its keys learns of the
				// loss as its next watch starts, once its bucket is
				// made again (see watch).
				c.missing()
			}
			if why == errNewLeader {
				return why
			}
			return errStreamChanged
		case <-c.resumed:
			drain()
			continue
		case got, ok := <-w.Updates():
			if !ok {
				return nil
			}
			e = got
		}
		drain()
		if e == nil {
			if initial {
				initial = false
				if c.opts.Leader {
					if err := c.fromLeader(ctx, last, seen); err != nil {
						return err
					}
				}
				q := queued{sentinel: true}
				if !c.queue(q) {
					apply(q)
				}
			}
			continue
		}
		// The key is cloned out of the message's subject
		// ("$KV.<bucket>.<key>", which it would otherwise keep whole in
		// the copy's map and in every owner's state that keeps it).
		key := strings.Clone(e.Key())
		if initial {
			seen[key] = true
			last = max(last, e.Revision())
		}
		q := queued{key: key, rev: e.Revision(), deleted: e.Operation() != jetstream.KeyValuePut}
		if !q.deleted {
			q.value = e.Value()
		}
		if !c.queue(q) {
			apply(q)
		}
	}
}

// fromLeader takes into the copy every message the leader of the bucket's
// stream holds past revision last that the copy follows (see
// Options.Leader), marking its key seen.
func (c *Copy) fromLeader(ctx context.Context, last uint64, seen map[string]bool) error {
	pattern := c.opts.Filter
	if pattern == "" {
		pattern = ">"
	}
	took := 0
	for seq := last + 1; ; {
		e, err := LeaderNext(ctx, c.js, c.bucket, pattern, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return err
		}
		key := strings.Clone(e.Key)
		seen[key] = true
		q := queued{key: key, rev: e.Revision, deleted: e.Deleted}
		if !q.deleted {
			q.value = e.Value
		}
		if !c.queue(q) {
			c.apply(q)
		}
		took++
		seq = e.Revision + 1
	}
	if took > 0 {
		c.log.Info("bus: the watch's replica was behind its leader: took the changes it lacked from the leader", "bucket", c.bucket, "changes", took, "from", last+1)
	}
	return nil
}

// maxHint bounds the size a copy's maps are made at before a watch's
// initial values (see presize): 2^20 keys.
const maxHint = 1 << 20

// sizeHint is how many keys the initial values of a watch of a whole
// bucket may bring, from the state of the bucket's stream when the watch
// starts: its number of subjects (one per key, a deleted key's marker
// included), bounded by its messages (the subjects are not counted when
// the server leaves NumSubjects 0: then its messages, which count the
// history and delete markers of each key), and by maxHint. A copy's maps
// never shrink: a bucket with a long history of few keys must not make
// them at the size of its messages.
func sizeHint(st jetstream.StreamState) int {
	n := st.Msgs
	if st.NumSubjects > 0 {
		n = min(st.NumSubjects, n)
	}
	return int(min(n, maxHint))
}

// presize makes the maps of a copy that holds no key at the size of n
// keys ([sizeHint] of the bucket's stream when its watch starts), so that
// taking its initial values does not grow them step by step (each step
// allocates the map anew: about twice the final size in all). A copy that
// holds keys is left as it is.
func (c *Copy) presize(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.items.len() == 0 {
		c.items = newHeldSized(c.opts.RevisionsOnly, n)
	}
}

// apply takes one change into the copy and hands it to OnChange when it
// changed the copy; then the revisions seen move on.
func (c *Copy) apply(q queued) {
	if c.take(q.key, q.value, q.rev, q.deleted) && c.opts.OnChange != nil {
		c.opts.OnChange(Change{Bucket: c.bucket, Key: q.key, Value: q.value, Revision: q.rev, Deleted: q.deleted})
	}
	// Seen moves only after OnChange has handed the change on.
	if q.rev > c.seen.Load() {
		c.seen.Store(q.rev)
	}
}

// settle waits until the copy is released and takes every change an
// earlier watch read while it was held (an earlier watch's end of initial
// values is dropped: the next watch delivers its own). It returns early
// when ctx is done.
func (c *Copy) settle(ctx context.Context) {
	for {
		for {
			q, ok := c.next()
			if !ok {
				break
			}
			if !q.sentinel {
				c.apply(q)
			}
		}
		if c.waiting() == 0 {
			return
		}
		select {
		case <-c.resumed:
		case <-ctx.Done():
			return
		}
	}
}

// errStreamCreated is what the advisory of a stream's creation hands the
// watch; it ends the watch (as errStreamChanged) unless the stream is the
// one the watch follows (see follows).
var errStreamCreated = errors.New("the bucket's stream was created")

// follows reports whether the bucket's stream is still the one whose info
// (taken before the watch started) the watch follows: the same creation
// time, and no fewer messages. False when either info cannot be had.
func (c *Copy) follows(ctx context.Context, kv jetstream.KeyValue, had *jetstream.StreamInfo) bool {
	if had == nil || had.Created.IsZero() {
		return false
	}
	now, err := c.info(ctx, kv)
	if err != nil || now == nil {
		return false
	}
	return now.Created.Equal(had.Created) && now.State.LastSeq >= had.State.LastSeq
}

// errStreamDeleted is what the advisory of the stream's deletion hands the
// watch; it ends the watch as errStreamChanged.
var errStreamDeleted = errors.New("the bucket's stream was deleted")

// errNewLeader ends a watch when its bucket's stream (replicated on a
// cluster) elected a new leader: the watch's consumer may have lived on the
// server that stopped, and would otherwise sit silent until the client
// misses its heartbeats (10 s or more).
var errNewLeader = errors.New("the bucket's stream has a new leader; the watch starts again")

// errReconnected ends a watch when its connection came back.
var errReconnected = errors.New("the connection came back; the watch starts again")

// dropUnseen takes as deleted the keys the copy holds that the watch's
// initial values lacked: those written before lastSeq, and after a stream
// made anew (anew) every key still holding the old stream's value, which a
// reader (no Options.Writes) keeps instead as last known (said once). A
// key a reader keeps so is not dropped by a later watch of the same
// stream either.
func (c *Copy) dropUnseen(seen map[string]bool, lastSeq uint64, anew bool) {
	var out []Change
	var kept []string
	c.wmu.Lock()
	c.mu.Lock()
	c.items.each(func(k string, it Item) bool {
		old, stale := c.stale[k]
		if seen[k] {
			return true
		}
		if _, ok := c.kept[k]; ok && !anew {
			return true // last known from a stream lost: kept
		}
		if anew && stale && it.Revision == old && !c.opts.Writes {
			if c.kept == nil {
				c.kept = map[string]uint64{}
			}
			c.kept[k] = old
			kept = append(kept, k)
			return true
		}
		if (anew && stale && it.Revision == old) || (!anew && it.Revision <= lastSeq) {
			c.items.del(k) // deleting while ranging over a map is allowed
			// Not delivered at all: the key has no message left, so a
			// conditional write of it expects revision 0 (DeletedAt),
			// while a change of it up to lastSeq (an owner's write
			// landing late) is older than its loss.
			c.gone[k] = removal{upTo: lastSeq}
			out = append(out, Change{Bucket: c.bucket, Key: k, Revision: 0, Deleted: true})
		}
		return true
	})
	c.stale = nil
	c.mu.Unlock()
	c.wmu.Unlock()
	if len(kept) > 0 {
		slices.Sort(kept)
		c.log.Warn("bus: the bucket is back without keys the copy held; they are kept as last known until written or deleted there",
			"bucket", c.bucket, "keys", len(kept), "first", kept[:min(len(kept), 5)])
	}
	c.report(out)
}

// held is what a [Copy] holds of its keys: each key's value and revision,
// or (Options.RevisionsOnly) its revision alone, in a map of revisions
// that takes half the room of a map of items (a slot of 24 bytes, not 48).
// Exactly one of its maps is set. Not safe for concurrent use: the
// copy's lock guards it.
type held struct {
	items map[string]Item
	revs  map[string]uint64
}

func newHeld(revisionsOnly bool) held { return newHeldSized(revisionsOnly, 0) }

// newHeldSized is newHeld with room for n keys.
func newHeldSized(revisionsOnly bool, n int) held {
	if revisionsOnly {
		return held{revs: make(map[string]uint64, n)}
	}
	return held{items: make(map[string]Item, n)}
}

// get returns the item at key (with a nil Value when only revisions are
// held), and whether it is held.
func (h held) get(key string) (Item, bool) {
	if h.revs != nil {
		rev, ok := h.revs[key]
		return Item{Revision: rev}, ok
	}
	it, ok := h.items[key]
	return it, ok
}

// set holds value at revision rev at key (only rev, when only revisions
// are held).
func (h held) set(key string, value []byte, rev uint64) {
	if h.revs != nil {
		h.revs[key] = rev
		return
	}
	h.items[key] = Item{Value: value, Revision: rev}
}

func (h held) del(key string) {
	if h.revs != nil {
		delete(h.revs, key)
		return
	}
	delete(h.items, key)
}

func (h held) len() int {
	if h.revs != nil {
		return len(h.revs)
	}
	return len(h.items)
}

// each calls f for every key held, in no order, until f returns false. f
// may delete the key it is given.
func (h held) each(f func(key string, it Item) bool) {
	if h.revs != nil {
		for k, rev := range h.revs {
			if !f(k, Item{Revision: rev}) {
				return
			}
		}
		return
	}
	for k, it := range h.items {
		if !f(k, it) {
			return
		}
	}
}
