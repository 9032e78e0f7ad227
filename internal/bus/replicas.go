package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxReplicas is the most replicas a JetStream stream (so a key-value
// bucket) may have.
const MaxReplicas = 5

// CheckReplicas returns an error when n is not a replica count a bucket may
// have: 1 to [MaxReplicas].
func CheckReplicas(n int) error {
	if n < 1 || n > MaxReplicas {
		return fmt.Errorf("bus: %d replicas: a bucket has 1 to %d replicas (3 on a three-server cluster, 1 on one server)", n, MaxReplicas)
	}
	return nil
}

// replicated is a connection's JetStream context whose bucket and stream
// creations default to a replica count: every bucket a component makes on
// its connection (a followed copy's, a lease's, a stream's) gets the
// deployment's replicas without each caller passing them.
type replicated struct {
	jetstream.JetStream
	replicas int
	log      *slog.Logger

	mu   sync.Mutex
	said map[string]bool // buckets found with another replica count, said once
}

// withReplicas returns js making every new bucket and stream with n
// replicas unless its config sets its own; n <= 0 returns js as it is.
func withReplicas(js jetstream.JetStream, n int, log *slog.Logger) jetstream.JetStream {
	if n <= 0 {
		return js
	}
	return &replicated{JetStream: js, replicas: n, log: log, said: map[string]bool{}}
}

// ReplicasOf returns the replica count new buckets and streams get on js:
// [Dial.Replicas] of the connection js comes from, or 0 (the server's
// default, one replica) when it set none.
func ReplicasOf(js jetstream.JetStream) int {
	if r, ok := unscoped(js).(*replicated); ok {
		return r.replicas
	}
	return 0
}

// CreateKeyValue makes the bucket with the connection's replicas unless
// cfg sets its own.
func (r *replicated) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = r.replicas
	}
	return r.JetStream.CreateKeyValue(ctx, cfg)
}

// CreateOrUpdateKeyValue makes or updates the bucket with the connection's
// replicas unless cfg sets its own.
func (r *replicated) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = r.replicas
	}
	return r.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
}

// CreateStream makes the stream with the connection's replicas unless cfg
// sets its own.
func (r *replicated) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = r.replicas
	}
	return r.JetStream.CreateStream(ctx, cfg)
}

// CreateOrUpdateStream makes or updates the stream with the connection's
// replicas unless cfg sets its own.
func (r *replicated) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = r.replicas
	}
	return r.JetStream.CreateOrUpdateStream(ctx, cfg)
}

// sayReplicas says, once per bucket and connection, that bucket exists with
// another replica count than the connection makes buckets with: it is used
// as it is (changing a bucket's replicas is an operator's decision, made
// with "nats stream edit KV_<bucket> --replicas N").
func sayReplicas(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, want int) {
	r, ok := unscoped(js).(*replicated)
	if !ok {
		return
	}
	if want <= 0 {
		want = r.replicas
	}
	r.mu.Lock()
	said := r.said[kv.Bucket()]
	r.mu.Unlock()
	if said {
		return
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return
	}
	has := bs.StreamInfo().Config.Replicas
	if has < 1 {
		has = 1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if has == want {
		r.said[kv.Bucket()] = true // matches: never looked at again
		return
	}
	if r.said[kv.Bucket()] {
		return
	}
	r.said[kv.Bucket()] = true
	r.log.Warn("bus: the bucket exists with another replica count; it is used as it is",
		"bucket", kv.Bucket(), "replicas", has, "wanted", want)
}
