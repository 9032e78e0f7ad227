package auth_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestAClientWritesItsExactKeysOnly is hole 6 of issue 18 (no quotas), for
// the buckets several parties write beside each other: a node's client
// writing a key of its node that no module placed on it has (any number of
// them would fill the bucket) is refused by the server; the allowed
// neighbour, its own module's applied key and its contribution, is stored.
func TestAClientWritesItsExactKeysOnly(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	for _, r := range []row{
		{"applied key of no module", act{as: "client-n1", do: access.Write, target: mesh.AppliedBucket, key: "n1.x1"},
			act{as: "client-n1", do: access.Write, target: mesh.AppliedBucket, key: "n1.m"}},
		{"applied key of a module placed elsewhere", act{as: "client-n1", do: access.Write, target: mesh.AppliedBucket, key: "n1.n"},
			act{as: "client-n2", do: access.Write, target: mesh.AppliedBucket, key: "n2.n"}},
		{"applied key under a module", act{as: "client-n1", do: access.Write, target: mesh.AppliedBucket, key: "n1.m.x"},
			act{as: "client-n1", do: access.Write, target: mesh.AppliedBucket, key: "n1.a"}},
		{"collection no manifest contributes to", act{as: "client-n1", do: access.Write, target: mesh.CollectBucket, key: "n1.shell.m"},
			act{as: "client-n1", do: access.Write, target: mesh.CollectBucket, key: "n1.environment.m"}},
		{"contribution of a module that contributes none", act{as: "client-n1", do: access.Write, target: mesh.CollectBucket, key: "n1.environment.a"},
			act{as: "client-n1", do: access.Write, target: mesh.CollectBucket, key: "n1.environment.m"}},
		{"contribution of a module placed elsewhere", act{as: "client-n2", do: access.Write, target: mesh.CollectBucket, key: "n2.environment.m"},
			act{as: "client-n1", do: access.Write, target: mesh.CollectBucket, key: "n1.environment.m"}},
		{"lease of another key", act{as: "client-n1", do: access.Write, target: mesh.ClientsBucket, key: "n1x"},
			act{as: "client-n1", do: access.Write, target: mesh.ClientsBucket, key: "n1"}},
	} {
		t.Run(r.name, func(t *testing.T) {
			if got := f.try(t, r.forbidden); got.refusal == "" {
				t.Errorf("%s: %+v; want the server's permissions violation", r.forbidden, got)
			}
			if got := f.try(t, r.allowed); !got.done {
				t.Errorf("allowed neighbour %s: %+v; want it done", r.allowed, got)
			}
		})
	}
}

// TestAPartyFillingWhatItMayHarmsNoOther is the rest of hole 6: a party
// fills all it may. A node's client writes each of its keys of applied,
// collect and its lease again and again at the value bound: the bucket
// keeps one value per key, so the client holds at most its keys times the
// bound there, and a value over the bound is refused by the server. A
// provider fills its own bucket to the bucket's bound: its next write is
// refused. Meanwhile another client's applied key, another provider's
// entry and the seat's lease are still written.
func TestAPartyFillingWhatItMayHarmsNoOther(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n1 := f.conns["client-n1"]
	big := func(bucket string) []byte {
		_, maxValue := access.BucketLimits(bucket)
		return make([]byte, maxValue)
	}
	var keys int
	for _, r := range f.parties["client-n1"].Rules() {
		if r.Act != access.Write {
			continue
		}
		if strings.ContainsAny(r.Keys, "*>") {
			t.Fatalf("client-n1 may write %s %s: a pattern, not one key", r.Target, r.Keys)
		}
		keys++
		subject := "$KV." + r.Target + "." + r.Keys
		for range 8 {
			if _, err := n1.js.Publish(ctx, subject, big(r.Target)); err != nil {
				t.Fatalf("client-n1 puts %s at the value bound: %v", subject, err)
			}
		}
		over := append(big(r.Target), 0)
		_, err := n1.js.Publish(ctx, subject, over)
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Description, "maximum") {
			t.Errorf("client-n1 puts %d bytes at %s: %v; want the server's refusal (over the bound)", len(over), subject, err)
		}
	}
	if keys != 5 {
		t.Errorf("client-n1 writes %d keys; want 5 (applied n1.mesh-vault, n1.a, n1.m; collect n1.environment.m; its lease)", keys)
	}
	for _, b := range []string{mesh.AppliedBucket, mesh.CollectBucket, mesh.ClientsBucket} {
		// Read as the seat: a client may not ask a stream's info (it
		// would list other nodes' keys).
		st, err := f.conns[access.SeatUser].js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		state := st.CachedInfo().State
		n := 0
		for _, r := range f.parties["client-n1"].Rules() {
			if r.Act == access.Write && r.Target == b {
				n++
			}
		}
		_, maxValue := access.BucketLimits(b)
		if bound := uint64(n) * uint64(maxValue+access.MaxKeyOverhead); state.Msgs != uint64(n) || state.Bytes > bound {
			t.Errorf("%s holds %d values, %d bytes after client-n1's flood; want %d values, at most %d bytes", b, state.Msgs, state.Bytes, n, bound)
		}
	}

	// Provider a fills its own bucket.
	a := f.conns["a"]
	value := big("a_bound")
	var refused error
	for i := 0; refused == nil; i++ {
		if i > access.MaxPartyBucket/len(value)+16 {
			t.Fatalf("a wrote %d values of %d bytes to a_bound, bound %d: none refused", i, len(value), access.MaxPartyBucket)
		}
		_, refused = a.js.Publish(ctx, fmt.Sprintf("$KV.a_bound.n1.m.k%d", i), value)
	}
	var apiErr *jetstream.APIError
	if !errors.As(refused, &apiErr) || !strings.Contains(apiErr.Description, "maximum bytes") {
		t.Errorf("a's write to its full bucket: %v; want the server's refusal (maximum bytes)", refused)
	}
	// Others are unharmed.
	n2 := f.conns["client-n2"]
	if _, err := n2.js.Publish(ctx, "$KV."+mesh.AppliedBucket+".n2.n", []byte(`{"fp":"0a0a05"}`)); err != nil {
		t.Errorf("client-n2 writes n2.n after the floods: %v; want it stored", err)
	}
	if _, err := f.conns["b"].js.Publish(ctx, "$KV.b_bound.n2.n.thing", []byte(`{}`)); err != nil {
		t.Errorf("b writes its entry after a filled a_bound: %v; want it stored", err)
	}
	seat := f.conns[access.SeatUser]
	if _, err := seat.js.Publish(ctx, "$KV."+mesh.SeatBucket+"."+mesh.HolderKey, []byte(`{"holder":"seat-1"}`)); err != nil {
		t.Errorf("the seat renews its lease after the floods: %v; want it stored", err)
	}
}

