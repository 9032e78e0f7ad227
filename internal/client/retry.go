package client

import (
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// The backoff of a module whose apply failed: from 250 ms, growing to 10 s.
const (
	retryMin = 250 * time.Millisecond
	retryMax = 10 * time.Second
)

// retry holds the modules whose apply failed (a folder it could not make,
// a write of applied or collect the bus did not take while a server
// stopped): nothing else would apply them again until their plan changes,
// so each is marked again after a backoff that grows with each failed
// round and starts again once a round applies without failing. Its methods
// are safe for concurrent use.
type retry struct {
	mu      sync.Mutex
	bo      *backoff.ExponentialBackOff
	modules map[string]bool // failed, waiting for the backoff
	armed   bool            // a timer will mark them again
}

// fail notes that module failed to apply and, unless a timer is already
// armed, arms one that calls mark for every failed module after the
// backoff. It returns the wait when it armed one, else 0.
func (r *retry) fail(module string, mark func(string)) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.modules == nil {
		r.modules = map[string]bool{}
	}
	if r.bo == nil {
		r.bo = backoff.NewExponentialBackOff()
		r.bo.InitialInterval = retryMin
		r.bo.MaxInterval = retryMax
	}
	r.modules[module] = true
	if r.armed {
		return 0
	}
	r.armed = true
	wait := r.bo.NextBackOff()
	time.AfterFunc(wait, func() {
		r.mu.Lock()
		failed := r.modules
		r.modules = map[string]bool{}
		r.armed = false
		r.mu.Unlock()
		for m := range failed {
			mark(m)
		}
	})
	return wait
}

// applied notes a round of applies with no failure: the next failure
// waits the least again.
func (r *retry) applied() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bo != nil && !r.armed && len(r.modules) == 0 {
		r.bo.Reset()
	}
}
