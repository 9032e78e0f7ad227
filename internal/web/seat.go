package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// seatEvery is how often the page reads where the seat stands: the
// lease's key lapses with no event a watch would see (the bucket's TTL),
// so it is read, one get and three stream states whatever the mesh's size.
const seatEvery = 2 * time.Second

// seatView is where the seat stands, as the page last read it.
type seatView struct {
	known  bool      // read at least once
	held   bool      // a seat holds the lease (mesh-provisioner_seat holder)
	holder string    // its id
	since  time.Time // when it took the lease
	wrote  time.Time // the last write to plans, provisions or refused: its last composition that changed a key
	err    string    // the last read's error, when it failed
}

// says is what the page says of the seat at now.
func (s seatView) says(now time.Time) string {
	if !s.known {
		return ""
	}
	if s.err != "" {
		return "the seat's lease cannot be read: " + s.err
	}
	wrote := "has never written"
	if !s.wrote.IsZero() {
		wrote = "last composed " + when(s.wrote, now)
	}
	if !s.held {
		return "No seat holds the lease: the seat " + wrote + "; what is shown is what it left, and nothing follows the mesh's changes (start one: mesh-provisioner serve, or up)."
	}
	since := ""
	if !s.since.IsZero() {
		since = " since " + when(s.since, now)
	}
	return "seat " + s.holder + " holds the lease" + since + "; " + wrote
}

// when says a time beside now: "12m ago (2026-12-01 16:40:00Z)".
func when(t, now time.Time) string {
	return age(now, t) + " ago (" + t.UTC().Format("2006-01-02 15:04:05Z") + ")"
}

// seatBuckets are the buckets the seat alone writes.
var seatBuckets = []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket}

// readSeat reads where the seat stands: the lease's key, and the last
// message time of the buckets the seat alone writes. A bucket that does
// not exist is none written.
func readSeat(ctx context.Context, js jetstream.JetStream) (seatView, error) {
	s := seatView{known: true}
	kv, err := js.KeyValue(ctx, mesh.SeatBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
	case err != nil:
		return s, fmt.Errorf("web: bucket %s: %w", mesh.SeatBucket, err)
	default:
		e, err := kv.Get(ctx, mesh.HolderKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return s, fmt.Errorf("web: get %s %s: %w", mesh.SeatBucket, mesh.HolderKey, err)
		default:
			s.held = true
			var l mesh.Lease
			if json.Unmarshal(e.Value(), &l) == nil && l.Holder != "" {
				s.holder, s.since = l.Holder, l.Since
			} else {
				s.holder = "(a lease that does not decode)"
			}
		}
	}
	for _, b := range seatBuckets {
		st, err := js.Stream(ctx, "KV_"+b)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return s, fmt.Errorf("web: bucket %s: %w", b, err)
		}
		if last := st.CachedInfo().State.LastTime; last.After(s.wrote) {
			s.wrote = last
		}
	}
	return s, nil
}

// followSeat reads where the seat stands every seatEvery until ctx is
// done, and takes it as a change when whether a seat holds the lease, or
// which, changed (and, while none holds it, when the last write moved).
func (p *Page) followSeat(ctx context.Context) {
	t := time.NewTicker(seatEvery)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, seatEvery)
		s, err := readSeat(rctx, p.cfg.JS)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s = seatView{known: true, err: err.Error()}
		}
		p.takeSeat(s)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// takeSeat takes a reading of the seat.
func (p *Page) takeSeat(s seatView) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.seat
	p.seat = s
	if old.known == s.known && old.held == s.held && old.holder == s.holder && old.since.Equal(s.since) &&
		old.err == s.err && (s.held || old.wrote.Equal(s.wrote)) {
		return
	}
	if old.err != s.err && s.err != "" {
		p.log.Warn("web: the seat's lease cannot be read", "err", s.err)
	}
	p.bump()
}
