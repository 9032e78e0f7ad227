package auth_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestNoScopedPartyQueuesJetStreamAPIRequests is issue 18's flood of
// "$JS.API.INFO": the JetStream API requests of every account wait in one
// queue of the server's, so one scoped party's flood of account or stream
// infos delayed an operator's get from 0.2 s to 16.9 s. No scoped party
// may publish any of JetStream's API but its keys' direct gets, which the
// stream serves itself: the generated permissions of every party of the
// fixture that reads no whole account and makes no bucket hold no other
// "$JS.API." subject, and each scoped party's account info and stream info
// of a bucket it reads whole are refused by the server. The allowed
// neighbours: its direct get of a key of that bucket, answered by the
// stream (the key not there), and its binding of the bucket (probed with
// such a get) and watch of its keys (the seat makes the consumer).
func TestNoScopedPartyQueuesJetStreamAPIRequests(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	for user, p := range f.parties {
		if p.Has(access.Seat) || p.Has(access.Operator) {
			continue
		}
		for _, s := range p.PermissionsIn(access.Storage).Publish {
			if strings.HasPrefix(s, "$JS.API.") && !strings.HasPrefix(s, "$JS.API.DIRECT.GET.KV_") {
				t.Errorf("%s may publish %s; want no JetStream API request but its keys' direct gets", user, s)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tt := range []struct{ user, bucket, keys string }{
		{"client-n1", mesh.PlansBucket, "n1.>"},
		{"a", mesh.BoundBucket("a"), ">"},
		{"a", mesh.PlansBucket, ">"},
		{access.VaultUser, mesh.AppliedBucket, ">"},
		{access.RouterUser, mesh.RecordsBucket, ">"},
	} {
		p := f.conns[tt.user]
		for _, subject := range []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.KV_" + tt.bucket} {
			if answer, refusal := f.request(t, p, subject, nil); refusal == "" {
				t.Errorf("%s asks %s: answered %.200s; want the server's refusal", tt.user, subject, answer)
			}
		}
		key := "$KV." + tt.bucket + "." + strings.Replace(tt.keys, ">", "absent", 1)
		answer, refusal := f.request(t, p, "$JS.API.DIRECT.GET.KV_"+tt.bucket+"."+key, nil)
		if refusal != "" {
			t.Errorf("%s's direct get of %s refused: %s; want the stream's answer", tt.user, key, refusal)
		}
		_ = answer // a 404 status, no body: the stream answered
		kv, err := p.js.KeyValue(ctx, tt.bucket)
		if err != nil {
			t.Fatalf("%s binds %s: %v", tt.user, tt.bucket, err)
		}
		if _, err := kv.Get(ctx, strings.Replace(tt.keys, ">", "absent", 1)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s gets an absent key of %s: %v; want %v", tt.user, tt.bucket, err, jetstream.ErrKeyNotFound)
		}
		w, err := kv.Watch(ctx, tt.keys)
		if err != nil {
			t.Fatalf("%s watches %s %s: %v", tt.user, tt.bucket, tt.keys, err)
		}
		select {
		case <-w.Updates(): // a key or the end of the initial values
		case <-ctx.Done():
			t.Fatalf("%s's watch of %s handed on nothing", tt.user, tt.bucket)
		}
		w.Stop()
	}
	if !slices.Contains(f.parties[access.DefaultOperator].PermissionsIn(access.Storage).Publish, "$JS.API.INFO") {
		t.Error("the operator may not ask the account's JetStream info; want it to (it reads every bucket)")
	}
}
