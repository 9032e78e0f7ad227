package assemble

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Settle waits until a running seat has settled: it has taken and judged
// every write made so far to the buckets it follows ([seat.Seat.Marks])
// and has nothing left to do. up waits so before it prints a summary, and
// --once before it prints what the seat keeps.
type Settle struct {
	// Seat is the seat that runs.
	Seat *seat.Seat
	// JS reads the marks of the buckets the seat follows.
	JS jetstream.JetStream
	// Results are the seat's results (its OnResult); each is given to
	// Said while Settle waits.
	Results <-chan *compose.Result
	// Said, if set, is called with each result taken from Results.
	Said func(*compose.Result)
	// SeatDone receives why the seat process stopped (nil: it stopped):
	// the wait then ends with that error.
	SeatDone <-chan error
}

// ErrSeatStopped is returned by a [Settle] wait when the seat process
// stopped without an error of its own.
var ErrSeatStopped = errors.New("the seat stopped")

// Quiet waits until the mesh is quiet: the provider of every needed key
// among providers (those that run here) has an entry for it, the seat has
// taken and judged every write made so far to the buckets it follows (the
// bound buckets of the providers included: [seat.Seat.Marks]) and has
// nothing left to do, and nothing was written to those buckets meanwhile.
// When providers run, it returns the copy of the provisions bucket it
// followed (with values, following until follow is done), for a print of
// what the seat keeps; else nil.
func (s Settle) Quiet(ctx, follow context.Context, providers []string) (*bus.Copy, error) {
	if len(providers) == 0 {
		return nil, s.Settled(ctx)
	}
	// The providers' answers are followed only once the seat has settled
	// a first time: the seat writes every provision at least once at
	// start, and a provided one again, so that following from the start
	// cost the server a delivery and a decode for each of those
	// changes; from then on the copy reads each provision once and the
	// few changes after.
	if err := s.Settled(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered, provisions, err := followAnswers(ctx, follow, s.JS, providers)
	if err != nil {
		return nil, err
	}
	for {
		if err := PollUntil(ctx, answered); err != nil {
			return nil, err
		}
		marks := s.Seat.Marks(ctx, s.JS)
		if err := s.settledAt(ctx, marks); err != nil {
			return nil, err
		}
		// A provider that answered late, or keys the seat wrote meanwhile
		// that a provider has yet to answer: once more.
		if answered() && maps.Equal(s.Seat.Marks(ctx, s.JS), marks) {
			return provisions, nil
		}
	}
}

// followAnswers follows the bound buckets of providers until ctx is done
// and the provisions until follow is done, and returns once each copy holds its bucket's keys,
// with a function that reports whether the provider of every needed key
// among providers has an entry for it, and the copy of the provisions. It
// keeps aside only the keys one of providers answers, each with its
// provider; the bound buckets' copies keep revisions only, and of each
// provision only the provider and state are read, once per change (a mesh
// of 10,000 nodes holds over 300,000: see answerReader).
func followAnswers(ctx, follow context.Context, js jetstream.JetStream, providers []string) (answered func() bool, provisions *bus.Copy, err error) {
	bound := map[string]*bus.Copy{}
	var copies []*bus.Copy
	for _, p := range providers {
		bound[p] = bus.Follow(ctx, js, mesh.BoundBucket(p), bus.Options{Create: true, RevisionsOnly: true})
		copies = append(copies, bound[p])
	}
	var mu sync.Mutex
	answers := map[string]string{} // key -> its provider, one of providers
	var reader answerReader        // on the copy's goroutine only
	provs := bus.Follow(follow, js, mesh.ProvisionsBucket, bus.Options{OnChange: func(ch bus.Change) {
		mu.Lock()
		defer mu.Unlock()
		if !ch.Deleted {
			if p, answered := reader.read(ch.Value); answered && bound[p] != nil {
				answers[ch.Key] = p
				return
			}
		}
		delete(answers, ch.Key)
	}})
	if err := ready(ctx, append(copies, provs)...); err != nil {
		return nil, nil, err
	}
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		for key, p := range answers {
			if _, has := bound[p].Get(key); !has {
				return false
			}
		}
		return true
	}, provs, nil
}

// ready waits until every copy holds its bucket's keys.
func ready(ctx context.Context, copies ...*bus.Copy) error {
	for _, c := range copies {
		select {
		case <-c.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// PollUntil checks cond every 50 ms until it holds or ctx is done (its
// error then): a wait on what other components write.
func PollUntil(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if cond() {
			return nil
		}
	}
}

// WaitApplied waits until every plan has been applied by its node's client
// at the plan's build, reading the plans and applied buckets through js. Each plan and applied value is decoded once per
// change (its fingerprint kept), not at every poll.
func WaitApplied(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// fingerprint is a value's fingerprint; ok is false when the value
	// does not decode (never applied, then).
	type fingerprint struct {
		fp string
		ok bool
	}
	var mu sync.Mutex
	planned := map[string]fingerprint{} // plan key -> the plan's
	applied := map[string]fingerprint{} // plan key -> the applied value's
	follow := func(bucket string, into map[string]fingerprint, decode func([]byte) (string, error), create bool) *bus.Copy {
		return bus.Follow(ctx, js, bucket, bus.Options{Create: create, RevisionsOnly: true, OnChange: func(ch bus.Change) {
			mu.Lock()
			defer mu.Unlock()
			if ch.Deleted {
				delete(into, ch.Key)
				return
			}
			fp, err := decode(ch.Value)
			into[ch.Key] = fingerprint{fp, err == nil}
		}})
	}
	plans := follow(mesh.PlansBucket, planned, func(v []byte) (string, error) {
		var p mesh.Plan
		err := json.Unmarshal(v, &p)
		return p.Fingerprint, err
	}, false)
	apps := follow(mesh.AppliedBucket, applied, func(v []byte) (string, error) {
		var a mesh.Applied
		err := json.Unmarshal(v, &a)
		return a.Fingerprint, err
	}, true)
	if err := ready(ctx, plans, apps); err != nil {
		return err
	}
	return PollUntil(ctx, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for key, p := range planned {
			if a, has := applied[key]; !p.ok || !has || !a.ok || a.fp != p.fp {
				return false
			}
		}
		return true
	})
}

// Settled waits until the seat has taken every write made so far to the
// buckets it follows ([seat.Seat.Marks]) and has nothing left to do.
func (s Settle) Settled(ctx context.Context) error {
	return s.settledAt(ctx, s.Seat.Marks(ctx, s.JS))
}

// settledAt waits until the seat has taken every write up to marks and
// has nothing left to do.
func (s Settle) settledAt(ctx context.Context, marks map[string]uint64) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-s.SeatDone:
			if err == nil {
				err = ErrSeatStopped
			}
			return err
		case r := <-s.Results:
			if s.Said != nil {
				s.Said(r)
			}
		case <-tick.C:
			if s.Seat.Settled(marks) && len(s.Results) == 0 {
				return nil
			}
		}
	}
}
