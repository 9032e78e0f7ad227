package seat

import (
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// Pause holds s still, as SIGSTOP holds a process: its loop and its lease's
// renewal wait, and the changes its watches take are kept back.
func (s *Seat) Pause() {
	s.paused.mu.Lock()
	defer s.paused.mu.Unlock()
	if s.paused.gate == nil {
		s.paused.gate = make(chan struct{})
		s.paused.renew = make(chan struct{})
		s.paused.on.Store(true)
	}
}

// Resume lets the loop of s go on. The kept changes for which first reports
// true are handed to it at once, in order (queued before the loop goes on,
// so that it takes them in one round); the others, and the lease's
// renewal (which is late, as a renewal may be), go on when release is
// called.
func (s *Seat) Resume(first func(bus.Change) bool) (release func()) {
	s.paused.mu.Lock()
	var later []bus.Change
	s.mu.Lock() // the loop takes the first changes in one round
	for _, ch := range s.paused.kept {
		if first(ch) {
			s.queue = append(s.queue, ch)
		} else {
			later = append(later, ch)
		}
	}
	s.mu.Unlock()
	s.paused.kept = nil
	g, renew := s.paused.gate, s.paused.renew
	s.paused.gate, s.paused.renew = nil, nil
	s.paused.on.Store(false)
	s.paused.mu.Unlock()
	s.poke()
	if g != nil {
		close(g)
	}
	return func() {
		for _, ch := range later {
			s.enqueue(ch)
		}
		if renew != nil {
			close(renew)
		}
	}
}

// Asking returns how many asks and withdrawals s sent that the router has
// not answered yet.
func (s *Seat) Asking() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asking
}

// Idle reports whether the loop of s has nothing queued and is not working.
func (s *Seat) Idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.busy && len(s.queue) == 0
}

// Fenced reports whether s found its lease may have lapsed before a write.
func (s *Seat) Fenced() bool { return s.fenceSaid.Load() }

// Keeps reports whether s, paused, has kept back a change of key in
// bucket.
func (s *Seat) Keeps(bucket, key string) bool {
	s.paused.mu.Lock()
	defer s.paused.mu.Unlock()
	for _, ch := range s.paused.kept {
		if ch.Bucket == bucket && ch.Key == key {
			return true
		}
	}
	return false
}

// HoldAcks keeps the loop of s from taking the acks of its writes, as if
// the bus were slow to answer, until release is called: its writes are
// published (and stored by the bus) but do not land.
func (s *Seat) HoldAcks() (release func()) {
	s.paused.mu.Lock()
	defer s.paused.mu.Unlock()
	g := make(chan struct{})
	s.paused.acks = g
	s.paused.acksOn.Store(true)
	return func() {
		s.paused.mu.Lock()
		s.paused.acks = nil
		s.paused.acksOn.Store(false)
		s.paused.mu.Unlock()
		close(g)
	}
}

// WaitsFor returns "<bucket> <key>" when the loop of s waits for the write
// of that key in flight to land before it writes the key again, else "".
func (s *Seat) WaitsFor() string {
	w, _ := s.waitsFor.Load().(string)
	return w
}

// HoldCopy keeps the watch of bucket in s from taking changes, as a slow
// connection would, until release is called. The seat follows bucket.
func (s *Seat) HoldCopy(bucket string) (release func()) {
	s.mu.Lock()
	c := s.watched[bucket]
	s.mu.Unlock()
	return c.Hold()
}

// SetWindow makes s publish at most n puts without their acks (maxFlying
// otherwise); call it before Run.
func (s *Seat) SetWindow(n int) { s.window = n }

// RoomWaits returns how many times the loop of s found its window of puts
// full and waited for acks.
func (s *Seat) RoomWaits() int64 { return s.roomWaits.Load() }

// Queued returns how many changes wait in the queue of s for its loop to
// take them.
func (s *Seat) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Known reports whether the seat's copy of bucket follows it (see
// [bus.Copy.Known]); false for a bucket the seat does not follow.
func (s *Seat) Known(bucket string) bool {
	s.mu.Lock()
	c := s.watched[bucket]
	s.mu.Unlock()
	return c != nil && c.Known()
}

// SetAckTimeout makes each try of a put of s wait d for its ack before the
// put is sent again (ackTimeout otherwise); call it before Run.
func (s *Seat) SetAckTimeout(d time.Duration) { s.ackWait = d }

// Resent returns how many tries of puts s sent again.
func (s *Seat) Resent() int64 { return s.resent.Load() }

// Recognised returns how many puts s found written by an earlier try after
// a try sent again was refused as a conflict.
func (s *Seat) Recognised() int64 { return s.recognised.Load() }