// TestExpectedSubjectHeaderTellsRevisionsOnly pins what docs/trust.md says
// is not enforced: a client's conditional put on its own key with the
// header Nats-Expected-Last-Subject-Sequence-Subject naming another node's
// key (or a pattern of them) is refused with that key's revision, which
// it may not read; nothing is stored, the other key is unchanged. Should
// nats-server refuse the header one day, this test says so.
func TestExpectedSubjectHeaderTellsRevisionsOnly(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ack, err := f.conns["client-n2"].js.Publish(ctx, "$KV."+mesh.AppliedBucket+".n2.n", []byte(`{"fp":"0a0a05"}`))
	if err != nil {
		t.Fatal(err)
	}
	n1 := f.conns["client-n1"]
	for _, other := range []string{"n2.n", "n2.>"} {
		m := nats.NewMsg("$KV." + mesh.AppliedBucket + ".n1.m")
		m.Data = []byte(`{}`)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", "$KV."+mesh.AppliedBucket+"."+other)
		_, err := n1.js.PublishMsg(ctx, m)
		var apiErr *jetstream.APIError
		want := fmt.Sprintf("wrong last sequence: %d", ack.Sequence)
		if !errors.As(err, &apiErr) || apiErr.Description != want {
			t.Errorf("client-n1's put naming %s: %v; want the refusal %q (the revision it tells)", other, err, want)
		}
	}
	kv, err := f.conns["operator"].js.KeyValue(ctx, mesh.AppliedBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "n2.n"); err != nil || e.Revision() != ack.Sequence {
		t.Errorf("n2.n after client-n1's puts: %v; want it unchanged at %d", err, ack.Sequence)
	}
	if _, err := kv.Get(ctx, "n1.m"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("n1.m after the refused puts: %v; want nothing stored", err)
	}
}

// TestTheSeatConformsAnOldBucketUnderItsUser checks that the seat's user
// may bring a bucket made with an older configuration (history 5, rollups
// allowed, no value bound, another size bound) to the current one, a
// provider's bucket among them, and that a client's rollup is then
// refused; another party's update is refused by the server.
func TestTheSeatConformsAnOldBucketUnderItsUser(t *testing.T) {
	t.Parallel()
	f := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seat := f.conns[access.SeatUser]
	// applied made with the older 256 MiB bound, a_bound with 1 GiB.
	for b, old := range map[string]int64{mesh.AppliedBucket: 256 << 20, "a_bound": access.MaxStreamBytes} {
		if _, err := seat.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 5, MaxBytes: old}); err != nil {
			t.Fatalf("the seat makes %s with the old configuration: %v", b, err)
		}
	}
	op := f.conns["operator"]
	from := len(op.errors())
	octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := bus.Conform(octx, op.js, mesh.AppliedBucket, slog.New(slog.DiscardHandler))
	ocancel()
	if err == nil {
		t.Errorf("an operator conformed %s; want the server's refusal", mesh.AppliedBucket)
	} else if v := op.violation(from, "Publish", func(s string) bool { return strings.HasPrefix(s, "$JS.API.STREAM.UPDATE.") }); v == "" {
		t.Errorf("an operator conforming %s: %v; want the server's permissions violation", mesh.AppliedBucket, err)
	}
	for _, b := range []string{mesh.AppliedBucket, "a_bound"} {
		changed, err := bus.Conform(ctx, seat.js, b, slog.New(slog.DiscardHandler))
		if err != nil || len(changed) != 6 {
			t.Fatalf("the seat conforms %s: %v, %v; want max_bytes, max_msg_size, history, rollups, the duplicate window and the consumer limits changed", b, changed, err)
		}
	}
	m := nats.NewMsg("$KV." + mesh.AppliedBucket + ".n1.m")
	m.Data = []byte(`{}`)
	m.Header.Set("Nats-Rollup", "all")
	_, err = f.conns["client-n1"].js.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Description, "rollup") {
		t.Errorf("client-n1's rollup on the conformed %s: %v; want the stream's refusal", mesh.AppliedBucket, err)
	}
}
