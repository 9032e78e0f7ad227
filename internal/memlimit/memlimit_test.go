package memlimit

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		floor  uint64
		factor float64
		live   uint64
		want   int64
	}{
		{256 << 20, 1.5, 0, 256 << 20},
		{256 << 20, 1.5, 100 << 20, 256 << 20},
		{256 << 20, 1.5, 200 << 20, 300 << 20},
		{256 << 20, 2, 2 << 30, 4 << 30},
		{1, 2, math.MaxUint64, math.MaxInt64},
	} {
		if got := Limit(c.floor, c.factor, c.live); got != c.want {
			t.Errorf("Limit(%d, %v, %d) = %d, want %d", c.floor, c.factor, c.live, got, c.want)
		}
	}
}

// unsetenv clears name for the test (t.Setenv puts it back after).
func unsetenv(t *testing.T, name string) {
	t.Setenv(name, "")
	os.Unsetenv(name)
}

// limit is the soft memory limit in force.
func limit() int64 { return debug.SetMemoryLimit(-1) }

// waitLimit collects until ok(limit()) or fails the test after 10 s.
func waitLimit(t *testing.T, what string, ok func(int64) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(limit()) {
		if time.Now().After(deadline) {
			t.Fatalf("the limit is %d MiB; want %s", limit()>>20, what)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

var held []byte

func TestFollowTracksTheLiveHeap(t *testing.T) {
	unsetenv(t, "GOGC")
	unsetenv(t, "GOMEMLIMIT")
	before := limit()
	const floor = 32 << 20
	stop, ok := Follow(floor, 1.5)
	if !ok {
		t.Fatal("Follow did nothing with neither GOGC nor GOMEMLIMIT set")
	}
	runtime.GC()
	waitLimit(t, "the floor, 32 MiB, while little is live", func(l int64) bool { return l == floor })

	held = make([]byte, 64<<20)
	for i := range held {
		held[i] = byte(i)
	}
	// 1.5 x 64 MiB and what else is live.
	waitLimit(t, "at least 96 MiB with 64 MiB held", func(l int64) bool { return l >= 96<<20 && l < 1<<30 })

	held = nil
	waitLimit(t, "the floor again once the 64 MiB are let go", func(l int64) bool { return l == floor })

	stop()
	if got := limit(); got != before {
		t.Errorf("after stop the limit is %d, want %d as before", got, before)
	}
	runtime.GC()
	runtime.GC()
	if got := limit(); got != before {
		t.Errorf("a collection after stop set the limit to %d, want %d as before", got, before)
	}
}

func TestFollowLeavesTheOperatorsChoice(t *testing.T) {
	before := limit()
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		unsetenv(t, "GOGC")
		unsetenv(t, "GOMEMLIMIT")
		t.Setenv(env, "200")
		stop, ok := Follow(32<<20, 1.5)
		stop()
		if ok {
			t.Errorf("Follow with %s set: ok true, want false", env)
		}
		runtime.GC()
		if got := limit(); got != before {
			t.Errorf("Follow with %s set changed the limit to %d", env, got)
		}
	}
	if _, ok := Follow(0, 1.5); ok {
		t.Error("Follow with floor 0: ok true")
	}
	if _, ok := Follow(32<<20, 0.5); ok {
		t.Error("Follow with factor 0.5: ok true")
	}
}
