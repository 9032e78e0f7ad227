package kit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// shelfAt is a handler of the shelf provider on one node whose Provide of
// a key blocks while hold says so, recording the calls; busy is shared by
// the instances of one test, so that a key handled by two at once is
// found.
type shelfAt struct {
	node string
	hold func(key string) chan struct{} // nil: provide at once
	busy *busyKeys

	mu       sync.Mutex
	provides map[string]int
	entered  map[string]chan struct{}
}

type busyKeys struct {
	mu    sync.Mutex
	now   map[string]string // key -> the node handling it
	twice []string
}

func (b *busyKeys) enter(key, node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if other, ok := b.now[key]; ok {
		b.twice = append(b.twice, key+" on "+node+" while on "+other)
	}
	b.now[key] = node
}

func (b *busyKeys) leave(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.now, key)
}

func newShelfAt(node string, busy *busyKeys, hold func(string) chan struct{}) *shelfAt {
	return &shelfAt{node: node, hold: hold, busy: busy, provides: map[string]int{}, entered: map[string]chan struct{}{}}
}

// enteredCh is closed once Provide of key has begun.
func (s *shelfAt) enteredCh(key string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entered[key] == nil {
		s.entered[key] = make(chan struct{})
	}
	return s.entered[key]
}

func (s *shelfAt) calls(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.provides[key]
}

func (s *shelfAt) Provide(ctx context.Context, key mesh.ProvisionKey, _ mesh.Provision) (kit.Result, error) {
	k := key.String()
	s.busy.enter(k, s.node)
	defer s.busy.leave(k)
	s.mu.Lock()
	s.provides[k]++
	s.mu.Unlock()
	close(s.enteredCh(k))
	if s.hold != nil {
		if release := s.hold(k); release != nil {
			select {
			case <-release:
			case <-ctx.Done():
				return kit.Result{}, errors.New("shelf: the shelf was half built when the provide was cut: " + ctx.Err().Error())
			}
		}
	}
	if err := ctx.Err(); err != nil {
		// The old kit cancelled its handler's ctx as soon as it stopped.
		return kit.Result{}, err
	}
	return kit.Provided("shelf-"+k, 1), nil
}

func (s *shelfAt) Retire(context.Context, mesh.ProvisionKey, mesh.Provision) error { return nil }

