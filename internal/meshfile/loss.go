package meshfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Loss is what applying a file takes out of the mesh, computed by
// [File.Loss] before anything is written.
type Loss struct {
	// Removes is how many keys of placement, wants and haves the apply
	// removes (len of [Diff.Removes]).
	Removes int
	// Placed is how many modules are placed now, counted per node (a
	// module on two nodes counts twice), from mesh-controller_placement.
	Placed int
	// Unplaced lists, sorted, the modules placed now that the file no
	// longer places, as <node>.<module>.
	Unplaced []string
}

// Most reports whether the apply takes most of the mesh: more than half of
// the modules placed now would no longer be placed.
func (l Loss) Most() bool { return len(l.Unplaced) > 0 && 2*len(l.Unplaced) > l.Placed }

// String says the loss in one sentence: "removes 12 keys; 9 of 14 placed
// modules are no longer placed (ace.gitea, ...)".
func (l Loss) String() string {
	s := fmt.Sprintf("removes %d keys of placement, wants and haves; %d of %d placed modules are no longer placed",
		l.Removes, len(l.Unplaced), l.Placed)
	if n := len(l.Unplaced); n > 0 {
		shown := l.Unplaced
		if n > 8 {
			shown = shown[:8]
		}
		s += " ("
		for i, u := range shown {
			if i > 0 {
				s += ", "
			}
			s += u
		}
		if n > 8 {
			s += fmt.Sprintf(" and %d more", n-8)
		}
		s += ")"
	}
	return s
}

// Loss compares the modules placed in current (bucket -> key -> value, as
// [Current] reads it) with those the file places, and counts the removes
// of d (the file's [File.Diff] over the same current). A placement value
// that does not decode counts as placing nothing. Loss is pure.
func (f *File) Loss(current map[string]map[string][]byte, d *Diff) Loss {
	l := Loss{Removes: len(d.Removes)}
	for node, v := range current[mesh.PlacementBucket] {
		var p mesh.Placement
		if json.Unmarshal(v, &p) != nil {
			continue
		}
		seen := map[string]bool{}
		for _, pm := range p.Modules {
			if seen[pm.Module] {
				continue
			}
			seen[pm.Module] = true
			l.Placed++
			if !f.Placed(node, pm.Module) {
				l.Unplaced = append(l.Unplaced, node+"."+pm.Module)
			}
		}
	}
	sort.Strings(l.Unplaced)
	return l
}

// Current reads every key of the buckets a mesh file writes ([Buckets])
// once, through js: bucket -> key -> value. A bucket that does not exist
// is read as empty; nothing is created or written.
func Current(ctx context.Context, js jetstream.JetStream) (map[string]map[string][]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the copies' watches
	current := map[string]map[string][]byte{}
	for _, bucket := range Buckets {
		held := map[string][]byte{}
		current[bucket] = held
		if _, err := js.KeyValue(ctx, bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("read %s: %w", bucket, err)
		}
		c := bus.Follow(ctx, js, bucket, bus.Options{})
		select {
		case <-c.Ready():
		case <-ctx.Done():
			return nil, fmt.Errorf("read %s: %w", bucket, ctx.Err())
		}
		c.Range(func(key string, it bus.Item) bool {
			held[key] = it.Value
			return true
		})
	}
	return current, nil
}
