package bus

import (
	"maps"
	"sync"
)

// WatchCount is how often the watches of one bucket's copies in this
// process broke and came back; see [WatchCounts].
type WatchCount struct {
	// GiveUps counts each watch that ended or could not start while its
	// copy was still following (server restart, lost connection, bucket
	// missing, permission denied): each is said in the log.
	GiveUps uint64
	// Restarts counts each watch that, after a give-up, delivered the
	// bucket's current values again.
	Restarts uint64
}

var watchCounts = struct {
	sync.Mutex
	m map[string]WatchCount
}{m: map[string]WatchCount{}}

// WatchCounts returns, per bucket, the give-ups and restarts of every
// [Copy] this process has run since it started: counters that only grow,
// for metrics. It is safe for concurrent use; the map is the caller's.
func WatchCounts() map[string]WatchCount {
	watchCounts.Lock()
	defer watchCounts.Unlock()
	return maps.Clone(watchCounts.m)
}

func countGiveUp(bucket string) {
	watchCounts.Lock()
	c := watchCounts.m[bucket]
	c.GiveUps++
	watchCounts.m[bucket] = c
	watchCounts.Unlock()
}

func countRestart(bucket string) {
	watchCounts.Lock()
	c := watchCounts.m[bucket]
	c.Restarts++
	watchCounts.m[bucket] = c
	watchCounts.Unlock()
}
