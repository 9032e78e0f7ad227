// Package memlimit keeps a process's memory near what it holds: a soft
// memory limit (see [debug.SetMemoryLimit]) that follows the live heap.
//
// Go's collector, by default (GOGC=100), lets the heap grow to twice what
// was live after the last collection before it collects again, so that a
// process holding 180 MiB reaches 360 MiB and more of resident memory. A
// limit of factor × the live heap (1.5 for `up`) makes it collect sooner
// when that would be passed, and never lower than floor, so that a process
// holding little is left to the collector's own pacing. The limit follows
// the live heap after every collection, up as a mesh grows and down as it
// shrinks: a fixed limit below a large mesh's live heap would make the
// collector run without rest.
package memlimit

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// liveHeap is the runtime metric of the heap's bytes marked live by the
// last collection.
const liveHeap = "/gc/heap/live:bytes"

// Follow sets this process's soft memory limit to max(floor, factor × the
// live heap) and sets it again after every collection (from a cleanup that
// the collector runs once per cycle), until stop is called, which puts
// back the limit that was in force before. floor is in bytes.
//
// It does nothing and reports ok false when the environment sets GOGC or
// GOMEMLIMIT (the operator chose how this process collects), or when
// factor is less than 1 or floor is 0.
func Follow(floor uint64, factor float64) (stop func(), ok bool) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" || factor < 1 || floor == 0 {
		return func() {}, false
	}
	f := &follower{floor: floor, factor: factor, before: debug.SetMemoryLimit(-1)}
	f.sample = []metrics.Sample{{Name: liveHeap}}
	f.set()
	f.arm()
	return f.stop, true
}

// follower is one Follow's state; the cleanup that sets the limit after a
// collection holds it.
type follower struct {
	floor  uint64
	factor float64
	before int64 // the limit in force before Follow

	mu      sync.Mutex
	stopped bool
	sample  []metrics.Sample
}

// sentinel is what the collector frees at every cycle: big enough that
// the allocator does not pack it with other small objects (which would
// keep it alive past its cycle).
type sentinel struct{ _ [64]byte }

// arm allocates a sentinel that nothing holds, whose cleanup runs after
// the next collection.
func (f *follower) arm() {
	runtime.AddCleanup(new(sentinel), (*follower).collected, f)
}

// collected sets the limit from the live heap the collection left, and
// arms the next cycle's sentinel.
func (f *follower) collected() {
	if f.set() {
		f.arm()
	}
}

// set sets the limit from the live heap; it reports false once stopped.
func (f *follower) set() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	debug.SetMemoryLimit(Limit(f.floor, f.factor, f.live()))
	return true
}

// live is the heap's bytes marked live by the last collection (0 before
// the first).
func (f *follower) live() uint64 {
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return f.sample[0].Value.Uint64()
}

func (f *follower) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopped = true
		debug.SetMemoryLimit(f.before)
	}
}

// Limit is the soft memory limit Follow sets for a live heap of live
// bytes: max(floor, factor × live), in bytes, at most math.MaxInt64.
func Limit(floor uint64, factor float64, live uint64) int64 {
	l := factor * float64(live)
	if l < float64(floor) {
		l = float64(floor)
	}
	if l >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(l)
}
