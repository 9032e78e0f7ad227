package meshfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// Counts says how many keys an apply wrote, found unchanged and removed.
type Counts struct {
	Written, Unchanged, Removed int
}

// Stats is what [Apply] did: the counts over every bucket, the counts per
// bucket, and the keys it left alone because they are out of their
// bucket's shape.
type Stats struct {
	Counts
	Buckets map[string]Counts
	Odd     []Odd
}

func (s *Stats) add(bucket string, c Counts) {
	b := s.Buckets[bucket]
	b.Written += c.Written
	b.Unchanged += c.Unchanged
	b.Removed += c.Removed
	s.Buckets[bucket] = b
	s.Written += c.Written
	s.Unchanged += c.Unchanged
	s.Removed += c.Removed
}

// Apply writes the file f into the buckets of [Buckets] through js,
// creating a bucket that is missing with the replicas of js's connection
// ([bus.Dial.Replicas]: one unless it says otherwise; a bucket that exists
// is used as it is). It reads what each
// bucket holds now, computes [File.Diff] with now, and writes only the
// keys whose bytes differ, manifests first and placement last (provider
// nodes first, see [Diff]); then it
// removes the placement, want and have keys the file no longer has
// (placement first). Applying the same file twice writes nothing the
// second time. Keys out of their bucket's shape are left alone and listed
// in Stats.Odd.
//
// Before it writes anything, Apply checks every value it is about to write
// against the max payload of the server js is connected to
// ([DefaultMaxPayload] when the connection does not say): a value too large
// refuses the whole file with a [*Errors] naming each such value at its
// line, and nothing is written.
//
// Apply is an operator's one-shot command: it reads every key of the six
// buckets once (each bucket's watch stops once its values are read, so
// that a write another writer makes meanwhile is not seen). It returns the
// first write that fails, wrapped, with the counts of what it did until
// then; cancelling ctx stops it between writes.
//
// A put the bus does not acknowledge within applyAckTimeout has its
// bucket's store checked ([bus.Mend]): when the server had lost it (a
// bucket made again while the server still removed the stream deleted
// under its name, see [bus.ErrStoreLost]), the bucket is made again and
// the file applied once more, from what the buckets hold then.
func Apply(ctx context.Context, js jetstream.JetStream, f *File, now time.Time) (Stats, error) {
	stats, err := apply(ctx, js, f, now)
	var lost *noAck
	if !errors.As(err, &lost) {
		return stats, err
	}
	again, merr := bus.Mend(ctx, js, lost.bucket)
	if merr != nil {
		return stats, fmt.Errorf("%w (its bucket's store could not be checked: %w)", err, merr)
	}
	if !again {
		return stats, err
	}
	return apply(ctx, js, f, now)
}

// noAck is the error of a put the bus did not acknowledge within
// applyAckTimeout.
type noAck struct{ bucket, key string }

func (e *noAck) Error() string {
	return fmt.Sprintf("bus: put %s %s: no acknowledgement within %v", e.bucket, e.key, applyAckTimeout)
}

