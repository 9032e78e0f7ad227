package web

import (
	"context"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
)

// seatEvery is how often the page reads where the seat stands: the
// lease's key lapses with no event a watch would see (the bucket's TTL),
// so it is read ([lookup.ReadSeat]: one get and three stream states,
// whatever the mesh's size).
const seatEvery = 2 * time.Second

// seatView is where the seat stands, as the page last read it.
type seatView struct {
	lookup.Seat
	known bool   // read at least once
	err   string // the last read's error, when it failed
}

// says is what the page says of the seat at now.
func (s seatView) says(now time.Time) string {
	switch {
	case !s.known:
		return ""
	case s.err != "":
		return "the seat's lease cannot be read: " + s.err
	}
	return s.Seat.Says(now)
}

// followSeat reads where the seat stands every seatEvery until ctx is
// done, and takes it as a change when whether a seat holds the lease, or
// which, changed (and, while none holds it, when the last write moved).
func (p *Page) followSeat(ctx context.Context) {
	t := time.NewTicker(seatEvery)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, seatEvery)
		s, err := lookup.ReadSeat(rctx, p.cfg.JS)
		cancel()
		v := seatView{Seat: s, known: true}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			v = seatView{known: true, err: err.Error()}
		}
		p.takeSeat(v)
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
	if old.known == s.known && old.Held == s.Held && old.Holder == s.Holder && old.Since.Equal(s.Since) &&
		old.err == s.err && (s.Held || old.Wrote.Equal(s.Wrote)) {
		return
	}
	if old.err != s.err && s.err != "" {
		p.log.Warn("web: the seat's lease cannot be read", "err", s.err)
	}
	p.bump()
}
