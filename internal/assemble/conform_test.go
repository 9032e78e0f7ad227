package assemble_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A bus whose buckets were made before the bounds (no max_bytes, rollups
// allowed, no value bound, a history of 5): the seat, when it starts,
// updates each to the current configuration and says once what changed;
// a rollup on the applied bucket is then refused and a key written before
// is kept, a value over the bound is refused, and a seat started again
// says nothing.
func TestSeatConformsBucketsMadeBeforeTheBounds(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "old")
	old := []string{mesh.AppliedBucket, mesh.PlansBucket, mesh.ClientsBucket, mesh.SeatBucket, "postgres_bound"}
	for _, b := range old {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 5}); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(ctx, mesh.AppliedBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`{"fp":"1"}`, `{"fp":"2"}`} {
		if _, err := kv.Put(ctx, "ace.gitea", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "ace.other", []byte(`{"fp":"kept"}`)); err != nil {
		t.Fatal(err)
	}

	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, nil))
	start := func() {
		t.Helper()
		sctx, cancel := context.WithCancel(ctx)
		a := &assemble.Assembly{Dial: assemble.Shared(s.URL(), "", log), Log: log}
		if _, err := a.StartSeat(sctx, assemble.SeatConfig{ID: "seat-1"}); err != nil {
			t.Fatal(err)
		}
		cancel()
		a.Wait()
	}
	start()
	updated := "bus: a bucket made with an older configuration is updated to the current one"
	for _, b := range old {
		st, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		sc := st.CachedInfo().Config
		maxBytes, maxValue := access.BucketLimits(b)
		// The buckets the seat alone writes hold its puts' ids for the
		// span of their tries (package seat), the others' for the least.
		window := bus.DuplicateWindowOf(b)
		if sc.MaxBytes != maxBytes || sc.MaxMsgSize != maxValue || sc.MaxMsgsPerSubject != 1 || sc.AllowRollup ||
			sc.Duplicates != window || sc.ConsumerLimits.InactiveThreshold != access.ConsumerInactive {
			t.Errorf("%s after the seat started: max_bytes %d, max_msg_size %d, history %d, rollups %v, duplicate window %s, consumers' inactive threshold %s; want %d, %d, 1, refused, %s, %s",
				b, sc.MaxBytes, sc.MaxMsgSize, sc.MaxMsgsPerSubject, sc.AllowRollup, sc.Duplicates, sc.ConsumerLimits.InactiveThreshold,
				maxBytes, maxValue, window, access.ConsumerInactive)
		}
		if n := said.count(updated, "bucket="+b, "max_bytes -1 -> ", "allow_rollup_hdrs true -> false", "max_msgs_per_subject 5 -> 1",
			"duplicate_window 2m0s -> "+window.String(), "consumer_limits inactive_threshold 0s -> inactive_threshold 30s"); n != 1 {
			t.Errorf("the update of %s was said %d times; want once, naming each change:\n%s", b, n, said.b.String())
		}
	}
	// A rollup is refused now; the other key stays.
	for _, rollup := range []string{"all", "sub"} {
		m := nats.NewMsg("$KV." + mesh.AppliedBucket + ".ace.gitea")
		m.Data = []byte(`{"fp":"3"}`)
		m.Header.Set("Nats-Rollup", rollup)
		_, err := js.PublishMsg(ctx, m)
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Description, "rollup") {
			t.Errorf("a put with Nats-Rollup %s after the update: %v; want the stream's refusal of rollups", rollup, err)
		}
	}
	if e, err := kv.Get(ctx, "ace.other"); err != nil || string(e.Value()) != `{"fp":"kept"}` {
		t.Errorf("ace.other after the update and the rollups: %v; want it kept", err)
	}
	if _, err := kv.Put(ctx, "ace.gitea", make([]byte, access.MaxSharedValue+1)); err == nil {
		t.Errorf("a value over the bound %d was stored; want it refused", access.MaxSharedValue)
	}
	if hist, err := kv.History(ctx, "ace.gitea"); err != nil || len(hist) != 1 {
		t.Errorf("ace.gitea keeps %d values (%v); want its last only", len(hist), err)
	}

	// Started again on conforming buckets, the seat says nothing.
	start()
	if n := said.count(updated); n != len(old) {
		t.Errorf("updates said %d times after a second start; want %d (the first start's)", n, len(old))
	}
}

// A bucket that holds more than its bound keeps its size bound (lowered,
// the server would drop its oldest keys) and says so; the rest is
// updated.
func TestConformKeepsTheSizeOfAFullerBucket(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "old")
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: mesh.ClientsBucket}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, mesh.ClientsBucket)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	for i := range access.MaxLeaseBucket>>20 + 1 {
		if _, err := kv.Put(ctx, "n"+string(rune('a'+i%26))+string(rune('a'+i/26)), big); err != nil {
			t.Fatal(err)
		}
	}
	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, nil))
	changed, err := bus.Conform(ctx, js, mesh.ClientsBucket, log)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+mesh.ClientsBucket)
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.Config.MaxBytes != -1 || info.Config.AllowRollup || info.State.Msgs != access.MaxLeaseBucket>>20+1 {
		t.Errorf("after Conform (%v): max_bytes %d, rollups %v, %d keys; want -1 (kept), refused, %d (none dropped)",
			changed, info.Config.MaxBytes, info.Config.AllowRollup, info.State.Msgs, access.MaxLeaseBucket>>20+1)
	}
	if said.count("bus: a bucket holds more than its bound", "bucket="+mesh.ClientsBucket) != 1 {
		t.Errorf("the kept size bound was not said once:\n%s", said.b.String())
	}
}

// A consumer made before the consumer limits that asks a longer inactive
// threshold keeps the server from setting them (it refuses limits that an
// existing consumer exceeds): Conform updates the rest and says it once;
// once the consumer is gone, the next Conform sets them.
func TestConformLeavesConsumerLimitsWhileAConsumerAsksMore(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "old")
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: mesh.PlansBucket, History: 5}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+mesh.PlansBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: "long", InactiveThreshold: time.Hour}); err != nil {
		t.Fatal(err)
	}
	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, nil))
	changed, err := bus.Conform(ctx, js, mesh.PlansBucket, log)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.ConsumerLimits.InactiveThreshold != 0 || info.Config.MaxMsgsPerSubject != 1 || len(changed) != 5 {
		t.Errorf("after Conform (%v): consumers' inactive threshold %s, history %d; want 0 (left), 1 (updated), 5 changes",
			changed, info.Config.ConsumerLimits.InactiveThreshold, info.Config.MaxMsgsPerSubject)
	}
	if said.count("bus: a bucket's consumer limits are left as they are", "bucket="+mesh.PlansBucket, "long") != 1 {
		t.Errorf("the left consumer limits were not said once, naming the consumer:\n%s", said.b.String())
	}
	if err := st.DeleteConsumer(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	if changed, err := bus.Conform(ctx, js, mesh.PlansBucket, log); err != nil || len(changed) != 1 {
		t.Fatalf("Conform once the consumer is gone: %v, %v; want the consumer limits set", changed, err)
	}
	if info, err := st.Info(ctx); err != nil || info.Config.ConsumerLimits.InactiveThreshold != access.ConsumerInactive {
		t.Errorf("consumers' inactive threshold once the consumer is gone: %v (%v); want %s", info.Config.ConsumerLimits, err, access.ConsumerInactive)
	}
}
