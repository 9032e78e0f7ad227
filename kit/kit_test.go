package kit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

var (
	provider = mesh.Ref{Module: "shelf", Node: "control"}
	vault    = mesh.Ref{Module: mesh.VaultModule, Node: "control"}
	gitea    = mesh.Ref{Module: "gitea", Node: "ace"}
)

// recorder is a small handler: it counts calls per key and answers what its
// provide function says.
type recorder struct {
	mu       sync.Mutex
	provides map[string]int
	retires  map[string]int
	seen     map[string][]mesh.Provision
	provide  func(key string, n int, p mesh.Provision) (kit.Result, error)
}

func newRecorder(provide func(key string, n int, p mesh.Provision) (kit.Result, error)) *recorder {
	return &recorder{provides: map[string]int{}, retires: map[string]int{}, seen: map[string][]mesh.Provision{}, provide: provide}
}

func (r *recorder) handler() kit.Handler {
	return kit.Funcs{
		ProvideFunc: func(_ context.Context, key mesh.ProvisionKey, p mesh.Provision) (kit.Result, error) {
			r.mu.Lock()
			r.provides[key.String()]++
			n := r.provides[key.String()]
			r.seen[key.String()] = append(r.seen[key.String()], p)
			r.mu.Unlock()
			return r.provide(key.String(), n, p)
		},
		RetireFunc: func(_ context.Context, key mesh.ProvisionKey, _ mesh.Provision) error {
			r.mu.Lock()
			r.retires[key.String()]++
			r.mu.Unlock()
			return nil
		},
	}
}

func (r *recorder) calls(key mesh.ProvisionKey) (provides, retires int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.provides[key.String()], r.retires[key.String()]
}

type fixture struct {
	url  string
	seat *kittest.Seat
	said *kittest.Said
	kit  *kit.Kit
	// entries records every state written to the provider's bound bucket,
	// per key, in order ("deleted" for a delete).
	mu      sync.Mutex
	entries map[string][]string
}

func start(t *testing.T, h kit.Handler, workers int) *fixture {
	t.Helper()
	return startWith(t, h, workers, 20*time.Millisecond, 100*time.Millisecond)
}

// startWith starts a kit whose backoff runs from retryMin to retryMax.
func startWith(t *testing.T, h kit.Handler, workers int, retryMin, retryMax time.Duration) *fixture {
	t.Helper()
	// The bound bucket keeps some history, so that the watcher below sees
	// every entry written, also those superseded at once.
	return startBucket(t, h, workers, retryMin, retryMax, jetstream.KeyValueConfig{Bucket: mesh.BoundBucket(provider.Module), History: 10})
}

// startBucket starts a kit on a bound bucket made with bucket.
func startBucket(t *testing.T, h kit.Handler, workers int, retryMin, retryMax time.Duration, bucket jetstream.KeyValueConfig) *fixture {
	t.Helper()
	return startVia(t, h, workers, retryMin, retryMax, bucket, func(url string) string { return url })
}

// startVia is startBucket with the kit (only it) dialling the URL via
// returns for the server's (a relay, for a slow bus).
func startVia(t *testing.T, h kit.Handler, workers int, retryMin, retryMax time.Duration, bucket jetstream.KeyValueConfig, via func(url string) string) *fixture {
	t.Helper()
	f := &fixture{url: kittest.Server(t), entries: map[string][]string{}}
	_, js := kittest.Connect(t, via(f.url), provider.Module)
	if _, err := js.CreateKeyValue(bustest.Context(t), bucket); err != nil {
		t.Fatal(err)
	}
	f.seat = kittest.NewSeat(t, f.url)
	f.seat.Judge(provider.Module, vault.Module)
	log, said := kittest.Log()
	f.said = said
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the kit said:\n%s", said.Lines())
		}
	})
	ctx := bustest.Context(t)
	k, err := kit.Start(ctx, kit.Config{
		Module: provider.Module, Node: provider.Node, JetStream: js, Handler: h, Log: log,
		Workers: workers, RetryMin: retryMin, RetryMax: retryMax,
	})
	if err != nil {
		t.Fatal(err)
	}
	<-k.Ready()
	f.kit = k
	_, wjs := kittest.Connect(t, f.url, "watcher")
	c := bus.Follow(ctx, wjs, mesh.BoundBucket(provider.Module), bus.Options{Create: true, OnChange: func(ch bus.Change) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if ch.Deleted {
			f.entries[ch.Key] = append(f.entries[ch.Key], "deleted")
			return
		}
		f.entries[ch.Key] = append(f.entries[ch.Key], string(ch.Value))
	}})
	<-c.Ready()
	return f
}

// seen returns how many writes at key the watcher has seen.
func (f *fixture) seen(key mesh.ProvisionKey) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries[key.String()])
}

// history waits until the watcher has seen n writes at key (it may lag
// behind the seat), then returns every write it has seen there.
func (f *fixture) history(t *testing.T, key mesh.ProvisionKey, n int) []string {
	t.Helper()
	var h []string
	bustest.WaitFor(t, 0, fmt.Sprintf("%d writes at %s", n, key), func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		h = append([]string(nil), f.entries[key.String()]...)
		return len(h) >= n
	})
	return h
}

func waitState(t *testing.T, seat *kittest.Seat, key mesh.ProvisionKey, state mesh.State, why string) mesh.Provision {
	t.Helper()
	var p mesh.Provision
	bustest.WaitFor(t, 0, fmt.Sprintf("%s to be %s (%s)", key, state, why), func() bool {
		var ok bool
		p, ok = seat.Get(key)
		return ok && p.State == state && p.Why == why
	})
	return p
}

func TestKitProvidesItsKeysOnly(t *testing.T) {
	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Provided("shelf-a", 3), nil })
	f := start(t, r.handler(), 0)
	key, p := kittest.Requirement(gitea, "shelf", "main", provider)
	f.seat.Need(key, p)
	// the same module on another node is another provider
	otherKey, other := kittest.Requirement(gitea, "shelf", "two", mesh.Ref{Module: provider.Module, Node: "g14"})
	f.seat.Need(otherKey, other)

	got := waitState(t, f.seat, key, mesh.Provided, "")
	if got.Reference == nil || *got.Reference != (mesh.Reference{ID: "shelf-a", Generation: 3}) {
		t.Errorf("reference of %s = %+v; want shelf-a generation 3", key, got.Reference)
	}
	if h := f.history(t, key, 1); len(h) != 1 || h[0] != `{"state":"provided","vault-name":"shelf-a","generation":3}` {
		t.Errorf("entries written at %s = %q; want one provided entry", key, h)
	}
	// A key of another provider node gets no entry and no call; checked
	// after a later key of ours is provided (one worker: in order).
	laterKey, later := kittest.Requirement(mesh.Ref{Module: "grafana", Node: "g14"}, "shelf", "", provider)
	f.seat.Need(laterKey, later)
	waitState(t, f.seat, laterKey, mesh.Provided, "")
	if n, _ := r.calls(otherKey); n != 0 {
		t.Errorf("provide of %s (provider on g14) called %d times; want 0", otherKey, n)
	}
	if p, _ := f.seat.Get(otherKey); p.State != mesh.Asked {
		t.Errorf("%s state = %s; want asked", otherKey, p.State)
	}
	if n, _ := r.calls(key); n != 1 {
		t.Errorf("provide of %s called %d times; want 1 (the seat's judging does not provide again)", key, n)
	}
}

