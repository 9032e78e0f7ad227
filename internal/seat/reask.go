package seat

import (
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// reask holds the asks that no ask router recorded (no responders, no
// reply in time): each is raised again, the same ask under the same id,
// after a backoff that grows with each failed round and starts again once
// a raise is recorded. The router records an id once (a raise of an id it
// holds answers with its record), so an ask whose reply was lost is never
// recorded twice. The key keeps naming its ask meanwhile: a retiring key is
// never left without one. Its methods are safe for concurrent use.
type reask struct {
	mu    sync.Mutex
	bo    *backoff.ExponentialBackOff
	asks  map[string]mesh.Ask // id -> the ask, waiting for the backoff
	due   []mesh.Ask          // the backoff is over: for the loop
	armed bool                // a timer will hand the asks to the loop
	timer *time.Timer
}

// The backoff of raising an unrecorded ask again: from 1 s, growing to
// 30 s.
const (
	reaskMin = time.Second
	reaskMax = 30 * time.Second
)

// fail notes that no router recorded a and, unless a timer is armed, arms
// one: after the backoff, the asks are handed to the loop and wake is
// called. It returns how long until they are raised again (0 when a timer
// was armed already).
func (r *reask) fail(a mesh.Ask, wake func()) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.asks == nil {
		r.asks = map[string]mesh.Ask{}
	}
	if r.bo == nil {
		r.bo = backoff.NewExponentialBackOff()
		r.bo.InitialInterval = reaskMin
		r.bo.MaxInterval = reaskMax
	}
	r.asks[a.ID] = a
	if r.armed {
		return 0
	}
	r.armed = true
	wait := r.bo.NextBackOff()
	r.timer = time.AfterFunc(wait, func() {
		r.mu.Lock()
		for _, a := range r.asks {
			r.due = append(r.due, a)
		}
		r.asks = map[string]mesh.Ask{}
		r.armed = false
		r.mu.Unlock()
		wake()
	})
	return wait
}

// recorded notes that a router recorded an ask: once none waits, the
// backoff starts again from its least.
func (r *reask) recorded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.asks) == 0 && len(r.due) == 0 && !r.armed && r.bo != nil {
		r.bo.Reset()
	}
}

// take returns the asks whose backoff is over, for the loop to raise
// again.
func (r *reask) take() []mesh.Ask {
	r.mu.Lock()
	defer r.mu.Unlock()
	due := r.due
	r.due = nil
	return due
}

// drop forgets every ask waiting (the seat lost its lease or stopped: the
// next holder asks what its keys name).
func (r *reask) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.asks, r.due, r.armed = nil, nil, false
}

// waiting returns how many asks wait to be raised again.
func (r *reask) waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asks) + len(r.due)
}
