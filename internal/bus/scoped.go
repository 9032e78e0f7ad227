package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// scoping is the JetStream context of a connection whose user JWT limits
// what it may publish (a party of the mesh's users): a bucket the user may
// not ask the stream info of, or not delete consumers of, is bound with a
// [scopedKV], which needs neither. Every other call goes to the library as
// it is.
type scoping struct {
	jetstream.JetStream
	old     nats.JetStreamContext // the library's older API: direct gets by subject
	nc      *nats.Conn
	publish []string // the user JWT's publish allow list
	// ask returns the connection a scoped watch asks the seat on
	// ([access.WatchVerb]): the user's in the requests account.
	ask func() (*watchAsk, error)
}

// withScoping returns js binding buckets as the user whose JWT allows
// publishing publish may (see [scoping]); a nil publish (no user JWT: plain
// credentials, or none) returns js as it is. ask returns the connection
// its scoped watches ask the seat on.
func withScoping(nc *nats.Conn, js jetstream.JetStream, publish []string, ask func() (*watchAsk, error)) (jetstream.JetStream, error) {
	if publish == nil {
		return js, nil
	}
	o := js.Options()
	var jo []nats.JSOpt
	switch {
	case o.APIPrefix != "":
		jo = append(jo, nats.APIPrefix(o.APIPrefix))
	case o.Domain != "":
		jo = append(jo, nats.Domain(o.Domain))
	}
	old, err := nc.JetStream(jo...)
	if err != nil {
		return nil, err
	}
	return &scoping{JetStream: js, old: old, nc: nc, publish: publish, ask: ask}, nil
}

// unscoped returns the JetStream context js wraps, or js.
func unscoped(js jetstream.JetStream) jetstream.JetStream {
	if s, ok := js.(*scoping); ok {
		return s.JetStream
	}
	return js
}

// may reports whether the user may publish subject.
func (s *scoping) may(subject string) bool {
	for _, p := range s.publish {
		if access.Matches(p, subject) {
			return true
		}
	}
	return false
}

// makesConsumers reports whether the user may create consumers of
// bucket's stream itself (a test's permissions, a reader of every bucket):
// else its watches ask the seat ([access.WatchVerb]).
func (s *scoping) makesConsumers(api, bucket string) bool {
	prefix := api + "CONSUMER.CREATE." + stream(bucket) + "."
	for _, p := range s.publish {
		if strings.HasPrefix(p, prefix) || access.Matches(p, prefix+"w0.x") {
			return true
		}
	}
	return false
}

// KeyValue binds the bucket named bucket. A user that may ask the stream
// info and delete consumers of its stream (the seat, an operator) gets the
// library's handle. Any other gets a [scopedKV]: no scoped party may ask
// the stream info (a reader of some keys only since it lists every key's
// name with a subjects_filter; any since it waits in the server's API
// queue, which every account shares), and no party but the seat and the operators may delete
// a consumer, since the server cannot tell whose a consumer is. It returns
// an error wrapping jetstream.ErrBucketNotFound when the bucket does not
// exist.
func (s *scoping) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	api := apiPrefixOf(s.JetStream)
	info := s.may(api + "STREAM.INFO." + stream(bucket))
	if info && s.may(api+"CONSUMER.DELETE."+stream(bucket)+".x") {
		return s.JetStream.KeyValue(ctx, bucket)
	}
	kv := &scopedKV{js: s.JetStream, old: s.old, nc: s.nc, api: api, bucket: bucket, pre: kvPrefix(bucket)}
	if !s.makesConsumers(api, bucket) {
		kv.ask = s.ask // a party that makes no consumer asks the seat
	}
	if info {
		inner, err := s.JetStream.KeyValue(ctx, bucket)
		if err != nil {
			return nil, err
		}
		kv.inner = inner
		return kv, nil
	}
	key := s.readable(api, bucket)
	if key == "" {
		// A bucket the user may read no key of: as the library binds it
		// (the server refuses its stream info, and says so).
		return s.JetStream.KeyValue(ctx, bucket)
	}
	if err := kv.probe(ctx, key); err != nil {
		return nil, err
	}
	return kv, nil
}