func TestKitWaitsForDependsOnAndFollowsItsGeneration(t *testing.T) {
	r := newRecorder(func(_ string, _ int, p mesh.Provision) (kit.Result, error) {
		// The handler reads the credential's generation as a provider does
		// when it asks the vault; here it comes from the provision's name.
		return kit.Provided("cred", int64(len(p.DependsOn))), nil
	})
	f := start(t, r.handler(), 1)
	key, p := kittest.Requirement(gitea, "shelf", "main", provider)
	ck, cp, p := kittest.Credential(key, p, vault)
	if want := "ace.gitea.credential.shelf_shelf_main"; ck.String() != want || p.DependsOn[0] != want {
		t.Fatalf("credential key = %s, depends-on %v; want %s", ck, p.DependsOn, want)
	}
	f.seat.Need(ck, cp)
	f.seat.Need(key, p)
	// No vault runs: the credential stays asked, and so does the key.
	marker, mp := kittest.Requirement(gitea, "shelf", "marker", provider)
	f.seat.Need(marker, mp)
	waitState(t, f.seat, marker, mesh.Provided, "")
	if n, _ := r.calls(key); n != 0 {
		t.Fatalf("provide of %s called %d times while its credential is asked; want 0", key, n)
	}
	// The vault provides the credential at generation 1.
	_, vjs := kittest.Connect(t, f.url, "vault-writer")
	ctx := bustest.Context(t)
	vkv, err := bus.Bucket(ctx, vjs, mesh.BoundBucket(vault.Module), 0)
	if err != nil {
		t.Fatal(err)
	}
	vkv.Put(ctx, ck.String(), []byte(`{"state":"provided","vault-name":"c1","generation":1}`))
	waitState(t, f.seat, key, mesh.Provided, "")
	if n, _ := r.calls(key); n != 1 {
		t.Errorf("provide of %s called %d times; want 1", key, n)
	}
	// Rotation: generation 2 of the credential provides the key again.
	vkv.Put(ctx, ck.String(), []byte(`{"state":"provided","vault-name":"c1","generation":2}`))
	bustest.WaitFor(t, 0, "a second provide after the rotation", func() bool { n, _ := r.calls(key); return n == 2 })
	r.mu.Lock()
	last := r.seen[key.String()][1]
	r.mu.Unlock()
	if last.DependsOn[0] != ck.String() {
		t.Errorf("second provide saw depends-on %v; want %s", last.DependsOn, ck)
	}
	// A write to the credential that leaves its reference alone (a new why)
	// does not provide again.
	vkv.Put(ctx, ck.String(), []byte(`{"state":"waits","why":"sealed"}`))
	waitState(t, f.seat, ck, mesh.Waits, "sealed")
	vkv.Put(ctx, ck.String(), []byte(`{"state":"provided","vault-name":"c1","generation":2}`))
	waitState(t, f.seat, ck, mesh.Provided, "")
	f.seat.Need(marker, mesh.Provision{Provision: "shelf", Local: "marker", Consumer: gitea, Provider: provider, Why: "again"})
	marker2, mp2 := kittest.Requirement(gitea, "shelf", "marker2", provider)
	f.seat.Need(marker2, mp2)
	waitState(t, f.seat, marker2, mesh.Provided, "")
	if n, _ := r.calls(key); n != 2 {
		t.Errorf("provide of %s called %d times after the credential's same reference came back; want 2", key, n)
	}
}

// TestKitFailureIsTriedAgain: a provide that fails is written failed and
// tried again with backoff until it is provided, each outcome its entry.
func TestKitFailureIsTriedAgain(t *testing.T) { failureIsTriedAgain(t, 0) }

// TestKitFailureIsTriedAgainOnASlowBus is TestKitFailureIsTriedAgain with
// the kit's acks 200 ms late (a loaded machine): its tries (20 to 100 ms
// apart) come faster than its writes land.
func TestKitFailureIsTriedAgainOnASlowBus(t *testing.T) { failureIsTriedAgain(t, 200*time.Millisecond) }

