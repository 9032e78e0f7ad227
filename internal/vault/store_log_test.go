package vault

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The store is a log: it reopens to the same values after rotations and
// removals, and a log of mostly superseded records is written anew at
// start (one whose compaction while running failed, or never ran: here
// held off; see TestStoreCompactsWhileRunning).
func TestStoreLogReopensAndCompacts(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.noCompactBelow = 1 << 30
	a, _ := s.Ensure("a")
	for i := 0; i < 100; i++ {
		if a, err = s.Rotate("a"); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := s.Ensure("b")
	s.Ensure("c")
	if err := s.Remove("c"); err != nil {
		t.Fatal(err)
	}
	if s.records != 104 {
		t.Errorf("records in the log = %d; want 104", s.records)
	}
	again, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Get("a"); got != a || a.Generation != 101 {
		t.Errorf("a after reopening = %+v; want %+v at generation 101", got, a)
	}
	if got, _ := again.Get("b"); got != b {
		t.Errorf("b after reopening = %+v; want %+v", got, b)
	}
	if _, ok := again.Get("c"); ok {
		t.Error("c came back after its removal")
	}
	if again.records != 3 {
		t.Errorf("records after reopening = %d; want 3 (the log written anew: a, b and c's removal)", again.records)
	}
	lines, _ := os.ReadFile(filepath.Join(dir, StoreFile))
	if n := bytes.Count(lines, []byte("\n")); n != 3 {
		t.Errorf("store file has %d lines; want 3", n)
	}
	if !bytes.Contains(lines, []byte(`{"name":"c","generation":1,"removed":true}`)) {
		t.Errorf("the log written anew lost c's removal record:\n%s", lines)
	}
	// c issued again after the compaction gets the generation after its last.
	c, err := again.Ensure("c")
	if err != nil || c.Generation != 2 {
		t.Errorf("Ensure(c) after its removal and a compaction = %+v, %v; want generation 2", c, err)
	}
}

// A removed name issued again gets the generation after its last one, in
// memory, after reopening, and after a compaction that keeps the removal;
// a removal record without a generation (an older log) counts as 0.
func TestStoreRemovedNameKeepsItsGeneration(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	const name = "control.postgres.credential.x"
	if _, err := s.Ensure(name); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rotate(name); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(name); ok {
		t.Fatal("Get after Remove found the value")
	}
	if _, err := s.Rotate(name); err == nil {
		t.Error("Rotate of a removed name = nil error; want ErrUnknown")
	}
	v3, err := s.Ensure(name)
	if err != nil || v3.Generation != 3 {
		t.Fatalf("Ensure after Remove = %+v, %v; want generation 3", v3, err)
	}
	if err := s.Remove(name); err != nil {
		t.Fatal(err)
	}
	// Reopened: the removal with generation 3 is kept in memory.
	s2, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g := s2.removed[name]; g != 3 {
		t.Errorf("removed[%s] after reopening = %d; want 3", name, g)
	}
	// Enough records to be written anew at the next start (not while
	// running: held off).
	s2.noCompactBelow = 1 << 30
	for i := 0; i < 80; i++ {
		if _, err := s2.Ensure("filler"); err != nil {
			t.Fatal(err)
		}
		if err := s2.Remove("filler"); err != nil {
			t.Fatal(err)
		}
	}
	s3, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s3.records != 2 {
		t.Errorf("records after the compaction = %d; want 2 (two removal records)", s3.records)
	}
	v4, err := s3.Ensure(name)
	if err != nil || v4.Generation != 4 {
		t.Errorf("Ensure after reopening and compaction = %+v, %v; want generation 4", v4, err)
	}
	if f, err := s3.Ensure("filler"); err != nil || f.Generation != 81 {
		t.Errorf("Ensure(filler) = %+v, %v; want generation 81", f, err)
	}

	// A removal record of an older log carries no generation.
	old := t.TempDir()
	o, err := OpenStore(old)
	if err != nil {
		t.Fatal(err)
	}
	o.Ensure("y")
	if _, err := o.log.WriteString(`{"name":"y","removed":true}` + "\n"); err != nil {
		t.Fatal(err)
	}
	o2, err := OpenStore(old)
	if err != nil {
		t.Fatal(err)
	}
	if y, err := o2.Ensure("y"); err != nil || y.Generation != 2 {
		t.Errorf("Ensure(y) after an old removal record = %+v, %v; want generation 2 (the value's own)", y, err)
	}
}

// Values ensured at the same time share one sync of the log, and each
// Ensure returns only once its value is on disk: a store opened again
// holds every value handed out.
func TestStoreSharesOneSyncBetweenConcurrentValues(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	// With the group commit held, every Ensure writes its record and waits.
	s.gmu.Lock()
	got := make(chan Value, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			v, err := s.Ensure(fmt.Sprintf("key-%d", i))
			if err != nil {
				errs <- err
				return
			}
			got <- v
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.written.Load() < n {
		if time.Now().After(deadline) {
			s.gmu.Unlock()
			t.Fatalf("records written = %d after 30s; want %d", s.written.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case v := <-got:
		s.gmu.Unlock()
		t.Fatalf("Ensure returned %+v before its record was synced", v)
	default:
	}
	s.gmu.Unlock()
	values := map[string]Value{}
	for range n {
		select {
		case v := <-got:
			values[v.Name] = v
		case err := <-errs:
			t.Fatal(err)
		}
	}
	s.gmu.Lock()
	syncs := s.syncs
	s.gmu.Unlock()
	if syncs != 1 {
		t.Errorf("syncs for %d values written together = %d; want 1", n, syncs)
	}
	again, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range values {
		if got, ok := again.Get(name); !ok || got != v {
			t.Errorf("%s after reopening = %+v, %v; want %+v", name, got, ok, v)
		}
	}
	if len(values) != n {
		t.Errorf("values handed out = %d; want %d", len(values), n)
	}
}

// TestStoreSyncPace checks the group commit's pace (syncGap, syncBatch) on
// the bubble's clock: values ensured one after the other never wait; grouped
// values (the kit's credentials) that come close together wait for the next
// sync, up to syncGap after the last one began, and share it; syncBatch of
// them, or a value that is not grouped, go at once.
func TestStoreSyncPace(t *testing.T) {
	open := func(t *testing.T) *Store {
		t.Helper()
		s, err := OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	syncs := func(s *Store) int {
		s.gmu.Lock()
		defer s.gmu.Unlock()
		return s.syncs
	}
	// ensure ensures n values named prefix-i, each in its own goroutine
	// after its own delay, and waits for them all.
	ensure := func(t *testing.T, s *Store, prefix string, n int, grouped bool, delay func(i int) time.Duration) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				time.Sleep(delay(i))
				if _, err := s.ensure(fmt.Sprintf("%s-%d", prefix, i), grouped); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	apart := func(i int) time.Duration { return time.Duration(i) * time.Millisecond }
	for _, c := range []struct {
		name    string
		n       int
		grouped bool
		delay   func(i int) time.Duration
		// What ensuring n values more costs after one grouped value
		// was synced (which starts syncGap).
		waited time.Duration
		syncs  int
	}{
		{"not grouped, 1ms apart", 10, false, apart, 9 * time.Millisecond, 10},
		{"grouped, 1ms apart", 10, true, apart, syncGap, 1},
		{"grouped, a batch at once", syncBatch, true, func(int) time.Duration { return 0 }, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := open(t)
				if _, err := s.ensure("first", true); err != nil {
					t.Fatal(err)
				}
				start, before := time.Now(), syncs(s)
				ensure(t, s, "v", c.n, c.grouped, c.delay)
				if waited, n := time.Since(start), syncs(s)-before; waited != c.waited || n != c.syncs {
					t.Errorf("%d values: all on disk after %v, in %d syncs; want %v and %d", c.n, waited, n, c.waited, c.syncs)
				}
			})
		})
	}
	t.Run("one after the other", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := open(t)
			start := time.Now()
			for i := range 20 {
				if _, err := s.Ensure(fmt.Sprintf("v-%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if waited, n := time.Since(start), syncs(s); waited != 0 || n != 20 {
				t.Errorf("20 values ensured one after the other: %v waited, %d syncs; want 0 and 20", waited, n)
			}
		})
	})
	t.Run("a value not grouped does not wait for the gap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := open(t)
			if _, err := s.ensure("first", true); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var wg sync.WaitGroup
			wg.Go(func() {
				if _, err := s.ensure("grouped", true); err != nil {
					t.Error(err)
				}
			})
			time.Sleep(5 * time.Millisecond)
			if _, err := s.Ensure("verb"); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if waited, n := time.Since(start), syncs(s); waited != 5*time.Millisecond || n != 2 {
				t.Errorf("a grouped value, then one not grouped 5ms later: on disk after %v, %d syncs; want 5ms and 2 (the first's, then one for both)", waited, n)
			}
		})
	})
	// A caller that is not grouped (Ensure, Get for the secret verb) of a
	// name whose grouped record is still pending is synced at once too: it
	// waited up to syncGap, as the grouped caller does.
	for _, c := range []struct {
		name string
		call func(s *Store) error
	}{
		{"Ensure", func(s *Store) error { _, err := s.Ensure("grouped"); return err }},
		{"Get", func(s *Store) error {
			if _, ok := s.Get("grouped"); !ok {
				return errors.New("Get(grouped): none")
			}
			return nil
		}},
	} {
		t.Run(c.name+" of a pending grouped value does not wait for the gap", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := open(t)
				if _, err := s.ensure("first", true); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				var wg sync.WaitGroup
				wg.Go(func() {
					if _, err := s.ensure("grouped", true); err != nil {
						t.Error(err)
					}
				})
				time.Sleep(5 * time.Millisecond)
				if err := c.call(s); err != nil {
					t.Fatal(err)
				}
				if waited := time.Since(start); waited != 5*time.Millisecond {
					t.Errorf("%s of a value grouped 5ms before: returned after %v; want 5ms (synced at once)", c.name, waited)
				}
				wg.Wait()
				if waited, n := time.Since(start), syncs(s); waited != 5*time.Millisecond || n != 2 {
					t.Errorf("grouped value on disk after %v, %d syncs; want 5ms and 2", waited, n)
				}
			})
		})
	}
}
