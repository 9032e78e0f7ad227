package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// Bucket returns the key-value bucket named name, creating it (history 1,
// bounded and refusing rollups: see makeBucket) when it does not exist. Replicas sets the replica count of a new bucket:
// 0 means the replicas of js's connection ([Dial.Replicas]), and one
// replica (the embedded default) when it set none; a three-server cluster
// wants 3. A bucket that exists is used as it is, whatever its replicas:
// on a connection with [Dial.Replicas], a bucket with another count is said
// in the log, once per bucket.
//
// A bucket it makes is checked as makeBucket says: an error wrapping
// [ErrStoreLost] says the server lost the store of every stream it made
// under the name (the bucket is then deleted; call again later).
func Bucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	kv, _, err := bucket(ctx, js, name, replicas)
	return kv, err
}

// bucket is [Bucket], reporting whether it made the bucket.
func bucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, bool, error) {
	kv, err := js.KeyValue(ctx, name)
	if err == nil {
		sayReplicas(ctx, js, kv, replicas)
		return kv, false, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, false, fmt.Errorf("bus: bucket %s: %w", name, err)
	}
	if replicas <= 0 {
		replicas = max(ReplicasOf(js), 1)
	}
	kv, err = makeBucket(ctx, js, jetstream.KeyValueConfig{Bucket: name, History: History, Replicas: replicas})
	if err != nil {
		return nil, false, fmt.Errorf("bus: create bucket %s: %w", name, err)
	}
	return kv, true, nil
}

// makeBucket creates the bucket cfg says, bounded as
// [access.BucketLimits] says (its size, one value's size), and brings its
// stream to the rest of the seat's configuration (see [Conform]): rollups
// refused, since a "Nats-Rollup" header on a put would purge other keys
// (all) or the key's history (sub), and the parties delete keys, never
// purge them. A bucket made meanwhile by another is returned as it is.
//
// A bucket made while the server still removes the stream deleted under
// the same name may have lost its store (see [ErrStoreLost]): makeBucket
// checks the stream it made ([checkStore]) and, when its store is lost,
// deletes it and makes it again after a pause (100 ms, doubling), at
// most [remakeTries] times in all, each said in the log; then it returns
// an error wrapping ErrStoreLost, the bucket deleted (a caller that tries
// again later makes it anew).
func makeBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	cfg.MaxBytes, cfg.MaxValueSize = access.BucketLimits(cfg.Bucket)
	var kv jetstream.KeyValue
	err := untilStoreKept(ctx, js, cfg.Bucket, func() error {
		var err error
		kv, err = makeOnce(ctx, js, cfg)
		return err
	})
	return kv, err
}

// makeOnce is one try of [makeBucket]: it creates the bucket, conforms its
// stream and checks its store. A store found lost is deleted, and the
// error wraps [ErrStoreLost].
func makeOnce(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.KeyValue(ctx, cfg.Bucket)
	}
	if isStoreFull(err) {
		return nil, storeTooSmall(ctx, js, cfg.Bucket, err)
	}
	if storeFailed(err) {
		// Nothing was made: the server could not open the stream's
		// store (the directory of the stream being deleted, half gone).
		return nil, fmt.Errorf("%w: %w", ErrStoreLost, err)
	}
	if err != nil {
		return nil, err
	}
	if _, _, err := conform(ctx, js, cfg.Bucket); err != nil {
		if storeFailed(err) {
			return nil, dropLost(ctx, js, cfg.Bucket, err)
		}
		return nil, err
	}
	if err := checkStore(ctx, js, cfg.Bucket, true); err != nil {
		if errors.Is(err, ErrStoreLost) {
			return nil, dropLost(ctx, js, cfg.Bucket, err)
		}
		return nil, err
	}
	return kv, nil
}

// ErrStoreLost is wrapped by the error of [Bucket], [LeaseBucket] and
// [Mend] when the server lost the store of a bucket's stream: nats-server
// (2.15) takes a deleted stream out of its account before it removes the
// stream's directory, so that a stream created under the same name
// meanwhile (a copy making its bucket again as soon as it finds it gone)
// opens that directory, which the deletion then moves away. The new
// stream exists, but the server cannot write its messages (it answers no
// put: they time out) nor its configuration ("meta.inf.tmp: no such file
// or directory"), until it is deleted and made again.
var ErrStoreLost = errors.New("the server lost the store of the bucket's stream (made while the stream deleted under its name was still being removed)")