// failureIsTriedAgain runs TestKitFailureIsTriedAgain with what the
// server sends the kit delay late. The writer replaces a key's entry that
// waits behind its write in flight by a newer one (only the latest is
// written), so a try that came before the last failure's entry landed
// would leave that entry unwritten: each try after the first waits until
// the watcher has seen the entry of the try before, and every outcome is
// written.
func failureIsTriedAgain(t *testing.T, delay time.Duration) {
	var fx atomic.Pointer[fixture]
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	r := newRecorder(func(_ string, n int, _ mesh.Provision) (kit.Result, error) {
		if f := fx.Load(); n > 1 && f != nil {
			deadline := time.Now().Add(20 * time.Second)
			for f.seen(key) < n-1 {
				if time.Now().After(deadline) {
					t.Errorf("try %d of %s: the watcher has not seen the entry of try %d after 20 s", n, key, n-1)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if n <= 2 {
			return kit.Result{}, fmt.Errorf("shelf: disk %d is full", n)
		}
		return kit.Provided("", 0), nil
	})
	var relay *bustest.Relay
	f := startVia(t, r.handler(), 0, 20*time.Millisecond, 100*time.Millisecond,
		jetstream.KeyValueConfig{Bucket: mesh.BoundBucket(provider.Module), History: 10},
		func(url string) string {
			if delay == 0 {
				return url
			}
			relay = bustest.NewRelay(t, url)
			return relay.URL()
		})
	if relay != nil {
		relay.SetDelay(delay)
	}
	fx.Store(f)
	f.seat.Need(key, p)
	waitState(t, f.seat, key, mesh.Provided, "")
	want := []string{
		`{"state":"failed","why":"shelf: disk 1 is full"}`,
		`{"state":"failed","why":"shelf: disk 2 is full"}`,
		`{"state":"provided"}`,
	}
	if h := f.history(t, key, len(want)); fmt.Sprint(h) != fmt.Sprint(want) {
		t.Errorf("entries at %s = %q; want %q", key, h, want)
	}
	if n, _ := r.calls(key); n != 3 {
		t.Errorf("provide of %s called %d times; want 3", key, n)
	}
	if !f.said.Has("kit: tried again later", "key="+key.String(), "disk 2 is full") {
		t.Errorf("the kit did not say it tries %s again", key)
	}
}

func TestKitFailedResultIsFinalAndBadKeyFails(t *testing.T) {
	r := newRecorder(func(key string, _ int, _ mesh.Provision) (kit.Result, error) {
		return kit.Failing("shelf: no shelf may be named " + key), nil
	})
	f := start(t, r.handler(), 1)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	f.seat.Need(key, p)
	waitState(t, f.seat, key, mesh.Failed, "shelf: no shelf may be named ace.gitea.shelf")
	// A key out of shape is failed without a call of the handler.
	bad := mesh.ProvisionKey{Node: "ace", Consumer: "Gitea", Provision: "shelf"}
	_, bp := kittest.Requirement(mesh.Ref{Module: "Gitea", Node: "ace"}, "shelf", "", provider)
	f.seat.Need(bad, bp)
	waitState(t, f.seat, bad, mesh.Failed, `the provision key ace.Gitea.shelf is out of shape: mesh: key "ace.Gitea.shelf": consumer "Gitea" is not a valid name`)
	if n, _ := r.calls(bad); n != 0 {
		t.Errorf("provide of the bad key called %d times; want 0", n)
	}
	if n, _ := r.calls(key); n != 1 {
		t.Errorf("provide of %s called %d times; want 1 (a failed result is final)", key, n)
	}
}

// TestKitFollowsAKeyThatWaitsAfterASuccess (issue 20, item 14): a key
// provided once, then tried again with the same inputs (Again, as the vault
// does on a rotation, or its entry changed by another writer) or with new
// inputs, that waits, is tried again until it is provided: a try that waited
// does not leave the last success's inputs as done, so that a retry or a
// return to those inputs is not taken as done while the entry says waits.
func TestKitFollowsAKeyThatWaitsAfterASuccess(t *testing.T) {
	var mu sync.Mutex
	sealed := false
	r := newRecorder(func(_ string, _ int, p mesh.Provision) (kit.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if sealed {
			return kit.Waiting("waits for the shelf to be unsealed"), nil
		}
		return kit.Provided("cred", 1), nil
	})
	seal := func(v bool) { mu.Lock(); sealed = v; mu.Unlock() }
	f := start(t, r.handler(), 1)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	ck, cp, p := kittest.Credential(key, p, vault)
	f.seat.Need(ck, cp)
	f.seat.Need(key, p)
	_, vjs := kittest.Connect(t, f.url, "vault-writer")
	ctx := bustest.Context(t)
	vkv, err := bus.Bucket(ctx, vjs, mesh.BoundBucket(vault.Module), 0)
	if err != nil {
		t.Fatal(err)
	}
	vkv.Put(ctx, ck.String(), []byte(`{"state":"provided","vault-name":"c1","generation":1}`))
	waitState(t, f.seat, key, mesh.Provided, "")

	// Tried again with the same inputs, it waits, then is provided.
	seal(true)
	f.kit.Again(key.String())
	waitState(t, f.seat, key, mesh.Waits, "waits for the shelf to be unsealed")
	seal(false)
	waitState(t, f.seat, key, mesh.Provided, "")

	// Its credential rewritten, it waits; the credential's first value back,
	// it is provided (the inputs of its last success are not taken as done).
	seal(true)
	vkv.Put(ctx, ck.String(), []byte(`{"state":"provided","vault-name":"c1","generation":2}`))
	waitState(t, f.seat, key, mesh.Waits, "waits for the shelf to be unsealed")
	n, _ := r.calls(key)
	seal(false)
	vkv.Put(ctx, ck.String(), []byte(`{"state":"provided","vault-name":"c1","generation":1}`))
	waitState(t, f.seat, key, mesh.Provided, "")
	if m, _ := r.calls(key); m <= n {
		t.Errorf("provide called %d times, as before the credential came back; want once more at least", m)
	}
}

func TestKitWaitsUntilAPersonActs(t *testing.T) {
	var mu sync.Mutex
	acted := false
	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if !acted {
			return kit.Waiting("waits for an operator to plug in the shelf's disk"), nil
		}
		return kit.Provided("", 0), nil
	})
	f := start(t, r.handler(), 0)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	f.seat.Need(key, p)
	waitState(t, f.seat, key, mesh.Waits, "waits for an operator to plug in the shelf's disk")
	mu.Lock()
	acted = true
	mu.Unlock()
	waitState(t, f.seat, key, mesh.Provided, "")
	want := []string{`{"state":"waits","why":"waits for an operator to plug in the shelf's disk"}`, `{"state":"provided"}`}
	if h := f.history(t, key, len(want)); fmt.Sprint(h) != fmt.Sprint(want) {
		t.Errorf("entries at %s = %q; want %q (waits written once)", key, h, want)
	}
}

func TestKitRetiresOnlyOnYes(t *testing.T) {
	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Provided("s", 1), nil })
	f := start(t, r.handler(), 1)
	keep, kp := kittest.Requirement(gitea, "shelf", "keep", provider)
	drop, dp := kittest.Requirement(gitea, "shelf", "drop", provider)
	f.seat.Need(keep, kp)
	f.seat.Need(drop, dp)
	waitState(t, f.seat, keep, mesh.Provided, "")
	waitState(t, f.seat, drop, mesh.Provided, "")

	f.seat.Retire(keep)
	f.seat.Retire(drop)
	f.seat.Answer(keep, "no")
	marker, mp := kittest.Requirement(gitea, "shelf", "marker", provider)
	f.seat.Need(marker, mp)
	waitState(t, f.seat, marker, mesh.Provided, "")
	for _, k := range []mesh.ProvisionKey{keep, drop} {
		if _, n := r.calls(k); n != 0 {
			t.Errorf("retire of %s called %d times with no yes; want 0", k, n)
		}
		if _, ok := kittest.Entry(t, mustJS(t, f.url), provider.Module, k); !ok {
			t.Errorf("entry of %s is gone with no yes", k)
		}
	}

	f.seat.Answer(drop, "yes")
	bustest.WaitFor(t, 0, "the retired key to be deleted by the seat", func() bool { _, ok := f.seat.Get(drop); return !ok })
	if _, n := r.calls(drop); n != 1 {
		t.Errorf("retire of %s called %d times; want 1", drop, n)
	}
	if h := f.history(t, drop, 2); len(h) != 2 || h[1] != "deleted" {
		t.Errorf("entries at %s = %q; want provided then deleted", drop, h)
	}
	if p, _ := f.seat.Get(keep); p.State != mesh.Retiring || p.Warrant.Option != "no" {
		t.Errorf("%s = %s with warrant %+v; want retiring with no", keep, p.State, p.Warrant)
	}
	if _, n := r.calls(keep); n != 0 {
		t.Errorf("retire of %s called %d times after no; want 0", keep, n)
	}
	if f.said.Has(sayGone) {
		t.Errorf("the kit said a retired key was gone without a warrant")
	}
}