// readable returns a key of bucket the user may get directly, to probe the
// bucket with, or "" when it may get none. A reader of every key of a
// bucket may not ask its stream info either (it waits in the server's
// JetStream API queue, which every account shares): it probes too.
func (s *scoping) readable(api, bucket string) string {
	prefix := api + "DIRECT.GET." + stream(bucket) + "." + kvPrefix(bucket)
	for _, p := range s.publish {
		if p == api+"DIRECT.GET."+stream(bucket)+".>" {
			return probeToken // a reader of every key
		}
		if keys, ok := strings.CutPrefix(p, prefix); ok {
			return strings.NewReplacer("*", probeToken, ">", probeToken).Replace(keys)
		}
	}
	return ""
}

// probeToken fills the wildcards of a key pattern into a key to probe a
// bucket with: whether the key is there or not, the answer says the bucket
// is.
const probeToken = "mesh-provisioner-probe"

// ErrNotScoped is wrapped by the error of a [scopedKV] method that a
// scoped party's handle does not do (a history, a purge, a get of a
// revision, options it cannot read), naming it.
var ErrNotScoped = errors.New("not done by a scoped party's bucket handle")

// scopedKV is a bucket handle that asks no stream info and deletes no
// consumer: gets are direct gets of the key's subject, writes are
// publishes, watches are ordered push consumers filtered on the pattern
// watched, left to the server to remove once the watch stops (an ordered
// consumer left without interest is removed within seconds). With inner
// (a user that may ask the stream info), Status is the library's.
type scopedKV struct {
	js  jetstream.JetStream
	old nats.JetStreamContext
	nc  *nats.Conn
	api string // the JetStream API prefix, "$JS.API."
	// ask, when set, returns the connection the watches ask the seat for
	// their consumers on ([access.WatchVerb]); nil: the user makes them.
	ask    func() (*watchAsk, error)
	bucket string
	pre    string
	inner  jetstream.KeyValue
}

// probe checks that the bucket exists with a direct get of key (one the
// user may get): no responder means no stream.
func (kv *scopedKV) probe(ctx context.Context, key string) error {
	_, err := kv.Get(ctx, key)
	if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil
	}
	return err
}

// Bucket returns the bucket's name.
func (kv *scopedKV) Bucket() string { return kv.bucket }

// Get returns the last value of key, read with a direct get of its
// subject ($JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>). A delete
// marker is returned with jetstream.ErrKeyDeleted, a missing key is
// jetstream.ErrKeyNotFound, a missing bucket jetstream.ErrBucketNotFound.
func (kv *scopedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	m, err := kv.old.GetLastMsg(stream(kv.bucket), kv.pre+key, nats.DirectGet(), nats.Context(ctx))
	switch {
	case errors.Is(err, nats.ErrMsgNotFound):
		return nil, jetstream.ErrKeyNotFound
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("bus: bucket %s: %w", kv.bucket, jetstream.ErrBucketNotFound)
	case err != nil:
		return nil, err
	}
	e := &scopedEntry{bucket: kv.bucket, key: key, value: m.Data, rev: m.Sequence, created: m.Time, op: operation(m.Header)}
	if e.op != jetstream.KeyValuePut {
		return e, jetstream.ErrKeyDeleted
	}
	return e, nil
}

// withTimeout gives ctx the library's default deadline, 5 s, unless it has
// one.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, 5*time.Second)
}

// operation returns the key-value operation of a message's headers: a put,
// or a delete or purge marker (as the library reads them).
func operation(h nats.Header) jetstream.KeyValueOp {
	switch h.Get(kvOperation) {
	case kvDelete:
		return jetstream.KeyValueDelete
	case kvPurge:
		return jetstream.KeyValuePurge
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge":
		return jetstream.KeyValuePurge
	case "Remove":
		return jetstream.KeyValueDelete
	}
	return jetstream.KeyValuePut
}

// GetRevision is not done: a get by sequence is the bare direct get, which
// reads any key.
func (kv *scopedKV) GetRevision(context.Context, string, uint64) (jetstream.KeyValueEntry, error) {
	return nil, fmt.Errorf("bus: bucket %s: get a revision: %w", kv.bucket, ErrNotScoped)
}