// TestKitHandsOnItsWorkWhenItStops stops the shelf provider on control
// (as when its module is unplaced) while two of its provides are in hand:
// one that ends within the grace, one that does not. Once its kit is Done,
// and at once, the entries say each key's last outcome: the provide that
// ended within the grace is provided (its ctx was not cancelled when the
// kit stopped; before, it was cut at once and its outcome dropped), the one
// cut when the grace ended waits, saying it may be half done; no entry is
// left unwritten. The shelf provider placed on dell then takes over from
// the bus: every key is provided, each provided by dell's once (the keys
// control finished are checked once, the cut one done again), no key was
// ever handled by both at once, and dell's kit does not warn of control's
// entries of keys not yet moved to it as keys moved away.
func TestKitHandsOnItsWorkWhenItStops(t *testing.T) {
	url := kittest.Server(t)
	seat := kittest.NewSeat(t, url)
	seat.Judge("shelf")
	busy := &busyKeys{now: map[string]string{}}
	control := mesh.Ref{Module: "shelf", Node: "control"}
	dell := mesh.Ref{Module: "shelf", Node: "dell"}
	consumers := []string{"gitea", "vaultwarden", "wiki"} // wiki's provide ends in the grace, vaultwarden's is cut
	keys := map[string]mesh.ProvisionKey{}
	provisions := map[string]mesh.Provision{}
	for _, c := range consumers {
		key, p := kittest.Requirement(mesh.Ref{Module: c, Node: "ace"}, "shelf", "", control)
		keys[c], provisions[c] = key, p
	}
	release := map[string]chan struct{}{keys["wiki"].String(): make(chan struct{}), keys["vaultwarden"].String(): make(chan struct{})}
	a := newShelfAt("control", busy, func(k string) chan struct{} { return release[k] })

	log, said := kittest.Log()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the kits said:\n%s", said.Lines())
		}
	})
	_, ajs := kittest.Connect(t, url, "shelf-control")
	actx, stop := context.WithCancel(context.Background())
	defer stop()
	const grace = 2 * time.Second
	ka, err := kit.Start(actx, kit.Config{Module: "shelf", Node: "control", JetStream: ajs, Handler: a, Log: log, Grace: grace, RetryMin: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-ka.Ready()
	for _, c := range consumers {
		seat.Need(keys[c], provisions[c])
	}
	seat.Wait(keys["gitea"], "provided by control", func(p mesh.Provision, _ bool) bool { return p.State == mesh.Provided })
	for _, c := range []string{"wiki", "vaultwarden"} {
		select {
		case <-a.enteredCh(keys[c].String()):
		case <-time.After(10 * time.Second):
			t.Fatalf("control's provide of %s never began", keys[c])
		}
	}

	// Unplaced from control: its kit stops with two provides in hand.
	stop()
	select {
	case <-ka.Done():
		t.Fatal("the kit was done with two provides in hand, before its grace")
	default:
	}
	close(release[keys["wiki"].String()]) // ends within the grace; vaultwarden's never does
	select {
	case <-ka.Done():
	case <-time.After(grace + 15*time.Second):
		t.Fatalf("the kit not done %v after it stopped", grace+15*time.Second)
	}
	_, rjs := kittest.Connect(t, url, "reader")
	if e, ok := kittest.Entry(t, rjs, "shelf", keys["wiki"]); !ok || e.State != mesh.Provided || e.VaultName != "shelf-"+keys["wiki"].String() {
		t.Errorf("once control's kit is done, the entry of %s is %+v (ok %v); want provided by the provide that ended within the grace", keys["wiki"], e, ok)
	}
	e, ok := kittest.Entry(t, rjs, "shelf", keys["vaultwarden"])
	if !ok || e.State != mesh.Waits || !strings.Contains(e.Why, "shelf on control stopped while it provided this key") ||
		!strings.Contains(e.Why, "half done; the provider placed next provides it again") || !strings.Contains(e.Why, "grace of 2s") {
		t.Errorf("once control's kit is done, the entry of %s is %+v (ok %v); want waits, saying control's provide was cut when its grace ended", keys["vaultwarden"], e, ok)
	}
	if e, ok := kittest.Entry(t, rjs, "shelf", keys["gitea"]); !ok || e.State != mesh.Provided {
		t.Errorf("the entry of %s is %+v (ok %v); want provided", keys["gitea"], e, ok)
	}
	if !said.Has("kit: stopped; its work is handed on") {
		t.Error("the kit did not say it handed on its work")
	}

	// Placed on dell: the seat names dell's shelf, which takes over.
	b := newShelfAt("dell", busy, nil)
	_, bjs := kittest.Connect(t, url, "shelf-dell")
	kb, err := kit.Start(bustest.Context(t), kit.Config{Module: "shelf", Node: "dell", JetStream: bjs, Handler: b, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	<-kb.Ready()
	for _, c := range consumers {
		p := provisions[c]
		p.Provider = dell
		seat.Need(keys[c], p)
	}
	for _, c := range consumers {
		seat.Wait(keys[c], "provided by dell", func(p mesh.Provision, _ bool) bool {
			return p.State == mesh.Provided && b.calls(keys[c].String()) == 1
		})
	}
	bustest.WaitFor(t, 0, "dell's kit idle", kb.Idle)
	for _, c := range consumers {
		if n := b.calls(keys[c].String()); n != 1 {
			t.Errorf("dell provided %s %d times; want once", keys[c], n)
		}
		if e, ok := kittest.Entry(t, rjs, "shelf", keys[c]); !ok || e.State != mesh.Provided {
			t.Errorf("the entry of %s is %+v; want provided by dell", keys[c], e)
		}
	}
	// dell's kit found control's entries of keys not yet moved to it:
	// not a key it answered and lost, so not said above debug level.
	if said.Has("level=WARN", "now names another provider", "node=dell") {
		t.Errorf("dell's kit warned of control's entries as keys moved away from it:\n%s", said.Lines())
	}
	busy.mu.Lock()
	defer busy.mu.Unlock()
	if len(busy.twice) > 0 {
		t.Errorf("keys handled by two providers at once: %v", busy.twice)
	}
}