const sayGone = "the provision is gone without an operator's warrant"

func TestKitSaysAKeyGoneWithoutWarrant(t *testing.T) {
	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Provided("s", 1), nil })
	f := start(t, r.handler(), 1)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	f.seat.Need(key, p)
	waitState(t, f.seat, key, mesh.Provided, "")
	f.seat.Drop(key)
	bustest.WaitFor(t, 0, "the kit to say the key is gone without a warrant", func() bool {
		return f.said.Has(sayGone, "key="+key.String())
	})
	if _, n := r.calls(key); n != 0 {
		t.Errorf("retire of %s called %d times; want 0", key, n)
	}
	e, ok := kittest.Entry(t, mustJS(t, f.url), provider.Module, key)
	if !ok || e.State != mesh.Provided {
		t.Errorf("entry at %s = %+v, %v; want it kept, provided", key, e, ok)
	}
	if n := f.said.Count(sayGone, "key="+key.String()); n != 1 {
		t.Errorf("said %d times; want once", n)
	}
}

func TestStartRefusesAnIncompleteConfig(t *testing.T) {
	_, err := kit.Start(context.Background(), kit.Config{Module: "shelf", Node: "control"})
	if !errors.Is(err, kit.ErrConfig) {
		t.Errorf("Start without a handler = %v; want ErrConfig", err)
	}
}

func mustJS(t *testing.T, url string) jetstream.JetStream {
	_, js := kittest.Connect(t, url, "reader")
	return js
}

// TestKitTriesAFailedRetireAgain: a retire that fails leaves the entry
// failed with the error in its why, which the seat carries into the
// retiring key, and is tried again until it succeeds.
func TestKitTriesAFailedRetireAgain(t *testing.T) {
	var mu sync.Mutex
	retires, locked := 0, true
	h := kit.Funcs{RetireFunc: func(context.Context, mesh.ProvisionKey, mesh.Provision) error {
		mu.Lock()
		defer mu.Unlock()
		retires++
		if locked {
			return errors.New("shelf: the shelf is locked")
		}
		return nil
	}}
	f := start(t, h, 0)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	f.seat.Need(key, p)
	waitState(t, f.seat, key, mesh.Provided, "")
	f.seat.Retire(key)
	f.seat.Answer(key, "yes")
	retiring, _ := f.seat.Get(key)
	entryWhy := "the removal approved with yes failed, and is tried again with backoff: shelf: the shelf is locked"
	waitState(t, f.seat, key, mesh.Retiring, retiring.Why+kittest.WhyNotRemoved(provider, entryWhy))
	if e, ok := kittest.Entry(t, mustJS(t, f.url), provider.Module, key); !ok || e.State != mesh.Failed || e.Why != entryWhy {
		t.Errorf("entry after a failed retire = %+v, %v; want failed %q", e, ok, entryWhy)
	}
	bustest.WaitFor(t, 0, "retire tried again", func() bool { mu.Lock(); defer mu.Unlock(); return retires >= 3 })
	mu.Lock()
	locked = false
	mu.Unlock()
	bustest.WaitFor(t, 0, "the key retired once retire succeeds", func() bool { _, ok := f.seat.Get(key); return !ok })
	if !f.said.Has("kit: retire failed; the entry stays and retire is tried again", "shelf: the shelf is locked") {
		t.Error("the kit did not say the failed retire")
	}
}

// TestKitSaysAFailureOncePerWhy (issue 17): a key tried again and again
// for the same reason is said once at info level or above, then once more
// when its why changes, and once when it is done; each retry in between is
// said at debug level only. A retire failing the same way is said once too.
func TestKitSaysAFailureOncePerWhy(t *testing.T) {
	var mu sync.Mutex
	why, retireErr := "shelf: the disk is full", "shelf: the shelf is locked"
	h := kit.Funcs{
		ProvideFunc: func(context.Context, mesh.ProvisionKey, mesh.Provision) (kit.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			if why == "" {
				return kit.Provided("", 0), nil
			}
			return kit.Result{}, errors.New(why)
		},
		RetireFunc: func(context.Context, mesh.ProvisionKey, mesh.Provision) error {
			mu.Lock()
			defer mu.Unlock()
			if retireErr == "" {
				return nil
			}
			return errors.New(retireErr)
		},
	}
	set := func(w, r string) { mu.Lock(); why, retireErr = w, r; mu.Unlock() }
	f := start(t, h, 0)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	said := func(parts ...string) int { return f.said.Count(append(parts, "key="+key.String())...) }
	loud := func(parts ...string) int { return said(parts...) - said(append(parts, "level=DEBUG")...) }
	f.seat.Need(key, p)
	bustest.WaitFor(t, 0, "five tries said at debug level", func() bool {
		return said("kit: tried again later", "level=DEBUG", "shelf: the disk is full") >= 5
	})
	if n := loud("kit: tried again later", "shelf: the disk is full"); n != 1 {
		t.Errorf("the failure was said %d times above debug level; want once", n)
	}
	set("shelf: the disk is gone", retireErr)
	bustest.WaitFor(t, 0, "the new why said", func() bool { return loud("kit: tried again later", "shelf: the disk is gone") == 1 })
	bustest.WaitFor(t, 0, "the new why tried again", func() bool {
		return said("kit: tried again later", "level=DEBUG", "shelf: the disk is gone") >= 2
	})
	if n := loud("kit: tried again later", "shelf: the disk is gone"); n != 1 {
		t.Errorf("the new why was said %d times above debug level; want once", n)
	}
	set("", retireErr)
	waitState(t, f.seat, key, mesh.Provided, "")
	bustest.WaitFor(t, 0, "done said once", func() bool { return loud("kit: done after it was tried again") == 1 })

	f.seat.Retire(key)
	f.seat.Answer(key, "yes")
	bustest.WaitFor(t, 0, "three failed retires", func() bool {
		return said("kit: retire failed", "level=DEBUG", "shelf: the shelf is locked") >= 3
	})
	if n := loud("kit: retire failed", "shelf: the shelf is locked"); n != 1 {
		t.Errorf("the failed retire was said %d times above debug level; want once", n)
	}
	set("", "")
	bustest.WaitFor(t, 0, "the key retired", func() bool { _, ok := f.seat.Get(key); return !ok })
}