// Put writes value at key and returns its revision.
func (kv *scopedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ack, err := kv.js.Publish(ctx, putSubject(kv.js, kv.bucket, key), value)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// PutString writes value at key and returns its revision.
func (kv *scopedKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return kv.Put(ctx, key, []byte(value))
}

// Create writes value at key only when the key has no value (none, or a
// delete marker), as the library's Create; options are not done.
func (kv *scopedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if len(opts) > 0 {
		return 0, fmt.Errorf("bus: bucket %s: create with options: %w", kv.bucket, ErrNotScoped)
	}
	rev, err := kv.Update(ctx, key, value, 0)
	if err == nil || !IsConflict(err) {
		return rev, err
	}
	if e, gerr := kv.Get(ctx, key); errors.Is(gerr, jetstream.ErrKeyDeleted) {
		return kv.Update(ctx, key, value, e.Revision())
	}
	return 0, jetstream.ErrKeyExists
}

// Update writes value at key only when the key's last revision is rev.
func (kv *scopedKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	m := PutAtMsg(kv.bucket, key, value, rev)
	m.Subject = putSubject(kv.js, kv.bucket, key)
	ack, err := kv.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Delete writes a delete marker at key; options are not done (a delete at
// a revision is [DeleteAt]).
func (kv *scopedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if len(opts) > 0 {
		return fmt.Errorf("bus: bucket %s: delete with options (use bus.DeleteAt): %w", kv.bucket, ErrNotScoped)
	}
	m := DeleteMsg(kv.bucket, key)
	m.Subject = putSubject(kv.js, kv.bucket, key)
	_, err := kv.js.PublishMsg(ctx, m)
	return err
}

// Purge is not done: every bucket refuses rollups.
func (kv *scopedKV) Purge(context.Context, string, ...jetstream.KVDeleteOpt) error {
	return fmt.Errorf("bus: bucket %s: purge: %w", kv.bucket, ErrNotScoped)
}

// PurgeDeletes is not done.
func (kv *scopedKV) PurgeDeletes(context.Context, ...jetstream.KVPurgeOpt) error {
	return fmt.Errorf("bus: bucket %s: purge deletes: %w", kv.bucket, ErrNotScoped)
}

// History is not done.
func (kv *scopedKV) History(context.Context, string, ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return nil, fmt.Errorf("bus: bucket %s: history: %w", kv.bucket, ErrNotScoped)
}

// Status returns the library's status of the bucket for a user that may
// ask its stream info, else an error wrapping [ErrNotScoped].
func (kv *scopedKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	if kv.inner == nil {
		return nil, fmt.Errorf("bus: bucket %s: status: %w", kv.bucket, ErrNotScoped)
	}
	return kv.inner.Status(ctx)
}

// Watch follows the keys matching keys (see [WatchKeys]); options are not
// done (use WatchKeys).
func (kv *scopedKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if len(opts) > 0 {
		return nil, fmt.Errorf("bus: bucket %s: watch with options (use bus.WatchKeys): %w", kv.bucket, ErrNotScoped)
	}
	return kv.watch(ctx, keys, WatchOptions{})
}

// WatchAll follows every key (a reader of some keys only is refused by the
// server).
func (kv *scopedKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return kv.Watch(ctx, ">", opts...)
}

// WatchFiltered follows one pattern; more are not done (a consumer of two
// filters carries none in its subject, and no scoped user may make it).
func (kv *scopedKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if len(keys) != 1 {
		return nil, fmt.Errorf("bus: bucket %s: watch %d patterns: %w", kv.bucket, len(keys), ErrNotScoped)
	}
	return kv.Watch(ctx, keys[0], opts...)
}

// Keys returns the names of the keys with a value (a watch of their
// headers, every key).
func (kv *scopedKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	if len(opts) > 0 {
		return nil, fmt.Errorf("bus: bucket %s: keys with options: %w", kv.bucket, ErrNotScoped)
	}
	return kv.keys(ctx, ">")
}

// ListKeys lists the names of the keys with a value.
func (kv *scopedKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	if len(opts) > 0 {
		return nil, fmt.Errorf("bus: bucket %s: list keys with options: %w", kv.bucket, ErrNotScoped)
	}
	return kv.lister(ctx, ">")
}

// ListKeysFiltered lists the names of the keys with a value matching one
// pattern.
func (kv *scopedKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	if len(filters) != 1 {
		return nil, fmt.Errorf("bus: bucket %s: list keys of %d patterns: %w", kv.bucket, len(filters), ErrNotScoped)
	}
	return kv.lister(ctx, filters[0])
}

func (kv *scopedKV) keys(ctx context.Context, pattern string) ([]string, error) {
	w, err := kv.watch(ctx, pattern, WatchOptions{MetaOnly: true})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []string
	for e := range w.Updates() {
		if e == nil {
			break
		}
		if e.Operation() == jetstream.KeyValuePut {
			out = append(out, e.Key())
		}
	}
	if len(out) == 0 {
		return nil, jetstream.ErrNoKeysFound
	}
	return out, nil
}

func (kv *scopedKV) lister(ctx context.Context, pattern string) (jetstream.KeyLister, error) {
	keys, err := kv.keys(ctx, pattern)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, err
	}
	l := &scopedLister{keys: make(chan string, len(keys))}
	for _, k := range keys {
		l.keys <- k
	}
	close(l.keys)
	return l, nil
}

// scopedLister hands out the keys a [scopedKV] listed.
type scopedLister struct{ keys chan string }

func (l *scopedLister) Keys() <-chan string { return l.keys }
func (l *scopedLister) Stop() error         { return nil }

// WatchOptions are the options of [WatchKeys].
type WatchOptions struct {
	// UpdatesOnly sends the changes from now on only: no initial values,
	// and no nil marking their end.
	UpdatesOnly bool
	// MetaOnly sends each entry without its value.
	MetaOnly bool
}

// WatchKeys follows the keys of kv matching pattern as kv.Watch does, with
// opts, with this package's own watch (a scoped party's handle, see
// [scopedKV], or kv's bucket on js): it takes a stored message for what it
// is whatever headers its writer gave it, and hands on only deliveries of
// its own consumer on the bucket's stream. With js nil and a library
// handle it is the library's watch (which takes an empty value stored
// with a "Status: 100" header for the server's heartbeat): a caller that
// only lists names (completion).
func WatchKeys(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, pattern string, opts WatchOptions) (jetstream.KeyWatcher, error) {
	if _, ok := kv.(*scopedKV); ok || js != nil {
		return ownWatch(js, kv, kv.Bucket()).watch(ctx, pattern, opts)
	}
	var jo []jetstream.WatchOpt
	if opts.UpdatesOnly {
		jo = append(jo, jetstream.UpdatesOnly())
	}
	if opts.MetaOnly {
		jo = append(jo, jetstream.MetaOnly())
	}
	return kv.Watch(ctx, pattern, jo...)
}

// ListKeys returns the names of kv's keys with a value matching pattern
// (">" for every key), read with this package's own watch as [WatchKeys]
// reads (kv's bucket on js, or a scoped party's handle): a value stored
// with the headers of the server's heartbeat is a key like any other, where
// the library's lister would take it for the server's and start over for
// ever. No key gives an error wrapping jetstream.ErrNoKeysFound.
func ListKeys(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, pattern string) ([]string, error) {
	return ownWatch(js, kv, kv.Bucket()).keys(ctx, pattern)
}

// scopedEntry is one entry of a [scopedKV].
type scopedEntry struct {
	bucket, key string
	value       []byte
	rev, delta  uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e *scopedEntry) Bucket() string                  { return e.bucket }
func (e *scopedEntry) Key() string                     { return e.key }
func (e *scopedEntry) Value() []byte                   { return e.value }
func (e *scopedEntry) Revision() uint64                { return e.rev }
func (e *scopedEntry) Created() time.Time              { return e.created }
func (e *scopedEntry) Delta() uint64                   { return e.delta }
func (e *scopedEntry) Operation() jetstream.KeyValueOp { return e.op }

// Scope returns js (a JetStream context of nc) binding buckets as the
// user of the credentials file creds may ([scoping]), as [Connect] does
// (its watches ask the seat as the same user in the requests account, at
// the server nc is connected to); js as it is when creds holds no user JWT.
func Scope(nc *nats.Conn, js jetstream.JetStream, creds string) (jetstream.JetStream, error) {
	return withScoping(nc, js, CredsPublish(creds), watchAsker(nc, Dial{URL: nc.ConnectedUrl(), Creds: creds, Name: nc.Opts.Name}))
}
