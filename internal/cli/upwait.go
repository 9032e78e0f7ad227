package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// waitQuiet waits until the mesh is quiet: the provider of every needed
// key among providers (those up runs) has an entry for it, the seat has
// taken and judged every write made so far to the buckets it follows (the
// bound buckets of the providers included: [seat.Seat.Marks]) and has
// nothing left to do, and nothing was written to those buckets meanwhile.
// It prints the seat's results as they come. When providers run, it
// returns the copy of the provisions bucket it followed (with values,
// following until follow is done), for the print of up --once; else nil.
func waitQuiet(ctx, follow context.Context, st *seat.Seat, js jetstream.JetStream, providers []string,
	results <-chan *compose.Result, out io.Writer, seatDone <-chan error) (*bus.Copy, error) {
	if len(providers) == 0 {
		return nil, waitSettled(ctx, st, js, results, out, seatDone)
	}
	// The providers' answers are followed only once the seat has settled
	// a first time: the seat writes every provision at least once at
	// start, and a provided one again, so that following from the start
	// cost the server a delivery and up a decode for each of those
	// changes; from then on the copy reads each provision once and the
	// few changes after.
	if err := waitSettled(ctx, st, js, results, out, seatDone); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered, provisions, err := followAnswers(ctx, follow, js, providers)
	if err != nil {
		return nil, err
	}
	for {
		if err := pollUntil(ctx, answered); err != nil {
			return nil, err
		}
		marks := st.Marks(ctx, js)
		if err := waitSettledAt(ctx, st, marks, results, out, seatDone); err != nil {
			return nil, err
		}
		// A provider that answered late, or keys the seat wrote meanwhile
		// that a provider has yet to answer: once more.
		if answered() && maps.Equal(st.Marks(ctx, js), marks) {
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

// pollUntil checks cond every 50 ms until it holds or ctx is done: the
// operator's command waits on what other components write.
func pollUntil(ctx context.Context, cond func() bool) error {
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

// waitApplied waits until every plan has been applied by its node's client
// at the plan's build. Each plan and applied value is decoded once per
// change (its fingerprint kept), not at every poll.
func waitApplied(ctx context.Context, js jetstream.JetStream) error {
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
	return pollUntil(ctx, func() bool {
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

// waitSettled prints results until the seat has taken every write made so
// far to the buckets it follows ([seat.Seat.Marks]) and has nothing left to
// do.
func waitSettled(ctx context.Context, st *seat.Seat, js jetstream.JetStream, results <-chan *compose.Result, out io.Writer, seatDone <-chan error) error {
	return waitSettledAt(ctx, st, st.Marks(ctx, js), results, out, seatDone)
}

// waitSettledAt prints results until the seat has taken every write up to
// marks and has nothing left to do.
func waitSettledAt(ctx context.Context, st *seat.Seat, marks map[string]uint64, results <-chan *compose.Result, out io.Writer, seatDone <-chan error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-seatDone:
			if err == nil {
				err = fmt.Errorf("the seat stopped")
			}
			return err
		case r := <-results:
			printResult(out, r)
		case <-tick.C:
			if st.Settled(marks) && len(results) == 0 {
				return nil
			}
		}
	}
}
