package seat_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// harness runs a real embedded server, a seat on its own connection, and an
// operator's connection for the test's own reads and writes.
type harness struct {
	t    *testing.T
	ctx  context.Context
	srv  *bus.Server
	opts options
	nc   *nats.Conn
	js   jetstream.JetStream
	seat *seat.Seat
	stop func()

	mu        sync.Mutex
	results   []*compose.Result
	writeErrs []string // "<bucket> <key>: <error>" of every write the bus refused
}

func homelab(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../examples/homelab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// start applies the mesh file text (if any) and starts the seat.
func start(t *testing.T, file []byte) *harness {
	t.Helper()
	return startWith(t, file, options{})
}

// options of a harness.
type options struct {
	router bool          // run the ask router on its own connection
	askTTL time.Duration // the seat's AskTTL
	window int           // the seat's window of puts in flight; 0 for its own
	log    *slog.Logger  // the seat's log; nil for its own
}

func startWith(t *testing.T, file []byte, o options) *harness {
	t.Helper()
	s := bustest.Server(t)
	h := &harness{t: t, ctx: bustest.Context(t), srv: s, opts: o}
	h.nc, h.js = bustest.Connect(t, s, "operator")
	if o.router {
		rnc, rjs := bustest.Connect(t, s, "mesh-asks")
		if _, err := asks.Start(h.ctx, rnc, rjs, nil); err != nil {
			t.Fatal(err)
		}
	}
	if file != nil {
		h.apply(file)
	}
	h.startSeat()
	return h
}

// startSeat starts a seat on its own connection and waits until it
// settles; stopSeat stops it.
func (h *harness) startSeat() {
	h.t.Helper()
	_, sjs := bustest.Connect(h.t, h.srv, "seat")
	h.seat = seat.New(sjs, seat.Config{AskTTL: h.opts.askTTL, Log: h.opts.log, OnResult: func(r *compose.Result) {
		h.mu.Lock()
		h.results = append(h.results, r)
		h.mu.Unlock()
	}, OnWriteError: func(bucket, key string, err error) {
		h.mu.Lock()
		h.writeErrs = append(h.writeErrs, bucket+" "+key+": "+err.Error())
		h.mu.Unlock()
	}})
	if h.opts.window > 0 {
		h.seat.SetWindow(h.opts.window)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.seat.Run(ctx) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("seat.Run = %v", err)
		}
	}
	h.t.Cleanup(func() {
		if h.stop != nil {
			h.stop()
			h.stop = nil
		}
	})
	h.settle()
}

func (h *harness) stopSeat() {
	h.stop()
	h.stop = nil
}

// problems returns every problem the seat's results said so far.
func (h *harness) problems() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.results {
		out = append(out, r.Problems...)
	}
	return out
}

func (h *harness) apply(file []byte) meshfile.Stats {
	h.t.Helper()
	f, err := meshfile.Parse("test.yaml", file)
	if err != nil {
		h.t.Fatalf("parse: %v", err)
	}
	st, err := meshfile.Apply(h.ctx, h.js, f, time.Now())
	if err != nil {
		h.t.Fatalf("apply: %v", err)
	}
	if h.seat != nil {
		h.settle()
	}
	return st
}

// settle waits until the seat has taken every write made so far and is
// idle.
func (h *harness) settle() {
	h.t.Helper()
	marks := seat.Marks(h.ctx, h.js)
	bustest.WaitFor(h.t, 0, "the seat to settle", func() bool { return h.seat.Settled(marks) })
}

func (h *harness) kv(bucket string) jetstream.KeyValue {
	h.t.Helper()
	kv, err := bus.Bucket(h.ctx, h.js, bucket, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return kv
}

func (h *harness) put(bucket, key string, v any) {
	h.t.Helper()
	var b []byte
	switch v := v.(type) {
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	if _, err := h.kv(bucket).Put(h.ctx, key, b); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) del(bucket, key string) {
	h.t.Helper()
	if err := h.kv(bucket).Delete(h.ctx, key); err != nil {
		h.t.Fatal(err)
	}
}

// get decodes the value at key, reporting whether there is one that
// decodes.
func (h *harness) get(bucket, key string, v any) bool {
	h.t.Helper()
	e, err := h.kv(bucket).Get(h.ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false
	}
	if err != nil {
		h.t.Fatalf("get %s %s: %v", bucket, key, err)
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return false // not (yet) a value of its kind: callers wait or fail on it
	}
	return true
}

func (h *harness) provision(key string) (mesh.Provision, bool) {
	h.t.Helper()
	var p mesh.Provision
	ok := h.get(mesh.ProvisionsBucket, key, &p)
	return p, ok
}

func (h *harness) keys(bucket, prefix string) []string {
	h.t.Helper()
	lister, err := h.kv(bucket).ListKeys(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for k := range lister.Keys() {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// waitState waits until key has state and a why containing gist.
// credentialsProvided writes mesh-vault's provided entry for each
// credential key and waits until the seat says each provided.
func (h *harness) credentialsProvided(keys ...string) {
	h.t.Helper()
	for i, k := range keys {
		h.put(mesh.BoundBucket(mesh.VaultModule), k, mesh.Entry{State: mesh.Provided, VaultName: k, Generation: int64(i + 1)})
	}
	for _, k := range keys {
		h.waitState(k, mesh.Provided, "")
	}
}

func (h *harness) waitState(key string, state mesh.State, gist string) mesh.Provision {
	h.t.Helper()
	var p mesh.Provision
	bustest.WaitFor(h.t, 0, key+" to be "+string(state)+" ("+gist+")", func() bool {
		var ok bool
		p, ok = h.provision(key)
		return ok && p.State == state && strings.Contains(p.Why, gist)
	})
	return p
}

func (h *harness) lastSeq(bucket string) uint64 {
	h.t.Helper()
	str, err := h.js.Stream(h.ctx, "KV_"+bucket)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := str.Info(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.LastSeq
}
