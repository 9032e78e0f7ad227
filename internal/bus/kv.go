package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket returns the key-value bucket named name, creating it (one replica,
// history 1) when it does not exist. Replicas sets the replica count of a
// new bucket: 0 means 1, the embedded default; a cluster wants 3.
func Bucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bus: bucket %s: %w", name, err)
	}
	if replicas <= 0 {
		replicas = 1
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1, Replicas: replicas})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: create bucket %s: %w", name, err)
	}
	return kv, nil
}

// LeaseBucket returns the bucket for a lease whose key lapses ttl after its
// last write, creating it when missing.
func LeaseBucket(ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err == nil {
		return kv, nil
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1, TTL: ttl})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: create lease bucket %s: %w", name, err)
	}
	return kv, nil
}

// PutIfChanged writes value at key unless the copy already holds exactly
// these bytes, and takes the write into the copy at once. It reports whether
// it wrote.
func PutIfChanged(ctx context.Context, c *Copy, key string, value []byte) (bool, error) {
	if old, ok := c.Get(key); ok && bytes.Equal(old.Value, value) {
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
