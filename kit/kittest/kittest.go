// Package kittest helps providers built on package kit test their handlers
// against a real embedded bus: [Seat] writes provisions, asks and warrants
// into "mesh-provisioner_provisions" the way the seat writes them, and with
// [Seat.Judge] carries providers' entries into the provisions' states, as
// the seat does. [Log] captures what a component says.
package kittest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Server starts a real embedded nats-server with JetStream for t (stopped
// in t.Cleanup) and returns its URL.
func Server(t testing.TB) string {
	t.Helper()
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("kittest: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s.URL()
}

// testContext returns a context cancelled in t.Cleanup.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Connect dials url as the component name, closing it in t.Cleanup.
func Connect(t testing.TB, url, name string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js, err := bus.Connect(bus.Dial{URL: url, Name: name})
	if err != nil {
		t.Fatalf("kittest: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

// Requirement returns the provision key and value a seat writes for consumer
// needing provision (with local, may be empty) from provider: state asked,
// no depends-on.
func Requirement(consumer mesh.Ref, provision, local string, provider mesh.Ref) (mesh.ProvisionKey, mesh.Provision) {
	key := mesh.ProvisionKey{Node: consumer.Node, Consumer: consumer.Module, Provision: provision, Local: local}
	return key, mesh.Provision{Provision: provision, Local: local, Consumer: consumer, Provider: provider, State: mesh.Asked}
}

// Credential returns the consumer's own credential key for the provision p
// at key (an offer with credential "own"), provided by the vault vault, and
// p with the credential key in its depends-on, as the seat composes them.
func Credential(key mesh.ProvisionKey, p mesh.Provision, vault mesh.Ref) (mesh.ProvisionKey, mesh.Provision, mesh.Provision) {
	ck := mesh.CredentialKey(key.Node, key.Consumer, p.Provider.Module, p.Provision, p.Local)
	cp := mesh.Provision{Provision: mesh.CredentialProvision, Local: ck.Local, Consumer: p.Consumer, Provider: vault, State: mesh.Asked}
	p.DependsOn = append(append([]string(nil), p.DependsOn...), ck.String())
	return ck, cp, p
}

// Seat writes provisions the way the seat does. It is safe for concurrent
// use; each method fails t on a bus error.
type Seat struct {
	t     testing.TB
	js    jetstream.JetStream
	copy  *bus.Copy
	mu    sync.Mutex
	bound map[string]*bus.Copy
	kick  chan struct{}
}

// NewSeat connects to url as "seat" and returns a Seat writing into
// "mesh-provisioner_provisions" (created when missing).
func NewSeat(t testing.TB, url string) *Seat {
	t.Helper()
	ctx := testContext(t)
	_, js := Connect(t, url, "kittest-seat")
	s := &Seat{t: t, js: js, bound: map[string]*bus.Copy{}, kick: make(chan struct{}, 1)}
	s.copy = bus.Follow(ctx, js, mesh.ProvisionsBucket, bus.Options{Create: true, OnChange: func(bus.Change) { s.poke() }})
	<-s.copy.Ready()
	if _, err := s.copy.KV(ctx); err != nil {
		t.Fatalf("kittest: %v", err)
	}
	return s
}

func (s *Seat) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Get returns the provision at key, and whether there is one.
func (s *Seat) Get(key mesh.ProvisionKey) (mesh.Provision, bool) {
	return s.get(key.String())
}

func (s *Seat) get(key string) (mesh.Provision, bool) {
	it, ok := s.copy.Get(key)
	if !ok {
		return mesh.Provision{}, false
	}
	// Names are exact (spec 2), as the seat reads them: a name in another
	// case is left unread ({"STATE":"provided"} says no state), and the
	// judge writes the key anew with the spec's names.
	var p mesh.Provision
	if err := jsonhead.Unmarshal(it.Value, &p); err != nil {
		s.t.Errorf("kittest: provision %s does not decode: %v", key, err)
		return mesh.Provision{}, false
	}
	return p, true
}

func (s *Seat) put(key string, p mesh.Provision) {
	p.At = time.Now().UTC().Truncate(time.Second)
	b, err := json.Marshal(p)
	if err != nil {
		s.t.Fatalf("kittest: %v", err)
	}
	// A put whose answer was lost with a cut connection (a loaded machine)
	// is tried again, as the seat writes again what it did not see land:
	// the same bytes, so a put that had landed changes nothing.
	if err := bus.Retry(context.Background(), putBound, nil, "kittest: put "+key, func() error {
		_, err := bus.PutIfChanged(context.Background(), s.copy, key, b)
		return err
	}); err != nil {
		s.t.Errorf("kittest: %v", err)
	}
	s.poke()
}

// putBound is how long a [Seat] tries a write again while the bus does not
// answer (a connection cut and coming back) before it fails the test.
const putBound = 20 * time.Second

// Wait polls the provision at key (every 10 ms, for up to 20 s) until until
// returns true for it (ok false: there is none), and returns it; past the
// deadline it fails t, saying what. The kit and the seat work
// asynchronously: wait for a state, never sleep.
func (s *Seat) Wait(key mesh.ProvisionKey, what string, until func(p mesh.Provision, ok bool) bool) mesh.Provision {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, ok := s.Get(key)
		if until(p, ok) {
			return p
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("kittest: after 20s %s is %s %q, still not %s", key, p.State, p.Why, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Need writes p at key as needed: state asked with the seat's why, its ask,
// warrant and reference cleared (the reference is the one the provider's
// current entry names, which judging sets).
func (s *Seat) Need(key mesh.ProvisionKey, p mesh.Provision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.State, p.Why = mesh.Asked, WhyNoEntry(p.Provider)
	p.Ask, p.Warrant, p.Reference = "", nil, nil
	s.put(key.String(), p)
}

// WhyNoEntry is the why of a key whose provider has written no entry yet.
func WhyNoEntry(provider mesh.Ref) string {
	return fmt.Sprintf("asked of %s on %s; waits for its entry in %s", provider.Module, provider.Node, mesh.BoundBucket(provider.Module))
}

// Retire turns the key retiring and raises its ask, as the seat does when no
// build requires it any more. It returns the ask id.
func (s *Seat) Retire(key mesh.ProvisionKey) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.get(key.String())
	if !ok {
		s.t.Fatalf("kittest: retire %s: no such provision", key)
	}
	p.State = mesh.Retiring
	p.Why = fmt.Sprintf("no build wanted or placed on %s requires %s of %s on %s any more", key.Node, p.Provision, p.Provider.Module, p.Provider.Node)
	p.Ask = "retire-" + strings.ReplaceAll(key.String(), ".", "-") + fmt.Sprintf("-%d", time.Now().Unix())
	p.Warrant = nil
	s.put(key.String(), p)
	return p.Ask
}

// Answer writes the operator's chosen option ("yes" or "no") as the warrant
// of the retiring key, as the seat does once it has checked the router's
// record.
func (s *Seat) Answer(key mesh.ProvisionKey, option string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.get(key.String())
	if !ok || p.State != mesh.Retiring {
		s.t.Fatalf("kittest: answer %s: not a retiring provision", key)
	}
	p.Warrant = &mesh.Warrant{
		Ask: p.Ask, Option: option,
		By: mesh.Identity{Who: "operator", Kind: "nats-user", Identity: "operator"},
		At: time.Now().UTC().Truncate(time.Second),
	}
	s.put(key.String(), p)
}

// Drop deletes the provision at key with no warrant: what the kit must
// never take as a retirement.
func (s *Seat) Drop(key mesh.ProvisionKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := bus.Retry(context.Background(), putBound, nil, "kittest: drop "+key.String(), func() error {
		_, err := bus.DeleteIfPresent(context.Background(), s.copy, key.String())
		return err
	}); err != nil {
		s.t.Errorf("kittest: %v", err)
	}
}

// Judge follows the bound buckets of providers and, until t ends, judges
// every provision of those providers from their entries as the seat does:
// provided (the entry's vault name and generation as the reference), failed
// and waits with the entry's why, asked when there is no entry; a retiring
// key approved with "yes" whose entry is gone is deleted, and one whose
// entry is failed or waits (its removal failed) says it ([WhyNotRemoved]). Names are read
// exactly, as the seat reads them (spec 2): an entry {"STATE":"provided"}
// says no state, and leaves its key asked.
func (s *Seat) Judge(providers ...string) {
	// The judging loop has stopped before the seat's connection closes
	// (cleanups run last first): a judge under way when the test ends
	// would otherwise fail it with a put on a closed connection.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.t.Cleanup(func() {
		cancel()
		<-done
	})
	s.mu.Lock()
	for _, m := range providers {
		c := bus.Follow(ctx, s.js, mesh.BoundBucket(m), bus.Options{Create: true, OnChange: func(bus.Change) { s.poke() }})
		<-c.Ready()
		s.bound[m] = c
	}
	s.mu.Unlock()
	s.poke()
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.kick:
				s.judge(ctx)
			}
		}
	}()
}

func (s *Seat) judge(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	s.copy.Range(func(key string, _ bus.Item) bool { keys = append(keys, key); return true })
	for _, key := range keys {
		p, ok := s.get(key)
		if !ok {
			continue
		}
		c := s.bound[p.Provider.Module]
		if c == nil {
			continue
		}
		it, has := c.Get(key)
		if p.State == mesh.Retiring {
			approved := p.Warrant != nil && p.Warrant.Option == "yes"
			switch {
			case !approved || ctx.Err() != nil:
			case !has:
				if err := bus.Retry(ctx, putBound, nil, "kittest: delete "+key, func() error {
					_, err := bus.DeleteIfPresent(ctx, s.copy, key)
					return err
				}); err != nil && ctx.Err() == nil {
					s.t.Errorf("kittest: %v", err)
				}
			default:
				// The removal failed: the entry's why joins the key's.
				q := p
				q.Why, _, _ = strings.Cut(p.Why, noteApproved)
				var e mesh.Entry
				if err := jsonhead.Unmarshal(it.Value, &e); err == nil {
					if st, why := e.Outcome(); st == mesh.Failed || st == mesh.Waits {
						q.Why += WhyNotRemoved(p.Provider, why)
					}
				}
				if q.Why != p.Why {
					s.put(key, q)
				}
			}
			continue
		}
		q := p
		q.Reference = nil // the current entry's, or none (as the seat judges)
		if !has {
			q.State, q.Why = mesh.Asked, WhyNoEntry(p.Provider)
		} else {
			var e mesh.Entry // its names exact, as the seat reads entries
			if err := jsonhead.Unmarshal(it.Value, &e); err != nil {
				q.State, q.Why = mesh.Asked, fmt.Sprintf("the entry of %s for this key cannot be decoded: %v", p.Provider.Module, err)
			} else {
				st, why := e.Outcome()
				switch st {
				case mesh.Provided:
					q.State, q.Why = st, why // a provided entry's why says more, if any
					if e.VaultName != "" || e.Generation != 0 {
						q.Reference = &mesh.Reference{ID: e.VaultName, Generation: e.Generation}
					}
				case mesh.Failed, mesh.Waits:
					q.State, q.Why = st, why
				default:
					q.State, q.Why = mesh.Asked, fmt.Sprintf("the entry of %s says state %q, which is not provided, failed or waits: %s", p.Provider.Module, st, why)
				}
			}
		}
		if q.State != p.State || q.Why != p.Why || !sameRef(q.Reference, p.Reference) {
			if ctx.Err() == nil {
				s.put(key, q)
			}
		}
	}
}

func sameRef(a, b *mesh.Reference) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// noteApproved begins what the seat adds to the why of a retiring key
// approved with yes that its provider has not removed.
const noteApproved = "; approved with yes, but "

// WhyNotRemoved is what the seat adds to the why of a retiring key approved
// with yes while its provider's entry is failed or waits with entryWhy (its
// removal failed, and is tried again).
func WhyNotRemoved(provider mesh.Ref, entryWhy string) string {
	return fmt.Sprintf("%s%s on %s has not removed it yet; its entry says: %s", noteApproved, provider.Module, provider.Node, entryWhy)
}

// Entry returns the entry of provider at key in "<provider>_bound" as read
// from the bus now, and whether there is one. Its names are read exactly
// (spec 2): an entry that does not decode, or has a name of an entry in
// another case ("STATE", left unread as the seat leaves it), fails t.
func Entry(t testing.TB, js jetstream.JetStream, provider string, key mesh.ProvisionKey) (mesh.Entry, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, mesh.BoundBucket(provider))
	if err != nil {
		return mesh.Entry{}, false
	}
	e, err := kv.Get(ctx, key.String())
	if err != nil {
		return mesh.Entry{}, false
	}
	var out mesh.Entry
	if err := jsonhead.Decode(e.Value(), &out); err != nil {
		// A name in another case (a *jsonhead.NameError) is left unread,
		// and said, as the seat says it.
		t.Errorf("kittest: entry %s of %s does not decode: %v", key, provider, err)
	}
	return out, true
}

// Said holds the lines a logger returned by [Log] said. It is safe for
// concurrent use.
type Said struct {
	mu    sync.Mutex
	lines []string
}

// Has reports whether a said line contains every one of parts.
func (s *Said) Has(parts ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		all := true
		for _, p := range parts {
			if !strings.Contains(l, p) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// Count returns how many said lines contain every one of parts.
func (s *Said) Count(parts ...string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			n++
		}
	}
	return n
}

func (s *Said) Write(b []byte) (int, error) {
	s.mu.Lock()
	s.lines = append(s.lines, strings.TrimSpace(string(b)))
	s.mu.Unlock()
	return len(b), nil
}

// Lines returns every line said so far, one per line.
func (s *Said) Lines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// Log returns a logger (text lines, debug level) that keeps what it says in
// a [Said]; print [Said.Lines] when a test fails.
func Log() (*slog.Logger, *Said) {
	said := &Said{}
	return slog.New(slog.NewTextHandler(said, &slog.HandlerOptions{Level: slog.LevelDebug})), said
}
