package seat

import (
	"sync"
	"sync/atomic"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// pause holds a seat still the way SIGSTOP holds a process, for tests
// (export_test.go): while it is on, the seat's loop and its lease's
// renewal wait at their next step, and the changes its watches take are
// kept back in order, as a stopped process's socket keeps them. Off (its
// zero value), it costs one atomic load per change.
type pause struct {
	on    atomic.Bool // set while gate is not nil
	mu    sync.Mutex
	gate  chan struct{} // closed when the loop goes on; nil when off
	renew chan struct{} // closed when the renewal goes on; nil when off
	kept  []bus.Change
}

// wait blocks the loop while the pause is on.
func (p *pause) wait() {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	if g != nil {
		<-g
	}
}

// waitRenew blocks the lease's renewal while the pause is on.
func (p *pause) waitRenew() {
	p.mu.Lock()
	g := p.renew
	p.mu.Unlock()
	if g != nil {
		<-g
	}
}

// keep keeps ch back and reports true while the pause is on.
func (p *pause) keep(ch bus.Change) bool {
	if !p.on.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		return false
	}
	p.kept = append(p.kept, ch)
	return true
}