// remakeTries is how many times [makeBucket] and [Mend] make a bucket
// whose store is lost before they give up (pauses of 100 ms doubling:
// some 3 s in all, for the server's removal of the deleted stream to end).
const remakeTries = 6

// JetStream error codes of a store the server could not open or write:
// "error creating store for stream" (JSStreamCreateErrF: the create of a
// stream whose store failed) and the update of a stream's configuration
// failing with a non-API error (JSStreamUpdateErrF), which the store's
// write of its configuration file is, besides consumers asking more than
// new limits ("violates consumers", which conform handles).
const (
	jsStreamCreateFailed jetstream.ErrorCode = 10049
	jsStreamUpdateFailed jetstream.ErrorCode = 10069
)

// storeFailed reports whether err is the server's failure to open or write
// a stream's store (see jsStreamCreateFailed).
func storeFailed(err error) bool {
	code, ok := apiCode(err)
	if !ok {
		return false
	}
	return code == jsStreamCreateFailed || code == jsStreamUpdateFailed && !strings.Contains(err.Error(), "violates consumers")
}

// checkStore checks that the store of bucket's stream is kept: the server
// writes its configuration again (an update of the stream to the
// configuration it has: a write of its configuration file, which fails
// when its directory is gone). made says the stream was just made: it
// then must hold no message older than itself, which would be the
// deleted stream's, read from the directory its deletion moves away. It
// returns an error wrapping [ErrStoreLost] when the store is lost, another
// when the stream cannot be read or updated.
func checkStore(ctx context.Context, js jetstream.JetStream, bucket string, made bool) error {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return fmt.Errorf("bus: bucket %s: %w", bucket, err)
	}
	info := st.CachedInfo()
	if made {
		// A stream's messages are written after it was made: older
		// ones (or a last sequence with no time after it was made) were
		// read from the directory of the stream deleted before.
		state := info.State
		if state.Msgs > 0 && state.FirstTime.Before(info.Created) || state.LastSeq > 0 && !state.LastTime.After(info.Created) {
			return fmt.Errorf("%w: the stream made at %s holds messages written before it (%d, sequences %d to %d, the last at %s): the deleted stream's",
				ErrStoreLost, info.Created.Format(time.RFC3339Nano), state.Msgs, state.FirstSeq, state.LastSeq, state.LastTime.Format(time.RFC3339Nano))
		}
	}
	if _, err := js.UpdateStream(ctx, info.Config); err != nil {
		// A stream that held its keys (not just made) is taken as lost
		// only when its directory is gone: a store failing for another
		// cause (a full disk) keeps what it holds, and is no reason to
		// delete the bucket.
		if storeFailed(err) && (made || strings.Contains(err.Error(), "no such file or directory")) {
			return fmt.Errorf("%w: writing its configuration: %w", ErrStoreLost, err)
		}
		return fmt.Errorf("bus: bucket %s: write its configuration again: %w", bucket, err)
	}
	return nil
}

// dropLost deletes the stream of bucket, whose store is lost (why), and
// returns why wrapped with [ErrStoreLost] (once), or the deletion's
// failure.
func dropLost(ctx context.Context, js jetstream.JetStream, bucket string, why error) error {
	if !errors.Is(why, ErrStoreLost) {
		why = fmt.Errorf("%w: %w", ErrStoreLost, why)
	}
	if err := deleteStream(ctx, js, bucket); err != nil {
		return fmt.Errorf("%w; %w", why, err)
	}
	return why
}

// deleteStream deletes the stream of bucket; one already gone is no
// error.
func deleteStream(ctx context.Context, js jetstream.JetStream, bucket string) error {
	if err := js.DeleteStream(ctx, "KV_"+bucket); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("deleting the stream: %w", err)
	}
	return nil
}