// TestKitBacksOffWhateverTheWhy is the retry storm: a handler that fails at
// once with a new text at each try ("attempt 7") makes a new entry each
// time, which the seat carries into the provision, which reaches the kit
// again. Every try must still wait its backoff (here 200 ms growing to
// 1 s): over 3 s that is under 20 calls and writes, not hundreds.
func TestKitBacksOffWhateverTheWhy(t *testing.T) {
	r := newRecorder(func(_ string, n int, _ mesh.Provision) (kit.Result, error) {
		return kit.Result{}, fmt.Errorf("shelf: attempt %d failed", n)
	})
	f := startWith(t, r.handler(), 0, 200*time.Millisecond, time.Second)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	f.seat.Need(key, p)
	waitState(t, f.seat, key, mesh.Failed, "shelf: attempt 2 failed")
	// The window the storm would fill; the assertions bound what happens in
	// it, they measure no speed.
	<-time.After(3 * time.Second)
	calls, _ := r.calls(key)
	f.mu.Lock()
	writes := len(f.entries[key.String()])
	f.mu.Unlock()
	if calls >= 20 || writes >= 20 {
		t.Errorf("in about 3 s the handler was called %d times and %s was written %d times; want under 20 each (backoff from 200ms to 1s)",
			calls, key, writes)
	}
	if calls < 3 {
		t.Errorf("the handler was called %d times; want it tried again (at least 3 calls)", calls)
	}
	if !f.said.Has("kit: tried again later", "key="+key.String()) {
		t.Errorf("the kit did not say it tries %s again", key)
	}
}

// TestKitWritesItsEntriesAgainWhenItsBucketIsGone deletes the provider's
// bound bucket under a running kit: the kit makes it again and writes the
// entry of every key it provides, so the seat's key is provided again.
func TestKitWritesItsEntriesAgainWhenItsBucketIsGone(t *testing.T) {
	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Provided("shelf-a", 1), nil })
	f := start(t, r.handler(), 0)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	f.seat.Need(key, p)
	waitState(t, f.seat, key, mesh.Provided, "")
	js := mustJS(t, f.url)
	if err := js.DeleteKeyValue(bustest.Context(t), mesh.BoundBucket(provider.Module)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 20*time.Second, "the kit's entry written again", func() bool {
		e, ok := kittest.Entry(t, js, provider.Module, key)
		return ok && e.State == mesh.Provided && e.VaultName == "shelf-a"
	})
	waitState(t, f.seat, key, mesh.Provided, "")
}

// TestKitProvidesOnceMoreWhenAskedAgainMidProvide asks a key again (Again,
// as a provider does when a credential rotated) while its provide is in
// hand: that provide may have read what changed before it changed, so the
// key is provided once more after it, and its entry names that last
// provide.
func TestKitProvidesOnceMoreWhenAskedAgainMidProvide(t *testing.T) {
	inHand := make(chan struct{})
	release := make(chan struct{})
	r := newRecorder(func(_ string, n int, _ mesh.Provision) (kit.Result, error) {
		if n == 2 {
			close(inHand)
			<-release
		}
		return kit.Provided("shelf-a", int64(n)), nil
	})
	f := start(t, r.handler(), 2)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	f.seat.Need(key, p)
	waitState(t, f.seat, key, mesh.Provided, "")
	f.kit.Again(key.String())
	<-inHand
	f.kit.Again(key.String()) // changed again while provide 2 is in hand
	close(release)
	// The entry of provide 2 may be replaced by provide 3's before it is
	// written: the last entry seen is provide 3's.
	last := `{"state":"provided","vault-name":"shelf-a","generation":3}`
	var h []string
	bustest.WaitFor(t, 0, fmt.Sprintf("the watcher to see the entry of the third provide of %s", key), func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		h = append([]string(nil), f.entries[key.String()]...)
		return len(h) > 0 && h[len(h)-1] == last
	})
	if h[0] != `{"state":"provided","vault-name":"shelf-a","generation":1}` {
		t.Errorf("entries at %s = %q; want the first provide's first", key, h)
	}
	if e, ok := kittest.Entry(t, mustJS(t, f.url), provider.Module, key); !ok || e.Generation != 3 {
		t.Errorf("entry of %s on the bus = %+v (ok %v); want generation 3", key, e, ok)
	}
	bustest.WaitFor(t, 0, "the kit idle", f.kit.Idle)
	if n, _ := r.calls(key); n != 3 {
		t.Errorf("provide of %s called %d times; want 3 (once more after the provide in hand)", key, n)
	}
}

// TestKitWritesEachKeysEntriesInOrder provides keys again and again from
// several workers while their earlier entries are still being written: the
// entries of one key must reach the bus in the order they were provided
// (generations rising, never one older after a newer), and the last one
// written must be the last one provided.
func TestKitWritesEachKeysEntriesInOrder(t *testing.T) {
	r := newRecorder(func(_ string, n int, _ mesh.Provision) (kit.Result, error) {
		return kit.Provided("shelf-a", int64(n)), nil
	})
	f := start(t, r.handler(), 8)
	var keys []mesh.ProvisionKey
	for i := range 20 {
		key, p := kittest.Requirement(gitea, "shelf", fmt.Sprintf("s%d", i), provider)
		f.seat.Need(key, p)
		keys = append(keys, key)
	}
	for _, key := range keys {
		waitState(t, f.seat, key, mesh.Provided, "")
	}
	for range 30 {
		for _, key := range keys {
			f.kit.Again(key.String())
		}
	}
	_, rjs := kittest.Connect(t, f.url, "reader") // one reader for every look below
	for _, key := range keys {
		// Every Again has been handled once the kit is idle and the entry
		// names the last provide's generation. The provide count and the
		// entry are read between two looks that find the kit idle, and the
		// count once more after the second: read while the kit still
		// works, the count before a provide and the entry before its write
		// would agree on a provide that is not the last, and the watcher
		// would be waited on for an entry it has seen replaced.
		var last int
		bustest.WaitFor(t, 0, fmt.Sprintf("the entry of %s to name its last provide", key), func() bool {
			if !f.kit.Idle() {
				return false
			}
			n, _ := r.calls(key)
			e, ok := kittest.Entry(t, rjs, provider.Module, key)
			if !ok || e.Generation != int64(n) || !f.kit.Idle() {
				return false
			}
			last = n
			again, _ := r.calls(key)
			return again == n
		})
		var h []string
		// Should the watcher never see it, what it saw and what the kit
		// and the bus hold then say why: a watch that lost entries (its
		// last older than the bus's entry) or a provide after the kit was
		// found idle (the bus's entry and the provide count past last).
		waited := false
		watching := func() {
			if waited || !t.Failed() {
				return
			}
			n, _ := r.calls(key)
			e, ok := kittest.Entry(t, rjs, provider.Module, key)
			t.Logf("waiting on %s at generation %d: the watcher saw %d writes, the last %q; provides now %d; the bus's entry %+v (%v); the kit idle: %v",
				key, last, len(h), h[max(len(h)-3, 0):], n, e, ok, f.kit.Idle())
		}
		defer watching()
		bustest.WaitFor(t, 0, fmt.Sprintf("the watcher to see the last entry of %s (generation %d)", key, last), func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			h = append([]string(nil), f.entries[key.String()]...)
			var e mesh.Entry
			return len(h) > 0 && json.Unmarshal([]byte(h[len(h)-1]), &e) == nil && e.Generation == int64(last)
		})
		waited = true
		prev := int64(0)
		for i, v := range h {
			var e mesh.Entry
			if err := json.Unmarshal([]byte(v), &e); err != nil {
				t.Fatalf("entry %d of %s = %q does not decode: %v", i, key, v, err)
			}
			if e.Generation <= prev {
				t.Errorf("entries of %s = %q; generation %d written after %d (out of order)", key, h, e.Generation, prev)
				break
			}
			prev = e.Generation
		}
		if prev != int64(last) {
			t.Errorf("last entry of %s seen at generation %d; want %d, the last provide", key, prev, last)
		}
	}
}

