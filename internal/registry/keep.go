package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Every is how often [Keep] writes the registry again: the spec's one timer.
const Every = time.Hour

// Changes says what one [Sync] did: the kinds it wrote and the kinds it
// deleted, each sorted.
type Changes struct {
	Written []string
	Deleted []string
}

// Sync makes the registry bucket followed by c hold exactly table: it
// writes each answer whose bytes differ from the copy's, and deletes every
// key that is not a kind of the table, each write conditional on the
// revision the copy holds (another writer's change meanwhile fails it:
// [bus.IsConflict]). It returns an error, and writes nothing, when an
// answer of the table breaks [mesh.RegistryAnswer.Check] or two answers
// share a kind; a write that fails stops it with the error. Wait for c's
// Ready before calling it.
func Sync(ctx context.Context, c *bus.Copy, table []mesh.RegistryAnswer) (Changes, error) {
	return syncTable(ctx, c, table, nil)
}

// syncTable is [Sync] that calls fence, when set, before each write and stops
// with its error.
func syncTable(ctx context.Context, c *bus.Copy, table []mesh.RegistryAnswer, fence func() error) (Changes, error) {
	if fence == nil {
		fence = func() error { return nil }
	}
	values, err := encode(table)
	if err != nil {
		return Changes{}, err
	}
	var ch Changes
	kinds := make([]string, 0, len(values))
	for k := range values {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if old, ok := c.Get(k); ok && string(old.Value) == string(values[k]) {
			continue
		}
		if err := fence(); err != nil {
			return ch, fmt.Errorf("registry: kind %s not written: %w", k, err)
		}
		wrote, err := bus.PutAt(ctx, c, k, values[k])
		if err != nil {
			return ch, fmt.Errorf("registry: %w", err)
		}
		if wrote {
			ch.Written = append(ch.Written, k)
		}
	}
	var gone []string
	c.Range(func(key string, _ bus.Item) bool {
		if _, ok := values[key]; !ok {
			gone = append(gone, key)
		}
		return true
	})
	sort.Strings(gone)
	for _, k := range gone {
		if err := fence(); err != nil {
			return ch, fmt.Errorf("registry: kind %s not deleted: %w", k, err)
		}
		deleted, err := bus.DeleteAtCopy(ctx, c, k)
		if err != nil {
			return ch, fmt.Errorf("registry: %w", err)
		}
		if deleted {
			ch.Deleted = append(ch.Deleted, k)
		}
	}
	return ch, nil
}

// encode checks the table and returns each kind's value bytes.
func encode(table []mesh.RegistryAnswer) (map[string][]byte, error) {
	values := map[string][]byte{}
	for _, a := range table {
		if err := a.Check(); err != nil {
			return nil, err
		}
		if _, dup := values[a.Kind]; dup {
			return nil, fmt.Errorf("registry: kind %s is in the table twice", a.Kind)
		}
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("registry: encode kind %s: %w", a.Kind, err)
		}
		values[a.Kind] = b
	}
	return values, nil
}

// KeepOptions configures [Keep].
type KeepOptions struct {
	// Table is the registry to keep; nil means [Compiled].
	Table []mesh.RegistryAnswer
	// Log says every sync that changed something and every failure. Nil
	// means slog.Default().
	Log *slog.Logger
	// Synced, if set, is called after each sync with what it changed (also
	// when nothing changed), on Keep's goroutine.
	Synced func(Changes)
	// Fence, if set, is called before each write; when it returns an error
	// (the seat may have lost its lease: seat.Seat.Fence) the sync stops
	// with that error, writing nothing more.
	Fence func() error
}

// Keep keeps the registry in [mesh.RegistryBucket] (created when missing)
// through js, the seat's connection: it syncs it once the bucket is
// followed, then every [Every] and at each change another writer makes to
// the bucket (a kind deleted or rewritten, the bucket deleted or made
// anew), until ctx is done, and returns ctx's error.
// A failed sync is logged and tried again at the next hour; a table that
// breaks [mesh.RegistryAnswer.Check] is returned as an error at once.
func Keep(ctx context.Context, js jetstream.JetStream, opts KeepOptions) error {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	table := opts.Table
	if table == nil {
		table = Compiled()
	}
	if _, err := encode(table); err != nil {
		return err
	}
	// Another writer's change (a key deleted, the bucket deleted or made
	// anew, a server back on an empty store) syncs again at once.
	changed := make(chan struct{}, 1)
	c := bus.Follow(ctx, js, mesh.RegistryBucket, bus.Options{Create: true, Writes: true, Log: log, OnChange: func(bus.Change) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}})
	select {
	case <-c.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	if _, err := c.KV(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(Every)
	defer tick.Stop()
	for {
		// A change taken before this sync (the initial values among them)
		// is covered by it.
		select {
		case <-changed:
		default:
		}
		ch, err := syncTable(ctx, c, table, opts.Fence)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			log.Error("registry: sync", "bucket", mesh.RegistryBucket, "err", err)
		case len(ch.Written)+len(ch.Deleted) > 0:
			log.Info("registry: synced", "bucket", mesh.RegistryBucket, "written", ch.Written, "deleted", ch.Deleted)
		}
		if opts.Synced != nil {
			opts.Synced(ch)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case <-changed:
		}
	}
}
