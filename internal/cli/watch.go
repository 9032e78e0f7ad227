package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// watchEvent is one change get --watch prints in json and yaml: the key,
// "put" or "delete", and the value as stored (none for a delete).
type watchEvent struct {
	Op    string          `json:"op"`
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value,omitempty"`
	// Why is set for a key out of shape or a value that does not decode.
	Why string `json:"why,omitempty"`
}

// watchKind prints each change of kind's bucket under q's patterns as it
// happens, until ctx ends (Ctrl-C): in a table a row of the kind's cells
// (a deleted key as "deleted KEY"), in json one object per line, in yaml
// one document per change. Only changes after the watch starts are
// printed: what was there is the table already printed.
func watchKind(ctx context.Context, w io.Writer, kind getKind, q *getQuery, output string) error {
	err := follow(ctx, w, kind, q, output)
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil // Ctrl-C: the watch ends as asked, wherever it was
	}
	return err
}

func follow(ctx context.Context, w io.Writer, kind getKind, q *getQuery, output string) error {
	kv, err := q.js.KeyValue(ctx, kind.bucket)
	if err != nil {
		return fmt.Errorf("get --watch: bucket %s: %w", kind.bucket, err)
	}
	check := kind.check(q)
	updates := make(chan jetstream.KeyValueEntry)
	for _, p := range q.patterns() {
		wa, err := bus.WatchKeys(ctx, q.js, kv, p, bus.WatchOptions{UpdatesOnly: true})
		if err != nil {
			return fmt.Errorf("get --watch: %w", err)
		}
		defer wa.Stop()
		go func() {
			for e := range wa.Updates() {
				if e == nil {
					continue
				}
				select {
				case updates <- e:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-updates:
			ev := watchEvent{Op: "put", Key: e.Key()}
			if e.Operation() != jetstream.KeyValuePut {
				ev.Op = "delete"
			} else {
				keep, why := check(e.Key(), e.Value())
				if !keep && why == "" {
					continue
				}
				ev.Value, ev.Why = asJSON(e.Value()), why
			}
			if err := writeEvent(w, kind, output, ev); err != nil {
				return err
			}
		}
	}
}

// writeEvent prints one change.
func writeEvent(w io.Writer, kind getKind, output string, ev watchEvent) error {
	switch output {
	case "json":
		b, _ := json.Marshal(ev) // a RawMessage from asJSON is valid JSON
		_, err := fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, _ := json.Marshal(ev)
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
		return writeYAML(w, b)
	}
	var cells []string
	switch {
	case ev.Op == "delete":
		cells = []string{"deleted", ev.Key}
	case ev.Why != "":
		cells = []string{"odd", ev.Key, ev.Why}
	default:
		cells = kind.row(getItem{Key: ev.Key, Value: ev.Value})
	}
	for i, c := range cells {
		cells[i] = escapeControl(c)
	}
	_, err := fmt.Fprintf(w, "%s  %s\n", time.Now().UTC().Format("15:04:05"), strings.Join(cells, "  "))
	return err
}