// TestKitWritesAnEntryAgainWhenAWriteFails makes the bus refuse the kit's
// first writes (its bound bucket is full), then takes the limit away: the
// failed write is said and tried again with backoff, and the entry reaches
// the bus and the seat. An entry another writer then overwrites is
// provided and written again.
func TestKitWritesAnEntryAgainWhenAWriteFails(t *testing.T) {
	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Provided("shelf-a", 1), nil })
	bucket := jetstream.KeyValueConfig{Bucket: mesh.BoundBucket(provider.Module), History: 10, MaxBytes: 1}
	f := startBucket(t, r.handler(), 0, 20*time.Millisecond, 100*time.Millisecond, bucket)
	key, p := kittest.Requirement(gitea, "shelf", "", provider)
	f.seat.Need(key, p)
	bustest.WaitFor(t, 0, "the kit to say its write failed", func() bool {
		return f.said.Has("kit: the entry could not be written", "key="+key.String())
	})
	if _, ok := kittest.Entry(t, mustJS(t, f.url), provider.Module, key); ok {
		t.Fatalf("%s has an entry in a full bucket", key)
	}
	js := mustJS(t, f.url)
	ctx := bustest.Context(t)
	bucket.MaxBytes = -1
	if _, err := js.UpdateKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	waitState(t, f.seat, key, mesh.Provided, "")
	calls, _ := r.calls(key)
	want := `{"state":"provided","vault-name":"shelf-a","generation":1}`
	if h := f.history(t, key, 1); len(h) != 1 || h[0] != want {
		t.Errorf("entries at %s = %q; want one: %s", key, h, want)
	}

	// Another writer overwrites the entry: the kit provides the key again
	// and writes its entry back.
	kv, err := js.KeyValue(ctx, mesh.BoundBucket(provider.Module))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key.String(), []byte(`{"state":"failed","why":"forged"}`)); err != nil {
		t.Fatal(err)
	}
	h := f.history(t, key, 3)
	if h[1] != `{"state":"failed","why":"forged"}` || h[2] != want {
		t.Errorf("entries at %s = %q; want the forged one, then %s again", key, h, want)
	}
	waitState(t, f.seat, key, mesh.Provided, "")
	if n, _ := r.calls(key); n != calls+1 {
		t.Errorf("provide of %s called %d times; want %d (once more after the forged entry)", key, n, calls+1)
	}
}

// TestKitHoldsOtherProvidersKeysInPart checks what the kit keeps of the
// provisions bucket: its provider's keys whole (why and time too); another
// provider's key only in part (names, provider, state, depends-on and
// reference, no why, ask or time), and only when it depends on other keys
// or is provided; and none twice.
func TestKitHoldsOtherProvidersKeysInPart(t *testing.T) {
	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Provided("shelf-a", 1), nil })
	f := start(t, r.handler(), 0)
	var ours []mesh.ProvisionKey
	for _, local := range []string{"one", "two", "three"} {
		key, p := kittest.Requirement(gitea, "shelf", local, provider)
		f.seat.Need(key, p)
		ours = append(ours, key)
	}
	// Three of other providers: a database depending on its credential
	// (held), that credential, asked of a vault that does not run, and a
	// route (both asked, depending on nothing: not held).
	postgres := mesh.Ref{Module: "postgres", Node: "control"}
	dbKey, db := kittest.Requirement(gitea, "database", "", postgres)
	credentialKey, credential, db := kittest.Credential(dbKey, db, vault)
	f.seat.Need(dbKey, db)
	f.seat.Need(credentialKey, credential)
	routeProxy := mesh.Ref{Module: "route-proxy", Node: "control"}
	routeKey, route := kittest.Requirement(gitea, "route", "", routeProxy)
	f.seat.Need(routeKey, route)

	for _, key := range ours {
		waitState(t, f.seat, key, mesh.Provided, "")
	}
	bustest.WaitFor(t, 0, "the kit to hold 3 keys whole and 1 in part", func() bool {
		whole, part := kit.Held(f.kit)
		return whole == 3 && part == 1
	})
	got, ok := f.kit.Provision(ours[0].String())
	if !ok || got.At.IsZero() || got.Provider != provider || got.Local != "one" {
		t.Errorf("Provision(%s) = %+v, %v; want it whole (time, provider, local)", ours[0], got, ok)
	}
	if p, _ := f.seat.Get(dbKey); p.Why == "" || p.At.IsZero() {
		t.Fatalf("the seat's %s = %+v; want a why and a time (for the kit to leave out)", dbKey, p)
	}
	o, ok := f.kit.Provision(dbKey.String())
	want := mesh.Provision{Provision: "database", Consumer: gitea, Provider: postgres, State: mesh.Asked, DependsOn: db.DependsOn}
	if !ok || o.Provision != want.Provision || o.Local != "" || o.Consumer != want.Consumer || o.Provider != want.Provider ||
		o.State != want.State || fmt.Sprint(o.DependsOn) != fmt.Sprint(want.DependsOn) || o.Why != "" || !o.At.IsZero() || o.Ask != "" {
		t.Errorf("Provision(%s) = %+v, %v; want %+v (in part: no why, ask or time)", dbKey, o, ok, want)
	}
	for _, key := range []mesh.ProvisionKey{credentialKey, routeKey} {
		if p, ok := f.kit.Provision(key.String()); ok {
			t.Errorf("Provision(%s) = %+v; want it not held (another provider's, asked, depending on nothing)", key, p)
		}
	}

	// The route provided by its provider (as the seat writes it) is held,
	// with its reference; asked again, it is let go.
	_, js := kittest.Connect(t, f.url, "route-judge")
	kv, err := js.KeyValue(bustest.Context(t), mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	route.State, route.Reference = mesh.Provided, &mesh.Reference{ID: "route-7", Generation: 2}
	v, _ := json.Marshal(route)
	if _, err := kv.Put(bustest.Context(t), routeKey.String(), v); err != nil {
		t.Fatal(err)
	}
	var p mesh.Provision
	bustest.WaitFor(t, 0, "the kit to hold "+routeKey.String()+" provided", func() bool {
		p, ok = f.kit.Provision(routeKey.String())
		return ok
	})
	if p.State != mesh.Provided || p.Provider != routeProxy || p.Reference == nil || *p.Reference != *route.Reference {
		t.Errorf("Provision(%s) = %+v; want provided by route-proxy on control, reference route-7 generation 2", routeKey, p)
	}
	n := 0
	f.kit.Provisions(func(string, mesh.Provision) bool { n++; return true })
	if n != 5 {
		t.Errorf("Provisions gave %d keys; want 5 (3 whole, the database and the route)", n)
	}
	route.State, route.Reference = mesh.Asked, nil
	v, _ = json.Marshal(route)
	if _, err := kv.Put(bustest.Context(t), routeKey.String(), v); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the kit to let "+routeKey.String()+" go, asked again", func() bool {
		_, ok := f.kit.Provision(routeKey.String())
		whole, part := kit.Held(f.kit)
		return !ok && whole == 3 && part == 1
	})
}

