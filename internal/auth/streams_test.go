package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestOnlyTheSeatMakesStreams is hole 7 of issue 18 and the chained
// attack of hole 1: a party that makes a stream chooses its subjects. On a
// mesh with no bucket made yet, a node's client makes its lease bucket's
// stream capturing another client's inbox, an operator makes one on
// mesh-vault.> or on a client's inbox, a provider and an operator make a
// bucket: the server refuses each. The seat makes its buckets (bounded,
// refusing rollups), and a stream with no size bound is refused even to it.
func TestOnlyTheSeatMakesStreams(t *testing.T) {
	t.Parallel()
	f := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		as       string
		stream   string
		subjects []string
	}{
		{"client-n1", "KV_" + mesh.ClientsBucket, []string{access.InboxPrefix("client-n2") + ".>"}},
		{"client-n1", "KV_" + mesh.ClientsBucket, []string{"$KV." + mesh.ClientsBucket + ".>"}},
		{"operator", "KV_capture", []string{"mesh-vault.>"}},
		{"operator", "KV_" + mesh.PlacementBucket, []string{access.InboxPrefix("client-n1") + ".>"}},
		{"alice", "KV_" + mesh.PlacementBucket, []string{"$KV." + mesh.PlacementBucket + ".>"}},
		{"a", "KV_a_bound", []string{"$KV.a_bound.>"}},
	} {
		p := f.conns[c.as]
		isCreate := func(s string) bool { return s == "$JS.API.STREAM.CREATE."+c.stream }
		seen, stop := p.watch()
		from := len(p.errors())
		// A refused request is never answered: it is cut once the
		// server's violation comes, not left to its timeout.
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		made := make(chan error, 1)
		go func() {
			_, err := p.js.CreateStream(cctx, jetstream.StreamConfig{Name: c.stream, Subjects: c.subjects, MaxBytes: 1 << 20})
			made <- err
		}()
		var err error
	wait:
		for {
			select {
			case err = <-made:
				break wait
			case <-seen:
				if p.violation(from, "Publish", isCreate) != "" {
					ccancel()
				}
			}
		}
		ccancel()
		stop()
		if err == nil {
			t.Errorf("%s made stream %s on %v; want it refused", c.as, c.stream, c.subjects)
			continue
		}
		if v := p.violation(from, "Publish", isCreate); v == "" {
			t.Errorf("%s making %s: %v; want the server's permissions violation (async %v)", c.as, c.stream, err, p.errors()[from:])
		}
	}
	// The seat makes the buckets, as a mesh's setup does.
	seat := f.conns[access.SeatUser]
	for _, b := range []string{mesh.PlacementBucket, mesh.AppliedBucket, "a_bound"} {
		if _, err := bus.Bucket(ctx, seat.js, b, 0); err != nil {
			t.Fatalf("the seat makes %s: %v", b, err)
		}
		st, err := seat.js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		sc := st.CachedInfo().Config
		wantBytes, wantValue := access.BucketLimits(b)
		if sc.AllowRollup || sc.MaxBytes != wantBytes || sc.MaxMsgSize != wantValue {
			t.Errorf("%s: rollups %v, max bytes %d, max value %d; want refused, %d, %d", b, sc.AllowRollup, sc.MaxBytes, sc.MaxMsgSize, wantBytes, wantValue)
		}
	}
	if _, err := bus.LeaseBucket(ctx, seat.js, mesh.ClientsBucket, time.Minute); err != nil {
		t.Fatalf("the seat makes the clients' leases: %v", err)
	}
	// No stream without a bound, even the seat's.
	_, err := seat.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: mesh.RefusedBucket})
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || !strings.Contains(strings.ToLower(apiErr.Description), "max bytes") {
		t.Errorf("the seat makes %s with no bound: %v; want the account's refusal (max bytes required)", mesh.RefusedBucket, err)
	}
}

// TestRollupsAreRefused is hole 5 of issue 18: a put with the header
// Nats-Rollup ("all" purges every key of the bucket, "sub" the key's
// history) on any key a party may write, in every bucket it writes: each
// bucket's stream refuses it, and the other keys stay. The neighbour, the
// same put without the header, is stored.
func TestRollupsAreRefused(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A key of another party in each shared bucket, which a rollup "all"
	// would purge.
	n2 := f.conns["client-n2"]
	keep := "$KV." + mesh.AppliedBucket + ".n2.n"
	if _, err := n2.js.Publish(ctx, keep, []byte(`{"fp":"kept"}`)); err != nil {
		t.Fatal(err)
	}
	tried := 0
	type write struct {
		conn    *party
		subject string
	}
	var writes []write
	for _, p := range f.parties {
		for _, r := range p.Rules() {
			if r.Act != access.Write {
				continue
			}
			key := strings.ReplaceAll(strings.ReplaceAll(r.Keys, ">", "x"), "*", "x")
			writes = append(writes, write{f.conns[p.User], "$KV." + r.Target + "." + key})
		}
	}
	for _, w := range writes {
		for _, rollup := range []string{"all", "sub"} {
			msg := nats.NewMsg(w.subject)
			msg.Data = []byte(`{}`)
			msg.Header.Set("Nats-Rollup", rollup)
			_, err := w.conn.js.PublishMsg(ctx, msg)
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Description, "rollup") {
				t.Errorf("%s puts %s with Nats-Rollup %s: %v; want the stream's refusal of rollups", w.conn.user, w.subject, rollup, err)
			}
			tried++
		}
	}
	if tried < 40 {
		t.Errorf("%d rollups tried; want one of each kind on every bucket each party writes", tried)
	}
	kv, err := n2.js.KeyValue(ctx, mesh.AppliedBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "n2.n"); err != nil || string(e.Value()) != `{"fp":"kept"}` {
		t.Errorf("n2's applied key after the rollups: %v; want it kept", err)
	}
	// The neighbour: the same puts without the header are stored.
	for _, w := range writes {
		if _, err := w.conn.js.Publish(ctx, w.subject, []byte(`{}`)); err != nil {
			t.Errorf("%s puts %s: %v; want it stored", w.conn.user, w.subject, err)
		}
	}
}