// apply is one [Apply], without the check of a bucket whose put was not
// acknowledged.
func apply(ctx context.Context, js jetstream.JetStream, f *File, now time.Time) (Stats, error) {
	stats := Stats{Buckets: map[string]Counts{}}
	limit := maxPayload(js)
	if errs := f.oversizeFor(limit); len(errs) > 0 {
		return stats, &Errors{File: f.Name, List: errs}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the copies' watches
	copies := map[string]*bus.Copy{}
	stops := map[string]context.CancelFunc{}
	current := map[string]map[string][]byte{}
	for _, bucket := range Buckets {
		if _, err := bus.Bucket(ctx, js, bucket, 0); err != nil {
			return stats, fmt.Errorf("apply %s: %w", f.Name, err)
		}
		watch, stop := context.WithCancel(ctx)
		copies[bucket], stops[bucket] = bus.Follow(watch, js, bucket, bus.Options{}), stop
	}
	for _, bucket := range Buckets {
		c := copies[bucket]
		select {
		case <-c.Ready():
		case <-ctx.Done():
			return stats, fmt.Errorf("apply %s: read %s: %w", f.Name, bucket, ctx.Err())
		}
		// Read once: the watch stops here, so that the echo of every
		// write below is not delivered to it (a cold start writes tens of
		// thousands of keys); the copy keeps what it read and takes each
		// write of Apply's own at its ack.
		stops[bucket]()
		held := map[string][]byte{}
		c.Range(func(key string, it bus.Item) bool {
			held[key] = it.Value
			return true
		})
		current[bucket] = held
	}

	d := f.Diff(current, now)
	if over := f.overPuts(d, limit); len(over) > 0 {
		return stats, &Errors{File: f.Name, List: over}
	}
	stats.Odd = d.Odd
	for bucket, n := range d.Unchanged {
		stats.add(bucket, Counts{Unchanged: n})
	}
	if err := putAll(ctx, js, copies, d.Puts, &stats); err != nil {
		return stats, fmt.Errorf("apply %s: %w", f.Name, err)
	}
	for _, rm := range d.Removes {
		removed, err := bus.DeleteIfPresent(ctx, copies[rm.Bucket], rm.Key)
		if err != nil {
			return stats, fmt.Errorf("apply %s: %w", f.Name, err)
		}
		if removed {
			stats.add(rm.Bucket, Counts{Removed: 1})
		}
	}
	return stats, nil
}

// Write writes the diff d of the file f (its [File.Diff] or
// [File.DiffOf] over what the buckets held when the caller read them)
// through js: the same checks and order as [Apply] (every value against
// the server's max payload first, refusing the whole file with a
// [*Errors]; manifests first, placement last; then the removes, placement
// first), each put published and its ack awaited, each remove a delete
// (a key deleted meanwhile is deleted again: harmless). A bucket that is
// missing is made with the replicas of js's connection. Unlike Apply, it
// reads nothing: the caller read only what its diff needed. It returns
// the first write that fails, wrapped, with the counts of what it did
// until then (d's unchanged counted unchanged).
func Write(ctx context.Context, js jetstream.JetStream, f *File, d *Diff) (Stats, error) {
	stats := Stats{Buckets: map[string]Counts{}}
	limit := maxPayload(js)
	if errs := f.oversizeFor(limit); len(errs) > 0 {
		return stats, &Errors{File: f.Name, List: errs}
	}
	if over := f.overPuts(d, limit); len(over) > 0 {
		return stats, &Errors{File: f.Name, List: over}
	}
	kvs := map[string]jetstream.KeyValue{}
	for _, bucket := range Buckets {
		kv, err := bus.Bucket(ctx, js, bucket, 0)
		if err != nil {
			return stats, fmt.Errorf("apply %s: %w", f.Name, err)
		}
		kvs[bucket] = kv
	}
	stats.Odd = d.Odd
	for bucket, n := range d.Unchanged {
		stats.add(bucket, Counts{Unchanged: n})
	}
	if err := putAll(ctx, js, nil, d.Puts, &stats); err != nil {
		return stats, fmt.Errorf("apply %s: %w", f.Name, err)
	}
	for _, rm := range d.Removes {
		if err := kvs[rm.Bucket].Delete(ctx, rm.Key); err != nil {
			return stats, fmt.Errorf("apply %s: bus: delete %s %s: %w", f.Name, rm.Bucket, rm.Key, err)
		}
		stats.add(rm.Bucket, Counts{Removed: 1})
	}
	return stats, nil
}

// oversizeFor is [File.Oversize] of limit, which [Parse] has checked
// already for [DefaultMaxPayload] and any larger limit: every value of a
// file it returned is at most that large.
func (f *File) oversizeFor(limit int) []Error {
	if limit >= DefaultMaxPayload {
		return nil
	}
	return f.Oversize(limit)
}

// overPuts lists, by line, each put of d whose value is over limit bytes.
func (f *File) overPuts(d *Diff, limit int) []Error {
	var over []Error
	for _, put := range d.Puts {
		if len(put.Value) > limit {
			over = append(over, Error{Line: f.lines[put.Bucket][put.Key], Msg: fmt.Sprintf(
				"the value of %s in %s is %d bytes, over the bus's max payload of %d bytes", put.Key, put.Bucket, len(put.Value), limit)})
		}
	}
	sortErrors(over)
	return over
}

// maxPayload returns the max payload of the server js is connected to, in
// bytes, or [DefaultMaxPayload] when the connection does not say.
func maxPayload(js jetstream.JetStream) int {
	if nc := js.Conn(); nc != nil {
		if n := nc.MaxPayload(); n > 0 {
			return int(n)
		}
	}
	return DefaultMaxPayload
}

// applyWindow is how many puts Apply publishes before it waits for their
// acks; applyAckTimeout is how long it waits for one.
const (
	applyWindow     = 1000
	applyAckTimeout = 10 * time.Second
)

// putAll writes each of puts whose bytes differ from what its bucket's copy
// holds: published without waiting for the acks (up to applyWindow
// unacknowledged), every ack of one bucket's puts awaited before the next
// bucket's first put is published, so that the buckets are written in the
// order of puts (manifests before placement) and the keys of one bucket in
// their order (one stream stores one connection's publishes in order).
// Each write is taken into its copy once acknowledged and counted in
// stats (with no copies, every put is written and only counted). It returns the first write the bus refused or did not
// acknowledge within applyAckTimeout, wrapped, or ctx's error.
func putAll(ctx context.Context, js jetstream.JetStream, copies map[string]*bus.Copy, puts []Put, stats *Stats) error {
	type flying struct {
		put Put
		ack jetstream.PubAckFuture
	}
	var batch []flying
	land := func() error {
		defer func() { batch = batch[:0] }()
		for _, f := range batch {
			timer := time.NewTimer(applyAckTimeout)
			select {
			case a := <-f.ack.Ok():
				timer.Stop()
				if copies != nil {
					copies[f.put.Bucket].Took(f.put.Key, f.put.Value, a.Sequence)
				}
				stats.add(f.put.Bucket, Counts{Written: 1})
			case err := <-f.ack.Err():
				timer.Stop()
				return fmt.Errorf("bus: put %s %s: %w", f.put.Bucket, f.put.Key, err)
			case <-timer.C:
				return &noAck{bucket: f.put.Bucket, key: f.put.Key}
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			}
		}
		return nil
	}
	for i, put := range puts {
		if len(batch) >= applyWindow || i > 0 && put.Bucket != puts[i-1].Bucket {
			if err := land(); err != nil {
				return err
			}
		}
		if copies != nil {
			if old, ok := copies[put.Bucket].Get(put.Key); ok && bytes.Equal(old.Value, put.Value) {
				stats.add(put.Bucket, Counts{Unchanged: 1})
				continue
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		ack, err := js.PublishAsync("$KV."+put.Bucket+"."+put.Key, put.Value)
		if err != nil {
			return fmt.Errorf("bus: put %s %s: %w", put.Bucket, put.Key, err)
		}
		batch = append(batch, flying{put: put, ack: ack})
	}
	return land()
}