// TestKitConsumerProvisions finds a consumer's provisions on a node by its
// index, and follows the provisions that go.
func TestKitConsumerProvisions(t *testing.T) {
	f := start(t, newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Provided("s", 1), nil }).handler(), 0)
	a, ap := kittest.Requirement(gitea, "shelf", "a", provider)
	b, bp := kittest.Requirement(gitea, "shelf", "b", provider)
	other, op := kittest.Requirement(mesh.Ref{Module: "gitea", Node: "g14"}, "shelf", "a", provider)
	for _, n := range []struct {
		key mesh.ProvisionKey
		p   mesh.Provision
	}{{a, ap}, {b, bp}, {other, op}} {
		f.seat.Need(n.key, n.p)
		waitState(t, f.seat, n.key, mesh.Provided, "")
	}
	keys := func() []string {
		var out []string
		f.kit.ConsumerProvisions("ace", "gitea", func(key string, p mesh.Provision) bool {
			if p.Consumer != gitea {
				t.Errorf("ConsumerProvisions(ace, gitea) gave %s of %+v", key, p.Consumer)
			}
			out = append(out, key)
			return true
		})
		slices.Sort(out)
		return out
	}
	if got, want := keys(), []string{a.String(), b.String()}; !slices.Equal(got, want) {
		t.Errorf("ConsumerProvisions(ace, gitea) = %v; want %v", got, want)
	}
	f.seat.Drop(a)
	bustest.WaitFor(t, 0, "the kit to drop "+a.String(), func() bool { _, ok := f.kit.Provision(a.String()); return !ok })
	if got, want := keys(), []string{b.String()}; !slices.Equal(got, want) {
		t.Errorf("ConsumerProvisions(ace, gitea) after %s went = %v; want %v", a, got, want)
	}
}

