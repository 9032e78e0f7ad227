package asks

import (
	"slices"
	"sync"
	"time"
)

// expiry keeps the expiry of every open ask and one timer, armed for the
// earliest. When it rings, every ask whose time is up is forgotten and handed
// to fire, on the timer's goroutine; the timer is then armed for the next.
// Nothing is armed before start. It is safe for concurrent use.
type expiry struct {
	fire func(ids []string)

	mu      sync.Mutex
	due     map[string]time.Time
	started bool
	stopped bool
	timer   *time.Timer
	at      time.Time // when the timer rings; zero when none is armed
	gen     uint64    // counts armings, so that a timer replaced after it rang does nothing
}

func newExpiry(fire func(ids []string)) *expiry {
	return &expiry{fire: fire, due: map[string]time.Time{}}
}

// track keeps (or moves) the expiry of ask id.
func (e *expiry) track(id string, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.due[id] = at
	e.arm()
}

// forget drops ask id: it is no longer open.
func (e *expiry) forget(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.due[id]; !ok {
		return
	}
	delete(e.due, id)
	e.arm()
}

// len returns how many asks are tracked.
func (e *expiry) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.due)
}

// next returns when the timer rings next, and whether one is armed.
func (e *expiry) next() (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at, e.timer != nil
}

// start arms the timer for the asks tracked so far, and from now on.
func (e *expiry) start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.started = true
	e.arm()
}

// stop disarms the timer for good.
func (e *expiry) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	e.disarm()
}

// arm sets the timer for the earliest expiry, unless it is set for it
// already. e.mu is held.
func (e *expiry) arm() {
	if !e.started || e.stopped {
		return
	}
	var earliest time.Time
	for _, at := range e.due {
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	if earliest.IsZero() {
		e.disarm()
		return
	}
	if e.timer != nil && e.at.Equal(earliest) {
		return
	}
	e.disarm()
	e.gen++
	gen := e.gen
	e.at = earliest
	e.timer = time.AfterFunc(time.Until(earliest), func() { e.ring(gen) })
}

// disarm stops the timer. e.mu is held.
func (e *expiry) disarm() {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = nil
	e.at = time.Time{}
}

// ring hands every ask whose time is up to fire, and arms the timer for the
// next.
func (e *expiry) ring(gen uint64) {
	e.mu.Lock()
	if gen != e.gen || e.stopped {
		e.mu.Unlock()
		return
	}
	e.timer = nil
	e.at = time.Time{}
	now := time.Now()
	var ids []string
	for id, at := range e.due {
		if !at.After(now) {
			ids = append(ids, id)
			delete(e.due, id)
		}
	}
	e.arm()
	e.mu.Unlock()
	slices.Sort(ids)
	if len(ids) > 0 {
		e.fire(ids)
	}
}
