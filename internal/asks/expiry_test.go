package asks

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// rings records what an expiry hands to fire.
type rings struct {
	mu  sync.Mutex
	got []string
}

func (r *rings) fire(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, fmt.Sprint(ids))
}

func (r *rings) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.got)
}

// after lets fake time pass by d (and a second), then waits until every
// goroutine of the bubble is blocked, so that what rang has been fired.
func after(d time.Duration) {
	time.Sleep(d + time.Second)
	synctest.Wait()
}

func TestExpiry(t *testing.T) {
	for _, c := range []struct {
		name  string
		steps func(e *expiry, r *rings, start time.Time) string
		want  string
	}{
		{
			name: "rings for the earliest, then the next",
			steps: func(e *expiry, r *rings, start time.Time) string {
				e.track("b", start.Add(2*time.Hour))
				e.track("a", start.Add(time.Hour))
				after(time.Hour)
				return ""
			},
			want: "[[a]]",
		},
		{
			name: "rings for each in turn",
			steps: func(e *expiry, r *rings, start time.Time) string {
				e.track("b", start.Add(2*time.Hour))
				e.track("a", start.Add(time.Hour))
				after(2 * time.Hour)
				return ""
			},
			want: "[[a] [b]]",
		},
		{
			name: "asks due together ring together",
			steps: func(e *expiry, r *rings, start time.Time) string {
				e.track("b", start.Add(time.Hour))
				e.track("a", start.Add(time.Hour))
				after(time.Hour)
				return ""
			},
			want: "[[a b]]",
		},
		{
			name: "a forgotten ask does not ring",
			steps: func(e *expiry, r *rings, start time.Time) string {
				e.track("a", start.Add(time.Hour))
				e.forget("a")
				after(2 * time.Hour)
				if _, armed := e.next(); armed {
					return "armed with nothing tracked"
				}
				return ""
			},
			want: "[]",
		},
		{
			name: "an earlier ask re-arms the timer",
			steps: func(e *expiry, r *rings, start time.Time) string {
				e.track("a", start.Add(2*time.Hour))
				e.track("c", start.Add(30*time.Minute))
				if at, _ := e.next(); !at.Equal(start.Add(30 * time.Minute)) {
					return fmt.Sprintf("armed for %v; want %v", at, start.Add(30*time.Minute))
				}
				after(30 * time.Minute)
				return ""
			},
			want: "[[c]]",
		},
		{
			name: "a moved expiry rings at its new time",
			steps: func(e *expiry, r *rings, start time.Time) string {
				e.track("a", start.Add(time.Hour))
				e.track("a", start.Add(3*time.Hour))
				after(time.Hour)
				if got := r.String(); got != "[]" {
					return "fired " + got + " at the old time"
				}
				after(2 * time.Hour)
				return ""
			},
			want: "[[a]]",
		},
		{
			name: "an ask already due rings at once",
			steps: func(e *expiry, r *rings, start time.Time) string {
				e.track("a", start.Add(-time.Minute))
				synctest.Wait()
				return ""
			},
			want: "[[a]]",
		},
		{
			name: "nothing rings after stop",
			steps: func(e *expiry, r *rings, start time.Time) string {
				e.track("a", start.Add(time.Hour))
				e.stop()
				after(2 * time.Hour)
				return ""
			},
			want: "[]",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var r rings
				e := newExpiry(r.fire)
				e.start()
				defer e.stop()
				if msg := c.steps(e, &r, time.Now()); msg != "" {
					t.Error(msg)
				}
				if got := r.String(); got != c.want {
					t.Errorf("fired %s; want %s", got, c.want)
				}
			})
		})
	}
}

func TestExpiryArmsOnlyOnceStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r rings
		e := newExpiry(r.fire)
		defer e.stop()
		start := time.Now()
		e.track("past", start.Add(-time.Hour))
		e.track("later", start.Add(time.Hour))
		after(0)
		if got := r.String(); got != "[]" {
			t.Fatalf("fired %s before start; want []", got)
		}
		if _, armed := e.next(); armed {
			t.Fatal("armed before start")
		}
		e.start()
		synctest.Wait()
		if got := r.String(); got != "[[past]]" {
			t.Fatalf("fired %s at start; want [[past]]", got)
		}
		after(time.Hour)
		if got := r.String(); got != "[[past] [later]]" {
			t.Errorf("fired %s; want [[past] [later]]", got)
		}
		if n := e.len(); n != 0 {
			t.Errorf("len() = %d after both rang; want 0", n)
		}
	})
}

func TestExpiryFireMayTrackAgain(t *testing.T) {
	// The router tracks an ask again when its expiry could not be written;
	// doing so from fire must not deadlock and must ring again.
	synctest.Test(t, func(t *testing.T) {
		var r rings
		var e *expiry
		tries := 0
		e = newExpiry(func(ids []string) {
			r.fire(ids)
			if tries++; tries < 3 {
				e.track(ids[0], time.Now().Add(time.Second))
			}
		})
		e.start()
		defer e.stop()
		e.track("a", time.Now().Add(time.Minute))
		after(time.Minute + 5*time.Second)
		if got := r.String(); got != "[[a] [a] [a]]" {
			t.Errorf("fired %s; want [[a] [a] [a]]", got)
		}
	})
}
