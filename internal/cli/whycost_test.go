package cli

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/internal/why"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestWhyReadsOnlyTheKeysItWalks walks every provision and plan key of the
// homelab, settled and then with vaultwarden's keys retiring and asked,
// through lookup.State (what why reads: each key by its key) and through
// the whole mesh read once: the steps are the same, and lookup read no
// bucket whole and far fewer keys than the mesh holds.
func TestWhyReadsOnlyTheKeysItWalks(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	startRouter(t, s)
	st := startSeat(t, s, homelabFile)
	_, js := bustest.Connect(t, s, "operator")
	ctx := bustest.Context(t)

	compare := func(phase string) {
		t.Helper()
		var keys []string
		full, _, err := readMesh(ctx, js, func(bucket, key string, _ []byte) {
			if bucket == mesh.ProvisionsBucket || bucket == mesh.PlansBucket {
				keys = append(keys, key)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) < 40 {
			t.Fatalf("%s: the homelab holds %d provision and plan keys; want more than 40", phase, len(keys))
		}
		walked := 0
		for _, key := range keys {
			want, werr := why.Walk(full, key)
			ls := lookup.New(context.Background(), js)
			got, gerr := why.Walk(ls, key)
			if ls.Err() != nil {
				t.Fatalf("%s: why %s: lookup: %v", phase, key, ls.Err())
			}
			if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("%s: why %s through lookup = %+v, %v; through the whole mesh %+v, %v", phase, key, got, gerr, want, werr)
			}
			if w := ls.Whole(); len(w) > 0 {
				t.Errorf("%s: why %s read whole buckets %v", phase, key, w)
			}
			if n := ls.Reads(); n > 60 {
				t.Errorf("%s: why %s made %d reads; want at most 60 (the walk's keys)", phase, key, n)
			}
			if len(got) > 1 {
				walked++
			}
		}
		if walked == 0 {
			t.Errorf("%s: no key walked past itself: the comparison shows nothing", phase)
		}
	}
	compare("settled")

	if _, errOut, err := run(t, "apply", "-f", withoutVaultwarden(t), "--yes", "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	waitSeat(t, s, st)
	bustest.WaitFor(t, 0, "vaultwarden's database key asked", func() bool {
		ls := lookup.New(ctx, js)
		p, ok := ls.Provision("ace.vaultwarden.database")
		return ok && p.State == mesh.Retiring && p.Ask != ""
	})
	compare("retiring")
	steps, err := why.Walk(lookup.New(ctx, js), "ace.vaultwarden.database")
	if err != nil {
		t.Fatal(err)
	}
	asked := false
	for _, s := range steps {
		asked = asked || s.What == why.StepAsk && strings.HasPrefix(s.Key, "retire-")
	}
	if !asked {
		t.Errorf("why ace.vaultwarden.database through lookup = %+v; want its ask's step", steps)
	}

	// Answered yes, the key is retired (no provider holds an entry of
	// it): why of it, on the command line, names the ask and the answer,
	// reading the key's delete marker and that one record, no bucket
	// whole.
	p, _ := lookup.New(ctx, js).Provision("ace.vaultwarden.database")
	if _, errOut, err := run(t, "answer", p.Ask, "yes", "--nats", s.URL(), "--user", "alice"); err != nil {
		t.Fatalf("answer %s yes: %v (%s)", p.Ask, err, errOut)
	}
	bustest.WaitFor(t, 0, "ace.vaultwarden.database retired", func() bool {
		_, ok := lookup.New(ctx, js).Provision("ace.vaultwarden.database")
		return !ok
	})
	out, errOut, err := run(t, "why", "ace.vaultwarden.database", "--nats", s.URL())
	if err != nil {
		t.Fatalf("why of the retired key: %v (%s)", err, errOut)
	}
	for _, want := range []string{
		"ace.vaultwarden.database  retired: no longer kept: the seat deleted it on the operator's warrant",
		"  → " + p.Ask + "  yes for ",
		": removed on the answer yes of alice at ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("why ace.vaultwarden.database (retired) printed\n%s\nwant %q", out, want)
		}
	}
	ls := lookup.New(ctx, js)
	got, gerr := why.Walk(ls, "ace.vaultwarden.database")
	full, _, err := readMesh(ctx, js, func(string, string, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	want, werr := why.Walk(full, "ace.vaultwarden.database")
	if gerr != nil || werr != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("why of the retired key through lookup = %+v, %v; through the whole mesh %+v, %v", got, gerr, want, werr)
	}
	if w := ls.Whole(); len(w) > 0 || ls.Reads() > 6 {
		t.Errorf("why of the retired key read whole buckets %v and made %d reads; want none whole, at most 6", w, ls.Reads())
	}
}
