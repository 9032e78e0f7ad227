package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// meshBuckets are the buckets readMesh reads besides the providers'
// bound buckets: every bucket the seat follows.
var meshBuckets = []string{
	mesh.PlacementBucket, mesh.WantsBucket, mesh.ModulesBucket, mesh.ManifestsBucket,
	mesh.BuildsBucket, mesh.HaveBucket,
	mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket,
	mesh.RecordsBucket,
}

// readMesh reads every bucket the seat follows once, and the bound bucket
// of every provider that keeps entries, into a fresh [state.Mesh], the
// seat's own in-memory view. A bucket that does not exist is read as
// empty. Every odd change (a key out of shape, a value that does not
// decode) is returned as said by the mesh, to be shown. keep, when not
// nil, is given every key read with its value as stored (not to be
// changed), so that a caller that needs the values too reads the buckets
// once.
func readMesh(ctx context.Context, js jetstream.JetStream, keep func(bucket, key string, value []byte)) (*state.Mesh, []error, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the copies' watches
	m := state.New()
	var odd []error
	read := func(bucket string) error {
		if _, err := js.KeyValue(ctx, bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read %s: %w", bucket, err)
		}
		c := bus.Follow(ctx, js, bucket, bus.Options{Leader: true})
		select {
		case <-c.Ready():
		case <-ctx.Done():
			return fmt.Errorf("read %s: %w", bucket, ctx.Err())
		}
		c.Range(func(key string, it bus.Item) bool {
			t := m.Take(bus.Change{Bucket: bucket, Key: key, Value: it.Value, Revision: it.Revision})
			if t.Odd != nil {
				odd = append(odd, t.Odd)
			}
			if keep != nil {
				keep(bucket, key, it.Value)
			}
			return true
		})
		return nil
	}
	for _, b := range meshBuckets {
		if err := read(b); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range m.Bound() {
		if err := read(mesh.BoundBucket(p)); err != nil {
			return nil, nil, err
		}
	}
	return m, odd, nil
}
