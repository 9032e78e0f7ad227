package lookup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Seat is where the seat stands, read from the bus: who holds its lease
// and when the seat last wrote. Every read view ("get", "why", "status",
// the web page) says it when no seat holds the lease, since what it shows
// is then what the last seat left, and nothing follows the mesh's changes.
type Seat struct {
	// Held reports whether a seat holds the lease (the key holder of
	// mesh-provisioner_seat is there: it lapses a lease's time after its
	// holder's last renewal).
	Held bool `json:"held"`
	// Holder is the holder's id (its host name and a number) and Since
	// when it took the lease; both empty when Held is false.
	Holder string    `json:"holder,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Wrote is when the seat last wrote a plan, provision or refusal (the
	// last message of those buckets, which the seat alone writes): its last
	// composition that changed a key. Zero when it never wrote.
	Wrote time.Time `json:"wrote,omitzero"`
}

// seatBuckets are the buckets the seat alone writes.
var seatBuckets = []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket}

// ReadSeat reads where the seat stands: one get of the lease's key (from
// the leader of its stream, see [Get]) and the
// state (not the subjects) of the three buckets the seat writes, whatever
// the mesh's size. A bucket that does not exist is none written; an error
// of the bus is returned, wrapped.
func ReadSeat(ctx context.Context, js jetstream.JetStream) (Seat, error) {
	var s Seat
	kv, err := js.KeyValue(ctx, mesh.SeatBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
	case err != nil:
		return s, fmt.Errorf("lookup: bucket %s: %w", mesh.SeatBucket, err)
	default:
		e, err := Get(ctx, js, kv, mesh.HolderKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return s, fmt.Errorf("lookup: get %s %s: %w", mesh.SeatBucket, mesh.HolderKey, err)
		default:
			var l mesh.Lease
			if json.Unmarshal(e.Value, &l) == nil {
				s.Holder, s.Since = l.Holder, l.Since
			}
			s.Held = true
			if s.Holder == "" {
				s.Holder = "a seat whose lease does not decode"
			}
		}
	}
	for _, b := range seatBuckets {
		st, err := js.Stream(ctx, "KV_"+b)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return s, fmt.Errorf("lookup: bucket %s: %w", b, err)
		}
		if last := st.CachedInfo().State.LastTime; last.After(s.Wrote) {
			s.Wrote = last
		}
	}
	return s, nil
}

// Says returns what a read view says of the seat at now, one line:
// "no seat holds the lease: the seat last wrote 12m ago (2026-12-01
// 16:40Z); what is shown may be behind the mesh" when none holds it, or
// "seat: HOLDER holds the lease since ...; last wrote ..." when one does
// (HOLDER is the seat's id: its host and a number of its own).
func (s Seat) Says(now time.Time) string {
	wrote := "has never written"
	if !s.Wrote.IsZero() {
		wrote = "last wrote " + When(s.Wrote, now)
	}
	if !s.Held {
		return "no seat holds the lease: the seat " + wrote + "; what is shown may be behind the mesh (start one: mesh-provisioner serve, or up)"
	}
	since := ""
	if !s.Since.IsZero() {
		since = " since " + When(s.Since, now)
	}
	return "seat: " + s.Holder + " holds the lease" + since + "; " + wrote
}

// When says a time the way an operator reads it beside now: "12m ago
// (2026-12-01 16:40Z)".
func When(t, now time.Time) string {
	return Ago(now.Sub(t)) + " ago (" + t.UTC().Format("2006-01-02 15:04:05Z") + ")"
}

// Ago says a duration the way an operator reads it: 40s, 12m, 3h, 5d.
func Ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
