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
	on     atomic.Bool // set while gate is not nil
	acksOn atomic.Bool // set while acks is not nil
	mu     sync.Mutex
	gate   chan struct{} // closed when the loop goes on; nil when off
	renew  chan struct{} // closed when the renewal goes on; nil when off
	kept   []bus.Change
	// acks, while not nil, keeps the loop from taking the acks of its
	// writes until it is closed (export_test.go's HoldAcks).
	acks chan struct{}
}

// acksHeld returns the channel closed when the acks go on, or nil when
// they are not held.
func (p *pause) acksHeld() <-chan struct{} {
	if !p.acksOn.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.acks == nil {
		return nil
	}
	return p.acks
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
