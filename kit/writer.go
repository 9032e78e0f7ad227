package kit

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// writer writes the kit's entries into its bound bucket without making the
// kit's workers wait for the bus: a worker queues a key's new entry and goes
// on, and one goroutine publishes the queued entries together (asynchronous
// publishes, at most window of them outstanding) and gathers their acks.
//
// For one key writes reach the bus in the order they were queued: a key
// has at most one write in flight, and a key queued again while its
// earlier write is queued (not yet published) has that write replaced by
// the newer one, so only its latest entry is written. The bound copy is held
// from before a batch's first publish until every write of the batch is
// taken into it ([bus.Copy.Hold], [bus.Copy.Took]): the echo of the kit's
// own write never reaches the kit as a change.
type writer struct {
	js      jetstream.JetStream
	copy    *bus.Copy
	window  int
	timeout time.Duration
	// done is told of every write that was not replaced by a newer one
	// of its key: err is nil once it is on the bus and in the copy.
	done func(w *write, err error)

	mu     sync.Mutex
	queued map[string]*write // per key, its latest write not yet published
	order  []string          // queued keys, in the order they were first queued
	flying map[string]*write // per key, its write published and not yet acknowledged
	// telling counts the batches whose writes are acknowledged (or failed)
	// and out of flying, while done is still told of them: a write that
	// failed has its key tried again only once done has taken it (see
	// busy).
	telling int
	wake    chan struct{}
}

// write is one entry write (value nil: a delete) and what it was made
// from.
type write struct {
	key    string
	value  []byte
	inputs string        // what a provide was made from ("retire" for a retire)
	wait   chan struct{} // closed once done, for a caller that waits (a delete)
	err    error         // set before wait is closed
	ack    jetstream.PubAckFuture
}

// errReplaced is the error of a waited-for write that a newer write of its
// key replaced before it was published.
var errReplaced = errors.New("kit: replaced by a newer write of the key before it was published")

// errAckTimeout is the error of a write whose ack did not come in time.
var errAckTimeout = errors.New("kit: the bus did not acknowledge the write in time")

func newWriter(js jetstream.JetStream, c *bus.Copy, window int, done func(*write, error)) *writer {
	return &writer{
		js: js, copy: c, window: window, timeout: 10 * time.Second, done: done,
		queued: map[string]*write{}, flying: map[string]*write{}, wake: make(chan struct{}, 1),
	}
}

// entry returns the entry key will hold once every write queued or in
// flight is done (the copy's value when there is none), and whether it will
// hold one.
func (w *writer) entry(key string) ([]byte, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.entryLocked(key)
}

func (w *writer) entryLocked(key string) ([]byte, bool) {
	if q, ok := w.queued[key]; ok {
		return q.value, q.value != nil
	}
	if f, ok := w.flying[key]; ok {
		return f.value, f.value != nil
	}
	it, ok := w.copy.Get(key)
	return it.Value, ok
}

// put queues value as key's entry unless key will hold exactly these bytes
// already; it reports whether it queued.
func (w *writer) put(key string, value []byte, inputs string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.entryLocked(key); ok && bytes.Equal(cur, value) {
		return false
	}
	w.queue(&write{key: key, value: value, inputs: inputs})
	return true
}

// del queues the delete of key's entry and returns the write to wait for
// (its wait channel), or nil when key will hold no entry anyway.
func (w *writer) del(key string) *write {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.entryLocked(key); !ok {
		return nil
	}
	d := &write{key: key, inputs: "retire", wait: make(chan struct{})}
	w.queue(d)
	return d
}

// queue adds wr, replacing a queued write of its key. w.mu is held.
func (w *writer) queue(wr *write) {
	if old, ok := w.queued[wr.key]; ok {
		if old.wait != nil {
			old.err = errReplaced
			close(old.wait)
		}
	} else {
		w.order = append(w.order, wr.key)
	}
	w.queued[wr.key] = wr
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes queued entries until stop is closed, then writes what is
// queued still and returns; ctx bounds the writes (a write not
// acknowledged when it is done fails).
func (w *writer) run(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			for w.flush(ctx) {
			}
			return
		case <-w.wake:
		}
		for w.flush(ctx) {
		}
	}
}

// flush publishes up to window queued writes (one per key), waits for
// their acks, takes them into the copy and tells done of each write not
// replaced meanwhile. A key queued again while its write is in flight goes
// in the next batch, which starts once this one is done. It reports whether
// writes remain queued.
func (w *writer) flush(ctx context.Context) bool {
	w.mu.Lock()
	var batch []*write
	rest := w.order[:0]
	for _, key := range w.order {
		// Batches run one after the other, so no key is in flight now:
		// every queued key may go, up to the window.
		if len(batch) == w.window {
			rest = append(rest, key)
			continue
		}
		wr := w.queued[key]
		delete(w.queued, key)
		w.flying[key] = wr
		batch = append(batch, wr)
	}
	w.order = rest
	w.mu.Unlock()
	if len(batch) == 0 {
		return false
	}

	release := w.copy.Hold()
	bucket := w.copy.Bucket()
	for _, wr := range batch {
		var m *nats.Msg
		if wr.value == nil {
			m = bus.DeleteMsg(bucket, wr.key)
		} else {
			m = &nats.Msg{Subject: "$KV." + bucket + "." + wr.key, Data: wr.value}
		}
		wr.ack, wr.err = w.js.PublishMsgAsync(m)
	}
	actx, cancel := context.WithTimeout(ctx, w.timeout)
	for _, wr := range batch {
		if wr.ack == nil {
			continue
		}
		select {
		case ack := <-wr.ack.Ok():
			w.copy.Took(wr.key, wr.value, ack.Sequence)
		case err := <-wr.ack.Err():
			wr.err = err
		case <-actx.Done():
			wr.err = errAckTimeout
			if ctx.Err() != nil {
				wr.err = ctx.Err()
			}
		}
	}
	cancel()
	release()

	w.mu.Lock()
	replaced := make([]bool, len(batch))
	for i, wr := range batch {
		delete(w.flying, wr.key)
		_, replaced[i] = w.queued[wr.key]
	}
	more := len(w.order) > 0
	w.telling++
	w.mu.Unlock()
	for i, wr := range batch {
		if wr.wait != nil {
			close(wr.wait)
			continue
		}
		if !replaced[i] && ctx.Err() == nil {
			w.done(wr, wr.err)
		}
	}
	w.mu.Lock()
	w.telling--
	w.mu.Unlock()
	return more
}

// busy reports whether a write is queued, in flight, or done but its
// outcome not yet told to done: until then a write that failed has not
// had its key tried again, and the writer may still be asked to write it.
func (w *writer) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queued) > 0 || len(w.flying) > 0 || w.telling > 0
}
