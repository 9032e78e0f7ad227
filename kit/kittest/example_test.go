package kittest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// shelves is the resource of a small provider, module "shelf": one shelf
// per provision key.
type shelves struct {
	mu     sync.Mutex
	made   map[string]bool
	locked bool // a shelf that is locked cannot be removed
}

func (s *shelves) Provide(_ context.Context, key mesh.ProvisionKey, _ mesh.Provision) (kit.Result, error) {
	if key.Provision != "shelf" {
		return kit.Failing("shelf provides only shelf provisions, not " + key.Provision), nil // final until the provision changes
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.made[key.String()] = true // idempotent: Provide is called again after a restart
	return kit.Provided("", 0), nil
}

func (s *shelves) Retire(_ context.Context, key mesh.ProvisionKey, _ mesh.Provision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locked {
		return errors.New("shelf: the shelf is locked") // the entry stays, failed with this why; tried again
	}
	delete(s.made, key.String())
	return nil
}

func (s *shelves) unlock() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.locked = false
}

func (s *shelves) has(key mesh.ProvisionKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.made[key.String()]
}

// TestWritingAProvider is the test docs/providers.md shows: a provider on
// the kit, tested against a real embedded bus with kittest's seat.
func TestWritingAProvider(t *testing.T) {
	url := kittest.Server(t)
	seat := kittest.NewSeat(t, url)
	seat.Judge("shelf") // carries shelf's entries into the provisions, as the seat does

	_, js := kittest.Connect(t, url, "shelf")
	log, said := kittest.Log()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(said.Lines())
		}
	})
	h := &shelves{made: map[string]bool{}, locked: true} // a kit.Handler: Provide makes a shelf, Retire removes it
	k, err := kit.Start(t.Context(), kit.Config{Module: "shelf", Node: "control", JetStream: js, Handler: h, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	<-k.Ready()

	// gitea on ace needs a shelf from shelf on control.
	key, p := kittest.Requirement(mesh.Ref{Module: "gitea", Node: "ace"}, "shelf", "", mesh.Ref{Module: "shelf", Node: "control"})
	seat.Need(key, p)
	seat.Wait(key, "provided", func(p mesh.Provision, _ bool) bool { return p.State == mesh.Provided })
	if e, _ := kittest.Entry(t, js, "shelf", key); e.State != mesh.Provided || !h.has(key) {
		t.Fatalf("entry %+v, shelf made %v; want provided, and the shelf made", e, h.has(key))
	}

	// No longer needed: retiring, and nothing is removed until the operator says yes.
	seat.Retire(key)
	seat.Answer(key, "yes")
	// The shelf is locked: the removal fails, and the key says why.
	want := "no build wanted or placed on ace requires shelf of shelf on control any more" +
		kittest.WhyNotRemoved(mesh.Ref{Module: "shelf", Node: "control"},
			"the removal approved with yes failed, and is tried again with backoff: shelf: the shelf is locked")
	seat.Wait(key, "retiring, saying the removal failed", func(p mesh.Provision, _ bool) bool { return p.Why == want })
	h.unlock()
	// Tried again with backoff: removed, the entry deleted, the key retired.
	seat.Wait(key, "retired", func(_ mesh.Provision, ok bool) bool { return !ok })
	if h.has(key) {
		t.Error("the shelf is still there after its key retired")
	}
}