// untilStoreKept calls try until it returns nil or an error that does not
// wrap [ErrStoreLost], pausing 100 ms (doubling) after each lost store and
// saying it in the log, at most [remakeTries] times; it returns the last
// error, or ctx's.
func untilStoreKept(ctx context.Context, js jetstream.JetStream, bucket string, try func() error) error {
	delay := 100 * time.Millisecond
	for n := 1; ; n++ {
		err := try()
		if !errors.Is(err, ErrStoreLost) || n == remakeTries {
			return err
		}
		slog.Default().Warn("bus: the bucket was made while the server still removed the stream deleted under its name, which took its store; deleted, made again after a pause",
			"bucket", bucket, "try", n, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// Mend checks the store of bucket's stream on the server (see
// [ErrStoreLost]) and, when it is lost, deletes the stream and makes it
// again with the configuration it had (its keys are gone with the store:
// their writers write them again, see Options.Writes), checking the new
// one the same way. It is for a writer whose puts are not acknowledged,
// and for a [Copy] that made its bucket again: a store can be lost after
// it was made and checked, when the server's removal of the stream
// deleted before comes later. It reports whether it made the bucket
// again; its error wraps ErrStoreLost when the store was still lost after
// [remakeTries] tries (the bucket then deleted). It needs the permission
// to update, delete and create the bucket's stream (the seat's, the
// operator's).
func Mend(ctx context.Context, js jetstream.JetStream, bucket string) (bool, error) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return false, fmt.Errorf("bus: bucket %s: %w", bucket, err)
	}
	sc := st.CachedInfo().Config
	lost := checkStore(ctx, js, bucket, false)
	if !errors.Is(lost, ErrStoreLost) {
		return false, lost
	}
	if err := deleteStream(ctx, js, bucket); err != nil {
		return false, fmt.Errorf("bus: bucket %s: %w; %w", bucket, lost, err)
	}
	err = untilStoreKept(ctx, js, bucket, func() error {
		_, err := js.CreateStream(ctx, sc)
		switch {
		case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
			// Made meanwhile by another (a copy making its bucket
			// again): checked all the same.
		case storeFailed(err):
			return fmt.Errorf("%w: %w", ErrStoreLost, err)
		case err != nil:
			return fmt.Errorf("make it again: %w", err)
		}
		if err := checkStore(ctx, js, bucket, true); err != nil {
			if errors.Is(err, ErrStoreLost) {
				return dropLost(ctx, js, bucket, err)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("bus: bucket %s: %w (first: %w)", bucket, err, lost)
	}
	slog.Default().Warn("bus: the bucket's store was lost on the server; the bucket was made again", "bucket", bucket, "lost", lost)
	return true, nil
}

// ErrStoreTooSmall is wrapped by the error of [Bucket] and [LeaseBucket]
// when the server refuses to make a bucket because its bound does not fit
// in the server's JetStream max store beside what the streams there
// reserve ("insufficient storage resources"). The error says the max
// store the mesh's buckets need ([access.StoreReserved]) and where to set
// it. It is not [Transient]: the server keeps refusing until its
// configuration changes and it restarts.
var ErrStoreTooSmall = errors.New("the server's JetStream max store cannot hold the bucket's bound beside the other buckets'")

// jsStorageResourcesExceeded is the server's code for a stream refused
// because its max_bytes do not fit in the server's (or account's) store.
const jsStorageResourcesExceeded = 10047

// isStoreFull reports whether err is the server's refusal of a stream
// whose bound does not fit in its store.
func isStoreFull(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jsStorageResourcesExceeded
}

// storeTooSmall returns the error of bucket refused with err for want of
// store: what the bucket reserves, what the mesh's buckets reserve with
// the providers' buckets that exist and room for more, and what to set.
func storeTooSmall(ctx context.Context, js jetstream.JetStream, bucket string, err error) error {
	providers := 0
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		if strings.HasPrefix(n, "KV_") && strings.HasSuffix(n, "_bound") {
			providers++
		}
	}
	if strings.HasSuffix(bucket, "_bound") {
		providers++
	}
	maxBytes, _ := access.BucketLimits(bucket)
	need := access.StoreReserved(providers)
	return fmt.Errorf("%w (%w): %s reserves %s when it is made, and the mesh's buckets %s with %d providers' and room for %d more; "+
		"set max_file_store: %s (or more) in the jetstream block of the server's configuration (every server's, in a cluster) and restart it "+
		"(docs/deploying.md; up's own server reserves it at start for the mesh file's providers: restart up)",
		ErrStoreTooSmall, err, bucket, Size(maxBytes), Size(need), providers, access.SpareProviders, Size(need))
}

// Size returns b bytes as nats-server's configuration writes a size,
// rounded up to whole MiB ("64MB") or, from 1 GiB, whole GiB ("20GB"):
// the server reads "MB" and "GB" as powers of 1024. Below zero (a size
// not known) it returns "unknown".
func Size(b int64) string {
	const mib, gib = 1 << 20, 1 << 30
	if b < 0 {
		return "unknown"
	}
	if b >= gib {
		return strconv.FormatInt((b+gib-1)/gib, 10) + "GB"
	}
	return strconv.FormatInt((b+mib-1)/mib, 10) + "MB"
}

// Conform brings the stream of bucket, which exists, to the configuration
// the seat makes every bucket with: the bounds of [access.BucketLimits]
// (max_bytes, the stream's size; max_msg_size, one value with its
// headers), history 1 (max_msgs_per_subject: one message per key),
// rollups refused, [DuplicateWindowOf] (no longer than the bucket's keys
// live) and [ConsumerLimits] (left, and said,
// while a consumer made before asks more). A bucket made before these bounds (no max_bytes,
// rollups allowed, no value bound, another history) is updated, and log
// says once, at the update, what changed. A size bound below what the
// bucket holds is not set, since the server would drop the oldest keys to
// fit it (log says so; the rest is updated). Only a user that may update
// the stream (the seat) conforms it. It returns what changed, each as
// "<field> <old> -> <new>" (none when the bucket conforms), and an error
// when the stream cannot be read or the server refuses the update.
func Conform(ctx context.Context, js jetstream.JetStream, bucket string, log *slog.Logger) ([]string, error) {
	changed, kept, err := conform(ctx, js, bucket)
	if kept.size != "" {
		log.Error("bus: a bucket holds more than its bound; its size bound is left as it is", "bucket", bucket, "kept", kept.size)
	}
	if kept.consumers != "" {
		log.Error("bus: a bucket's consumer limits are left as they are while a consumer asks more; the next conform sets them",
			"bucket", bucket, "err", kept.consumers)
	}
	if err != nil {
		return nil, err
	}
	if len(changed) > 0 {
		log.Info("bus: a bucket made with an older configuration is updated to the current one",
			"bucket", bucket, "changed", strings.Join(changed, "; "))
	}
	return changed, nil
}

// leftOld says what [Conform] left of a bucket's older configuration: its
// size bound when the bucket holds more (what it holds), its consumer
// limits while a consumer asks more (the server's refusal).
type leftOld struct{ size, consumers string }

// conform is [Conform] without the log: it returns what changed and what
// it left.
func conform(ctx context.Context, js jetstream.JetStream, bucket string) (changed []string, kept leftOld, err error) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, kept, fmt.Errorf("bus: bucket %s: %w", bucket, err)
	}
	info := st.CachedInfo()
	sc := info.Config
	maxBytes, maxValue := access.BucketLimits(bucket)
	if sc.MaxBytes != maxBytes {
		if info.State.Bytes > uint64(maxBytes) {
			kept.size = fmt.Sprintf("%d bytes, bound %d, max_bytes %d", info.State.Bytes, maxBytes, sc.MaxBytes)
		} else {
			changed = append(changed, fmt.Sprintf("max_bytes %d -> %d", sc.MaxBytes, maxBytes))
			sc.MaxBytes = maxBytes
		}
	}
	if sc.MaxMsgSize != maxValue {
		changed = append(changed, fmt.Sprintf("max_msg_size %d -> %d", sc.MaxMsgSize, maxValue))
		sc.MaxMsgSize = maxValue
	}
	if sc.MaxMsgsPerSubject != History {
		changed = append(changed, fmt.Sprintf("max_msgs_per_subject %d -> %d", sc.MaxMsgsPerSubject, History))
		sc.MaxMsgsPerSubject = History
	}
	if sc.AllowRollup {
		changed = append(changed, "allow_rollup_hdrs true -> false")
		sc.AllowRollup = false
	}
	window := DuplicateWindowOf(bucket)
	if sc.MaxAge > 0 && window > sc.MaxAge {
		// A lease bucket: the server refuses a window longer than the
		// keys live.
		window = sc.MaxAge
	}
	if sc.Duplicates != window {
		changed = append(changed, fmt.Sprintf("duplicate_window %s -> %s", sc.Duplicates, window))
		sc.Duplicates = window
	}
	old := sc.ConsumerLimits
	if old != ConsumerLimits {
		changed = append(changed, fmt.Sprintf("consumer_limits %s -> %s", consumerLimits(old), consumerLimits(ConsumerLimits)))
		sc.ConsumerLimits = ConsumerLimits
	}
	if len(changed) == 0 {
		return nil, kept, nil
	}
	_, err = js.UpdateStream(ctx, sc)
	if err != nil && old != ConsumerLimits && strings.Contains(err.Error(), "violates consumers") {
		// A consumer made before asks more (a longer inactive threshold):
		// the server refuses the limits while it exists. The rest is
		// updated; the next conform sets them once it is gone.
		changed = changed[:len(changed)-1]
		kept.consumers = err.Error()
		sc.ConsumerLimits = old
		if len(changed) == 0 {
			return nil, kept, nil
		}
		_, err = js.UpdateStream(ctx, sc)
	}
	if err != nil {
		return nil, kept, fmt.Errorf("bus: bucket %s: update its configuration (%s): %w", bucket, strings.Join(changed, "; "), err)
	}
	return changed, kept, nil
}

// ConsumerLimits are every bucket's stream's bounds on its consumers
// (consumer_limits): a consumer is removed [access.ConsumerInactive] after
// nothing subscribes to its messages (one asking a longer threshold is
// refused, one asking none takes it). They bound every consumer of the
// bucket, the direct ones a reader can make beyond its names too
// (docs/trust.md). No max_ack_pending: the server gives a stream's to
// every consumer that asks none, and refuses it to one that acknowledges
// nothing (the watches: "consumer requires ack policy for max ack
// pending").
var ConsumerLimits = jetstream.StreamConsumerLimits{InactiveThreshold: access.ConsumerInactive}

// consumerLimits says l as "inactive_threshold <d>".
func consumerLimits(l jetstream.StreamConsumerLimits) string {
	return fmt.Sprintf("inactive_threshold %s", l.InactiveThreshold)
}

// DuplicateWindow is the duplicate window (the stream's duplicate_window)
// of every bucket but those the seat alone writes ([SeatDuplicateWindow]):
// the smallest nats-server accepts, 100 ms. Their writers want no
// de-duplication (a put is a key's value, never a message to send once),
// and the server holds each "Nats-Msg-Id" header a writer sends for the
// window, in memory: at the default two minutes a writer of one key could
// make it hold gigabytes of ids (scripts/msgidflood).
const DuplicateWindow = 100 * time.Millisecond

// SeatDuplicateWindow is the duplicate window of the buckets the seat
// alone writes ([access.SeatKeeps]): 30 s. The seat sends each write of a
// key with a "Nats-Msg-Id" that is the same on every try of it, and tries
// a write whose ack is late again (up to 10 s after its first try, package
// seat): a replicated bucket answers a try whose earlier copy it wrote
// within the window as a duplicate, with that copy's revision, where it
// would refuse it as a conflict. Only the seat writes there, with ids of
// some 25 bytes: the server holds about a hundred bytes per write of the
// last 30 s (some 4 MiB for the 41,000 writes of a cold start of 1,000
// nodes: 9,000 plans and 32,400 provisions).
const SeatDuplicateWindow = 30 * time.Second

// DuplicateWindowOf returns the duplicate window of bucket's stream:
// [SeatDuplicateWindow] for a bucket the seat alone writes, else
// [DuplicateWindow]. [Conform] makes it no longer than the keys of a
// bucket live (the seat's lease bucket: its TTL), as the server refuses a
// longer one.
func DuplicateWindowOf(bucket string) time.Duration {
	if access.SeatKeeps(bucket) {
		return SeatDuplicateWindow
	}
	return DuplicateWindow
}

// History is every bucket's history: the messages its stream keeps per
// key (max_msgs_per_subject). One: a key holds its last value or its
// delete marker, so that a writer of a key holds at most one value there.
const History = 1

// LeaseBucket returns the bucket for a lease whose key lapses ttl after its
// last write, creating it when missing with the replicas of js's connection
// ([Dial.Replicas]; one without). A bucket that exists is used as it is
// (see [Bucket]).
func LeaseBucket(ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err == nil {
		sayReplicas(ctx, js, kv, 0)
		return kv, nil
	}
	kv, err = makeBucket(ctx, js, jetstream.KeyValueConfig{Bucket: name, History: History, TTL: ttl, Replicas: max(ReplicasOf(js), 1)})
	if err != nil {
		return nil, fmt.Errorf("bus: create lease bucket %s: %w", name, err)
	}
	return kv, nil
}

// PutIfChanged writes value at key unless the copy already holds exactly
// these bytes, and takes the write into the copy at once. It reports whether
// it wrote. A copy that keeps revisions only (Options.RevisionsOnly) holds
// no bytes to compare with: the value is written every time.
func PutIfChanged(ctx context.Context, c *Copy, key string, value []byte) (bool, error) {
	if old, ok := c.Get(key); ok && !c.opts.RevisionsOnly && bytes.Equal(old.Value, value) {
		return false, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	rev, err := c.kv.Put(ctx, key, value)
	if err != nil {
		return false, fmt.Errorf("bus: put %s %s: %w", c.bucket, key, err)
	}
	c.Took(key, value, rev)
	return true, nil
}

// DeleteIfPresent deletes key unless the copy does not hold it, and takes
// the delete into the copy at once. It reports whether it deleted.
func DeleteIfPresent(ctx context.Context, c *Copy, key string) (bool, error) {
	if _, ok := c.Get(key); !ok {
		return false, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.kv.Delete(ctx, key); err != nil {
		return false, fmt.Errorf("bus: delete %s %s: %w", c.bucket, key, err)
	}
	c.Took(key, nil, 0)
	return true, nil
}

// IsConflict reports whether err is the bus's refusal of a conditional
// write: the key's last revision was not the one the write expected,
// because another writer changed it first (a standalone server and a
// replicated bucket report this under two codes).
func IsConflict(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// A Header is a header a delete marker carries beside the key-value
// store's own ([DeleteAt]): its reader finds it in [LeaderEntry.Header].
type Header struct{ Name, Value string }

// DeleteAt deletes key of bucket through js only when the key's last
// revision (stream sequence) is rev, 0 meaning the key has no message at
// all, and returns the revision of the delete marker it wrote, which
// carries headers too. When the key changed meanwhile it returns an error
// for which [IsConflict] reports true, and deletes nothing.
func DeleteAt(ctx context.Context, js jetstream.JetStream, bucket, key string, rev uint64, headers ...Header) (uint64, error) {
	m := DeleteMsg(bucket, key)
	m.Subject = putSubject(js, bucket, key)
	for _, h := range headers {
		m.Header.Set(h.Name, h.Value)
	}
	m.Header[expectedLastSubjSeq] = []string{strconv.FormatUint(rev, 10)}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("bus: delete %s %s at revision %d: %w", bucket, key, rev, err)
	}
	return ack.Sequence, nil
}

// putSubject returns the subject a write of key in bucket is published on
// through js: "$KV.<bucket>.<key>", or that behind the JetStream API
// prefix of a domain's connection ("$JS.<domain>.API.$KV.<bucket>.<key>",
// as the library's key-value puts are), which the hub maps back.
func putSubject(js jetstream.JetStream, bucket, key string) string {
	if api := apiPrefixOf(js); api != "$JS.API." {
		return api + kvPrefix(bucket) + key
	}
	return kvPrefix(bucket) + key
}

// DeleteMsg returns the message that, published to JetStream, deletes key
// of bucket: a delete marker on the subject "$KV.<bucket>.<key>" with the
// header "KV-Operation: DEL", as jetstream's KeyValue.Delete writes it. An
// owner that writes asynchronously publishes it with PublishMsgAsync.
func DeleteMsg(bucket, key string) *nats.Msg {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Header.Set(kvOperation, kvDelete)
	return m
}

// The header that marks a key-value delete, as jetstream's KeyValue.Delete
// writes it.
const (
	kvOperation = "KV-Operation"
	kvDelete    = "DEL"
)

// expectedLastSubjSeq is the header of a conditional write, as
// jetstream.WithExpectLastSequencePerSubject sets it: the stream stores the
// message only if the last message on its subject has this sequence (0:
// there is none).
const expectedLastSubjSeq = jetstream.ExpectedLastSubjSeqHeader

// PutAtMsg returns the message that, published to JetStream, writes value
// at key of bucket only when the key's last revision (stream sequence) is
// rev, 0 meaning the key has no message at all: on the subject
// "$KV.<bucket>.<key>" with the header Nats-Expected-Last-Subject-Sequence,
// as jetstream.WithExpectLastSequencePerSubject(rev) sets it. Publish it
// with PublishMsgAsync (or PublishMsg) and no options: publishing with an
// option costs an options record per publish and a header map grown by
// Set, where this message's header is made once (BenchmarkConditionalPut:
// about 270 bytes and 4 allocations less per put, of some 3.7 KB the put
// and its ack cost client and embedded server together). When the key
// changed meanwhile the bus refuses it with an error for which
// [IsConflict] reports true. The message is the caller's; value is not
// copied.
func PutAtMsg(bucket, key string, value []byte, rev uint64) *nats.Msg {
	return &nats.Msg{
		Subject: "$KV." + bucket + "." + key,
		Header:  nats.Header{expectedLastSubjSeq: []string{strconv.FormatUint(rev, 10)}},
		Data:    value,
	}
}

// PutAtMsgID returns [PutAtMsg]'s message with the header Nats-Msg-Id id
// ([jetstream.MsgIDHeader]): the stream stores one message per id within
// its duplicate window ([DuplicateWindowOf]), so that the message sent
// again is one write. Which the stream checks first differs: a replicated
// stream answers a copy of a message it stored as a duplicate (the ack of
// the stored message, Duplicate set), a standalone server checks the
// expected revision first and refuses the copy with a conflict ([IsConflict]).
// id names one write: a writer that writes a key again, even with the
// same value and revision, gives the new write a new id.
func PutAtMsgID(bucket, key string, value []byte, rev uint64, id string) *nats.Msg {
	return &nats.Msg{
		Subject: "$KV." + bucket + "." + key,
		Header:  nats.Header{expectedLastSubjSeq: []string{strconv.FormatUint(rev, 10)}, jetstream.MsgIDHeader: []string{id}},
		Data:    value,
	}
}

// PutAt writes value at key of the bucket followed by c only when the key's
// revision is still the one the copy holds (created when the copy holds
// none), unless the copy already holds exactly these bytes; the write is
// taken into the copy at once. It reports whether it wrote. When another
// writer changed the key first it writes nothing and returns an error for
// which [IsConflict] reports true. A copy that keeps revisions only
// (Options.RevisionsOnly) holds no bytes to compare with: the value is
// written every time (still at the copy's revision).
func PutAt(ctx context.Context, c *Copy, key string, value []byte) (bool, error) {
	old, ok := c.Get(key)
	if ok && !c.opts.RevisionsOnly && bytes.Equal(old.Value, value) {
		return false, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var rev uint64
	var err error
	if ok {
		rev, err = c.kv.Update(ctx, key, value, old.Revision)
	} else {
		rev, err = c.kv.Create(ctx, key, value)
	}
	if err != nil {
		return false, fmt.Errorf("bus: put %s %s: %w", c.bucket, key, err)
	}
	c.Took(key, value, rev)
	return true, nil
}

// DeleteAtCopy deletes key of the bucket followed by c only when the key's
// revision is still the one the copy holds, unless the copy does not hold
// it; the delete is taken into the copy at once. It reports whether it
// deleted. When another writer changed the key first it deletes nothing and
// returns an error for which [IsConflict] reports true.
func DeleteAtCopy(ctx context.Context, c *Copy, key string) (bool, error) {
	old, ok := c.Get(key)
	if !ok {
		return false, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	rev, err := DeleteAt(ctx, c.js, c.bucket, key, old.Revision)
	if err != nil {
		return false, err
	}
	c.Took(key, nil, rev)
	return true, nil
}

// ErrBucketNotMade is wrapped by the error of [AwaitBucket] when the bucket
// is still missing after its wait: the seat makes the mesh's buckets, and
// none made it meanwhile.
var ErrBucketNotMade = errors.New("the bucket does not exist: the seat makes the mesh's buckets (start serve, or up)")

// AwaitBucket returns the bucket named name once it exists, looking again
// with backoff (100 ms growing to 2 s) for at most wait: a user that may
// not make buckets (an operator: the seat alone makes them) waits for the
// seat, and never tries (the server's refusal would end the command). It
// returns an error wrapping [ErrBucketNotMade] when wait ends first, or
// ctx's error.
func AwaitBucket(ctx context.Context, js jetstream.JetStream, name string, wait time.Duration) (jetstream.KeyValue, error) {
	deadline := time.Now().Add(wait)
	delay := 100 * time.Millisecond
	for {
		kv, err := js.KeyValue(ctx, name)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("bus: bucket %s: %w", name, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bus: bucket %s: %w", name, ErrBucketNotMade)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: bucket %s: %w", name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}
