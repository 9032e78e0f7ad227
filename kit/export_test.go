package kit

import "github.com/mesh-provisioner/mesh-provisioner/internal/bus"

// Idle reports whether the kit has no key queued, being handled or due
// for another try (a write that failed, a handler error, a waits result),
// and no entry write queued, in flight, or done with its outcome not yet
// taken (a write that failed is tried again: see writer.busy): nothing it
// does changes an entry until something else changes.
func (k *Kit) Idle() bool {
	k.q.mu.Lock()
	busy := len(k.q.order) > 0 || len(k.q.processing) > 0
	k.q.mu.Unlock()
	busy = busy || k.w.busy()
	k.mu.Lock()
	busy = busy || len(k.later) > 0
	k.mu.Unlock()
	return !busy
}

// Held returns how many provisions k holds whole and how many in part.
func Held(k *Kit) (whole, part int) { return k.held() }

// Take hands k one change of the provisions bucket, as its copy does.
func Take(k *Kit, ch bus.Change) { k.took(ch) }
