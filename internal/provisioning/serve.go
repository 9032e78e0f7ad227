package provisioning

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Queue is the queue group of the verb's responders, so that one of
// several seat processes answers each request.
const Queue = "mesh-provisioner"

// Options configures [Start].
type Options struct {
	// Log says each request that gets an error answer and each reply that
	// cannot be sent. Nil means slog.Default().
	Log *slog.Logger
}

// Start follows the buckets of [Buckets] through js into watched copies
// (creating missing buckets), waits until every copy is ready, then answers
// mesh-provisioner.provisioning on nc in queue group [Queue] until ctx is
// done. It returns once the verb is answered, or ctx's error when ctx ends
// first, or an error when it cannot subscribe.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, opts Options) error {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	src := Sources{}
	for _, b := range Buckets {
		c := bus.Follow(ctx, js, b, bus.Options{Create: true, Log: log})
		src[b] = c
	}
	for _, b := range Buckets {
		select {
		case <-src[b].(*bus.Copy).Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	sub, err := nc.QueueSubscribe(mesh.ProvisioningSubject, Queue, func(m *nats.Msg) {
		out, err := Handle(m.Data, src)
		if err != nil {
			log.Warn("provisioning: request answered with an error", "subject", m.Subject, "request", string(m.Data), "err", err)
		}
		if err := m.Respond(out); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
			log.Error("provisioning: reply", "subject", m.Subject, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("provisioning: subscribe %s: %w", mesh.ProvisioningSubject, err)
	}
	if err := nc.Flush(); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("provisioning: subscribe %s: %w", mesh.ProvisioningSubject, err)
	}
	go func() {
		<-ctx.Done()
		sub.Unsubscribe()
	}()
	return nil
}

// DropNeeds deletes every key of the retired bucket mesh-provisioner_needs
// and returns how many it deleted; a missing bucket is none. The seat calls
// it once at start and says the count. It returns an error naming the key
// when a delete fails.
func DropNeeds(ctx context.Context, js jetstream.JetStream) (int, error) {
	kv, err := js.KeyValue(ctx, mesh.NeedsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("provisioning: bucket %s: %w", mesh.NeedsBucket, err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("provisioning: keys of %s: %w", mesh.NeedsBucket, err)
	}
	var all []string
	for k := range keys.Keys() {
		all = append(all, k)
	}
	n := 0
	for _, k := range all {
		if err := kv.Delete(ctx, k); err != nil {
			return n, fmt.Errorf("provisioning: delete %s %s: %w", mesh.NeedsBucket, k, err)
		}
		n++
	}
	return n, nil
}