// TestKitReadsWhoseEachValueIs writes provision values as the seat writes
// them and forged or odd ones beside them, and checks which the kit takes
// as its provider's (provides them), which it keeps in part as another
// provider's, and which it says do not decode (never dropped quietly).
func TestKitReadsWhoseEachValueIs(t *testing.T) {
	url := kittest.Server(t)
	ctx := bustest.Context(t)
	_, sjs := kittest.Connect(t, url, "mesh-provisioner")
	kv, err := bus.Bucket(ctx, sjs, mesh.ProvisionsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	key := func(provision, local string) mesh.ProvisionKey {
		return mesh.ProvisionKey{Node: gitea.Node, Consumer: gitea.Module, Provision: provision, Local: local}
	}
	plain, _ := json.Marshal(mesh.Provision{Provision: "shelf", Local: "plain", Consumer: gitea, Provider: provider, State: mesh.Asked, Why: "asked of shelf"})
	const consumer = `"provision":"shelf","consumer":{"module":"gitea","node":"ace"},"state":"asked"`
	values := []struct {
		key   mesh.ProvisionKey
		value string
	}{
		{key("shelf", "plain"), string(plain)},
		// The last of a name given twice is read, as encoding/json does:
		// the provider's.
		{key("shelf", "twice"), `{"local":"twice",` + consumer + `,"provider":{"module":"postgres","node":"control"},"provider":{"module":"shelf","node":"control"}}`},
		// Field names are exact (spec 2): a name in another case is no
		// field, so neither value is the provider's (encoding/json would
		// read both as "provider" and "module"). The first depends on
		// nothing and is asked (not held); the second, provided, is held
		// in part with a provider of no module.
		{key("shelf", "upper"), `{"local":"upper",` + consumer + `,"Provider":{"module":"shelf","node":"control"}}`},
		{key("shelf", "inner"), `{"provision":"shelf","local":"inner","consumer":{"module":"gitea","node":"ace"},"provider":{"MODULE":"shelf","node":"control"},"state":"provided"}`},
		// Not the provider's either, and undecodable besides: said.
		{key("shelf", "upcut"), `{"local":"upcut",` + consumer + `,"Provider":{"module":"shelf","node":"control"},"at":5}`},
		{key("shelf", "incut"), `{"local":"incut",` + consumer + `,"provider":{"MODULE":"shelf","node":"control"},"at":5}`},
		{key("shelf", "back"), `{"local":"back",` + consumer + `,"provider":{"module":"shelf","node":"control"},"provider":{"module":"postgres","node":"control"},"state":"provided"}`},
		// The provider's name deeper in another provider's value does not
		// make it the provider's.
		{key("database", ""), `{"provision":"database","consumer":{"module":"gitea","node":"ace"},"provider":{"module":"postgres","node":"control"},"state":"asked","depends-on":["ace.gitea.credential.postgres_database"],` +
			`"warrant":{"ask":"a","provider":{"module":"shelf","node":"control"}},"x":{"provider":{"module":"shelf","node":"control"}}}`},
		// Another provider's provided value with a field the kit does not
		// read that would not decode: kept in part.
		{key("route", ""), `{"provision":"route","consumer":{"module":"gitea","node":"ace"},"provider":{"module":"route-proxy","node":"control"},"state":"provided","at":5}`},
		// The provider's own with such a field, and a value cut short:
		// said, left out.
		{key("shelf", "late"), `{"local":"late",` + consumer + `,"provider":{"module":"shelf","node":"control"},"at":5}`},
		{key("shelf", "cut"), `{"local":"cut",` + consumer + `,"provider":{"module":"shelf","node":"control"},`},
	}
	for _, v := range values {
		if _, err := kv.Put(ctx, v.key.String(), []byte(v.value)); err != nil {
			t.Fatal(err)
		}
	}

	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Provided("shelf-a", 1), nil })
	_, js := kittest.Connect(t, url, provider.Module)
	log, said := kittest.Log()
	k, err := kit.Start(ctx, kit.Config{Module: provider.Module, Node: provider.Node, JetStream: js, Handler: r.handler(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the kit said:\n%s", said.Lines())
		}
	})
	for _, p := range []string{"plain", "twice"} {
		bustest.WaitFor(t, 0, "a provided entry at "+key("shelf", p).String(), func() bool {
			e, ok := kittest.Entry(t, js, provider.Module, key("shelf", p))
			return ok && e.State == mesh.Provided && e.VaultName == "shelf-a"
		})
	}
	for _, p := range []string{"late", "cut", "upcut", "incut"} {
		bustest.WaitFor(t, 0, "the kit to say "+key("shelf", p).String()+" does not decode", func() bool {
			return said.Has("a provision does not decode", "key="+key("shelf", p).String())
		})
		if _, ok := k.Provision(key("shelf", p).String()); ok {
			t.Errorf("Provision(%s) found; want it left out", key("shelf", p))
		}
	}
	for _, c := range []struct {
		key      mesh.ProvisionKey
		provider string
		state    mesh.State
	}{{key("database", ""), "postgres", mesh.Asked}, {key("route", ""), "route-proxy", mesh.Provided}, {key("shelf", "back"), "postgres", mesh.Provided}, {key("shelf", "inner"), "", mesh.Provided}} {
		p, ok := k.Provision(c.key.String())
		if !ok || p.Provider.Module != c.provider || p.State != c.state || p.Consumer != gitea {
			t.Errorf("Provision(%s) = %+v, %v; want it held, provider %s, %s, consumer gitea on ace", c.key, p, ok, c.provider, c.state)
		}
		if n, _ := r.calls(c.key); n != 0 {
			t.Errorf("provide of %s called %d times; want 0 (another provider's)", c.key, n)
		}
	}
	if p, ok := k.Provision(key("shelf", "inner").String()); ok && p.Provider != (mesh.Ref{Node: "control"}) {
		t.Errorf("Provision(%s) provider = %+v; want no module, node control", key("shelf", "inner"), p.Provider)
	}
	if p, ok := k.Provision(key("shelf", "upper").String()); ok {
		t.Errorf("Provision(%s) = %+v; want it not held (no provider's, asked, depending on nothing)", key("shelf", "upper"), p)
	}
	for _, p := range []string{"upper", "inner", "upcut", "incut"} {
		if n, _ := r.calls(key("shelf", p)); n != 0 {
			t.Errorf("provide of %s called %d times; want 0 (its names are not the provider's)", key("shelf", p), n)
		}
		if e, ok := kittest.Entry(t, js, provider.Module, key("shelf", p)); ok {
			t.Errorf("entry at %s = %+v; want none (not the provider's key)", key("shelf", p), e)
		}
	}
	if whole, part := kit.Held(k); whole != 2 || part != 4 {
		t.Errorf("the kit holds %d keys whole and %d in part; want 2 (plain, twice) and 4 (database, route, back, inner)", whole, part)
	}
}

// TestKitHoldsItsOwnValuesAsWritten checks that Provision and Provisions
// give back each of the provider's own values exactly as written, whether
// its names are its key's (kept without them) or not (kept whole).
func TestKitHoldsItsOwnValuesAsWritten(t *testing.T) {
	r := newRecorder(func(string, int, mesh.Provision) (kit.Result, error) { return kit.Waiting("held by the test"), nil })
	f := start(t, r.handler(), 0)
	at := time.Date(2026, 12, 1, 9, 30, 0, 123, time.UTC)
	key := func(local string) string {
		return mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "shelf", Local: local}.String()
	}
	full := mesh.Provision{Provision: "shelf", Local: "full", Consumer: gitea, Provider: provider, State: mesh.Retiring, Why: "retiring: no build of gitea requires it",
		DependsOn: []string{"ace.gitea.credential.shelf_shelf_full"}, Reference: &mesh.Reference{ID: "v", Generation: 3}, Ask: "retire-1",
		Warrant: &mesh.Warrant{Ask: "retire-1", Option: "no", By: mesh.Identity{Who: "operator"}, At: at}, At: at}
	other := full
	other.Consumer = mesh.Ref{Module: "wiki", Node: "ace"}
	noLocal := mesh.Provision{Provision: "shelf", Consumer: gitea, Provider: provider, State: mesh.Asked, At: at}
	want := map[string]mesh.Provision{
		key("full"):  full,    // its names are its key's
		key("other"): other,   // another consumer than its key's: kept whole
		key("x"):     noLocal, // no local, at a key with one: kept whole
		key(""):      noLocal, // its names are its key's
	}
	for k, p := range want {
		v, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		kit.Take(f.kit, bus.Change{Bucket: mesh.ProvisionsBucket, Key: k, Value: v, Revision: 1})
	}
	for k, p := range want {
		// What the bus holds, as encoding/json decodes it.
		v, _ := json.Marshal(p)
		var decoded mesh.Provision
		if err := json.Unmarshal(v, &decoded); err != nil {
			t.Fatal(err)
		}
		if got, ok := f.kit.Provision(k); !ok || !reflect.DeepEqual(got, decoded) {
			t.Errorf("Provision(%s) = %+v, %v; want %+v", k, got, ok, decoded)
		}
		want[k] = decoded
	}
	seen := 0
	f.kit.Provisions(func(k string, p mesh.Provision) bool {
		if w, ok := want[k]; ok {
			seen++
			if !reflect.DeepEqual(p, w) {
				t.Errorf("Provisions gives %s = %+v; want %+v", k, p, w)
			}
		}
		return true
	})
	if seen != len(want) {
		t.Errorf("Provisions gave %d of the %d keys written", seen, len(want))
	}
	if whole, part := kit.Held(f.kit); whole != len(want) || part != 0 {
		t.Errorf("the kit holds %d keys whole and %d in part; want %d and 0", whole, part, len(want))
	}
}
