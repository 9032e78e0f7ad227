package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
)

// awaitBuckets waits up to wait for each of buckets to be there
// ([bus.AwaitBucket]): under the mesh's users the seat alone makes them.
// The first one missing is said at once on w, after prefix, in one line:
// what it waits for, how long, and whether a seat holds the lease (when
// none does, that one must start: serve, or up), so that the wait is never
// silent. What is said of the seat is best effort: a lease that cannot be
// read is not said.
func awaitBuckets(ctx context.Context, js jetstream.JetStream, w io.Writer, prefix string, buckets []string, wait time.Duration) error {
	said := false
	for _, b := range buckets {
		if !said {
			_, err := js.KeyValue(ctx, b)
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				said = true
				fmt.Fprintf(w, "%s: %s\n", prefix, waitingFor(ctx, js, b, wait))
			}
		}
		if _, err := bus.AwaitBucket(ctx, js, b, wait); err != nil {
			return err
		}
	}
	return nil
}

// waitingFor says the wait for bucket, made by the seat: the seat that
// holds the lease, or that none does.
func waitingFor(ctx context.Context, js jetstream.JetStream, bucket string, wait time.Duration) string {
	s, err := lookup.ReadSeat(ctx, js)
	switch {
	case err != nil:
		return fmt.Sprintf("no bucket %s yet: waiting up to %s for the seat to make the mesh's buckets", bucket, ago(wait))
	case s.Held:
		return fmt.Sprintf("no bucket %s yet: waiting up to %s for the seat (%s holds its lease) to make the mesh's buckets", bucket, ago(wait), s.Holder)
	}
	return fmt.Sprintf("no bucket %s yet, and no seat holds the lease: waiting up to %s for a seat to make the mesh's buckets (start one: mesh-provisioner serve, or up)", bucket, ago(wait))
}
