package seat_test

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

var vaultwardenKeys = []string{
	vaultwardenCred,
	"ace.vaultwarden.database",
	"ace.vaultwarden.route",
}

// vaultwardenCred is the credential that ace.vaultwarden.database depends
// on: it is asked about only once that key is retired.
const vaultwardenCred = "ace.vaultwarden.credential.postgres_database"

// askedFirst are the keys of vaultwarden asked about as soon as they retire.
var askedFirst = []string{"ace.vaultwarden.database", "ace.vaultwarden.route"}

// whyCredWaits is the why of vaultwarden's retiring credential while its
// database key is kept.
const whyCredWaits = "no build wanted or placed on ace requires credential of mesh-vault on control any more; " +
	"it is asked about once the keys that depend on it are retired: ace.vaultwarden.database"

// record returns the router's record of an ask.
func (h *harness) record(id string) (mesh.Record, bool) {
	h.t.Helper()
	var r mesh.Record
	ok := h.get(mesh.RecordsBucket, id, &r)
	return r, ok
}

// retired removes vaultwarden from ace and waits until each of its keys
// asked first is retiring with an ask the router recorded, and its
// credential retiring with no ask, waiting for its database key; it returns
// the asks by key.
func (h *harness) retired() map[string]mesh.Ask {
	h.t.Helper()
	h.apply(withoutVaultwarden(h.t))
	p := h.waitState(vaultwardenCred, mesh.Retiring, whyCredWaits)
	if p.Ask != "" {
		h.t.Errorf("%s raised ask %s while a key depends on it", vaultwardenCred, p.Ask)
	}
	out := map[string]mesh.Ask{}
	for _, key := range askedFirst {
		var p mesh.Provision
		bustest.WaitFor(h.t, 0, key+" retiring with an ask", func() bool {
			var ok bool
			p, ok = h.provision(key)
			return ok && p.State == mesh.Retiring && p.Ask != ""
		})
		var r mesh.Record
		bustest.WaitFor(h.t, 0, "the record of "+p.Ask, func() bool {
			var ok bool
			r, ok = h.record(p.Ask)
			return ok
		})
		out[key] = r.Ask
	}
	return out
}

func TestRetiringKeysAskTheOperator(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	sub, err := h.nc.SubscribeSync(mesh.AsksSubject)
	if err != nil {
		t.Fatal(err)
	}
	got := h.retired()
	headlines := map[string]string{
		"ace.vaultwarden.database":                     "Remove vaultwarden's database access?",
		"ace.vaultwarden.route":                        "Remove vaultwarden's route access?",
		"ace.vaultwarden.credential.postgres_database": "Remove vaultwarden's credential for postgres database?",
	}
	for key, a := range got {
		if !strings.HasPrefix(a.ID, "retire-"+strings.ReplaceAll(key, ".", "-")+"-") || a.About != "provision."+key {
			t.Errorf("ask of %s = id %s about %s", key, a.ID, a.About)
		}
		if a.Headline != headlines[key] || a.Who != "operator" || a.OnExpiry != retire.OnExpiry {
			t.Errorf("ask of %s: headline %q who %q; want %q operator", key, a.Headline, a.Who, headlines[key])
		}
		if !strings.Contains(a.Explanation, "stay") {
			t.Errorf("ask of %s does not say what stays: %q", key, a.Explanation)
		}
		if len(a.Options) != 2 || a.Options[0].ID != "yes" || a.Options[0].Label != "Remove" || a.Options[1].ID != "no" ||
			a.Options[0].Binds != mesh.ActDigest(key, a.ID, "yes") || a.Options[1].Binds != mesh.ActDigest(key, a.ID, "no") {
			t.Errorf("ask of %s options = %+v; want yes/no binding their acts", key, a.Options)
		}
	}
	// One ask each was published.
	seen := map[string]int{}
	for {
		m, err := sub.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		var a mesh.Ask
		json.Unmarshal(m.Data, &a)
		seen[a.About]++
	}
	for _, key := range vaultwardenKeys {
		want := 1
		if key == vaultwardenCred {
			want = 0 // not while ace.vaultwarden.database depends on it
		}
		if seen["provision."+key] != want {
			t.Errorf("asks published for %s: %d; want %d", key, seen["provision."+key], want)
		}
	}
	// Applying the same file again, and a seat that restarts, raise none.
	records := len(h.keys(mesh.RecordsBucket, ""))
	h.apply(withoutVaultwarden(t))
	h.stopSeat()
	h.startSeat()
	h.put(mesh.WantsBucket, "want.ace.gitea", mesh.Want{Fingerprint: "b7c100"}) // composes ace again
	h.settle()
	if n := len(h.keys(mesh.RecordsBucket, "")); n != records {
		t.Errorf("records after re-apply and restart = %d; want %d (no ask raised again)", n, records)
	}
	for key, a := range got {
		if p, _ := h.provision(key); p.Ask != a.ID {
			t.Errorf("%s ask = %q; want still %q", key, p.Ask, a.ID)
		}
	}
}

func TestAnswerYesRetiresOnceTheEntryIsGone(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	pg := mesh.BoundBucket("postgres")
	h.credentialsProvided("ace.vaultwarden.credential.postgres_database")
	h.put(pg, "ace.vaultwarden.database", mesh.Entry{State: mesh.Provided, VaultName: "v/vw", Generation: 1})
	h.waitState("ace.vaultwarden.database", mesh.Provided, "")
	got := h.retired()
	key := "ace.vaultwarden.database"
	if _, err := asks.Answer(h.ctx, h.nc, "alice", got[key].ID, "yes"); err != nil {
		t.Fatal(err)
	}
	var p mesh.Provision
	bustest.WaitFor(t, 0, "the warrant in "+key, func() bool {
		p, _ = h.provision(key)
		return p.Warrant != nil
	})
	if p.State != mesh.Retiring || p.Warrant.Ask != got[key].ID || p.Warrant.Option != "yes" || p.Warrant.By.Who != "alice" {
		t.Errorf("%s = %+v warrant %+v; want retiring, yes by alice", key, p, p.Warrant)
	}
	// The key stays while the provider keeps its entry.
	h.settle()
	if _, ok := h.provision(key); !ok {
		t.Fatal("the key went before its provider removed its entry")
	}
	h.del(pg, key)
	bustest.WaitFor(t, 0, key+" to be deleted", func() bool { _, ok := h.provision(key); return !ok })
}

func TestAnswerNoIsKept(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	got := h.retired()
	key := "ace.vaultwarden.route"
	if _, err := asks.Answer(h.ctx, h.nc, "operator", got[key].ID, "no"); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the warrant no", func() bool {
		p, _ := h.provision(key)
		return p.Warrant != nil && p.Warrant.Option == "no"
	})
	records := len(h.keys(mesh.RecordsBucket, ""))
	h.put(mesh.WantsBucket, "want.ace.gitea", mesh.Want{Fingerprint: "b7c100"}) // composes ace again
	h.settle()
	p, _ := h.provision(key)
	if p.State != mesh.Retiring || p.Warrant == nil || p.Warrant.Option != "no" || p.Ask != got[key].ID {
		t.Errorf("%s after recomposing = %+v; want retiring with warrant no and its ask", key, p)
	}
	if n := len(h.keys(mesh.RecordsBucket, "")); n != records {
		t.Errorf("records = %d; want %d: a no is not asked again", n, records)
	}
}

func TestExpiredAskIsAskedAgainAtTheNextChange(t *testing.T) {
	// The ask lives long enough for retired() to see it before it expires
	// on a loaded machine (1 s flaked), and no longer than the test needs.
	h := startWith(t, homelab(t), options{router: true, askTTL: 3 * time.Second})
	got := h.retired()
	key := "ace.vaultwarden.route"
	bustest.WaitFor(t, 15*time.Second, "the ask to expire and be cleared", func() bool {
		p, _ := h.provision(key)
		return p.Ask == "" && p.State == mesh.Retiring
	})
	if r, _ := h.record(got[key].ID); r.State != mesh.RecordExpired {
		t.Errorf("record state = %s; want expired", r.State)
	}
	h.put(mesh.WantsBucket, "want.ace.gitea", mesh.Want{Fingerprint: "b7c100"}) // a change of ace
	var p mesh.Provision
	bustest.WaitFor(t, 0, "a new ask", func() bool {
		p, _ = h.provision(key)
		return p.Ask != "" && p.Ask != got[key].ID
	})
	bustest.WaitFor(t, 0, "the new ask recorded", func() bool { _, ok := h.record(p.Ask); return ok })
}

func TestTamperedWarrantsAreRefused(t *testing.T) {
	// Each record is what a holder of the router's user alone may write into
	// mesh-asks_records (attacker F9): an answered record whose warrant binds
	// what the record itself prints, but cannot be true.
	h := startWith(t, homelab(t), options{router: true})
	h.retired()
	key := "ace.vaultwarden.route"
	for _, c := range []struct {
		name   string
		tamper func(w *mesh.RecordWarrant, a mesh.Ask)
		why    string // what the said problem holds
	}{
		{"binds another key", func(w *mesh.RecordWarrant, a mesh.Ask) { w.Binds = mesh.ActDigest("ace.gitea.route", a.ID, "yes") },
			"not this act's digest"},
		{"another asker", func(w *mesh.RecordWarrant, a mesh.Ask) { w.Asker = "postgres" }, `is from asker "postgres"`},
		{"an option never offered", func(w *mesh.RecordWarrant, a mesh.Ask) {
			w.Option = "burn"
			w.Binds = mesh.ActDigest(key, a.ID, "burn")
		}, `chose "burn", which the ask never offered`},
		{"dated two minutes ahead", func(w *mesh.RecordWarrant, a mesh.Ask) { w.At = time.Now().Add(2 * time.Minute) },
			"after the seat's now"},
		{"dated before the ask", func(w *mesh.RecordWarrant, a mesh.Ask) {
			raised, _ := retire.Raised(a.ID)
			w.At = raised.Add(-time.Hour)
		}, "before the ask was raised"},
		{"by free text", func(w *mesh.RecordWarrant, a mesh.Ask) {
			w.By = mesh.Identity{Who: "nobody-at-all", Kind: "nats-user", Identity: "client-ace"}
		}, `by "nobody-at-all", whose identity is "client-ace"`},
		{"by a node's client", func(w *mesh.RecordWarrant, a mesh.Ask) {
			w.By = mesh.Identity{Who: "client-ace", Kind: "nats-user", Identity: "client-ace"}
		}, `by the user "client-ace", which is none of the operators'`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := h.provision(key)
			var r mesh.Record
			bustest.WaitFor(t, 0, "the record of "+p.Ask, func() bool { var ok bool; r, ok = h.record(p.Ask); return ok })
			a := r.Ask
			w := mesh.RecordWarrant{Asker: "mesh-provisioner", Ask: a.ID, Outcome: mesh.OutcomeChosen, Option: "yes",
				Binds: mesh.ActDigest(key, a.ID, "yes"), By: mesh.Identity{Who: "mallory", Kind: "nats-user", Identity: "mallory"}, At: time.Now()}
			c.tamper(&w, a)
			before := len(h.problems())
			h.put(mesh.RecordsBucket, a.ID, mesh.Record{State: mesh.RecordAnswered, Ask: a, Warrant: &w})
			// The warrant is refused and said; the key keeps its state and
			// is asked anew, so the operator can still decide.
			var q mesh.Provision
			bustest.WaitFor(t, 0, "a new ask for "+key, func() bool {
				q, _ = h.provision(key)
				return q.Ask != "" && q.Ask != a.ID
			})
			if q.Warrant != nil || q.State != mesh.Retiring {
				t.Errorf("%s after a tampered record = %+v; want retiring, no warrant", key, q)
			}
			bustest.WaitFor(t, 0, "the new ask recorded", func() bool { r, ok := h.record(q.Ask); return ok && r.State == mesh.RecordOpen })
			said := h.problems()[before:]
			if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, a.ID) && strings.Contains(s, c.why) }) {
				t.Errorf("problems said = %q; want one of ask %s holding %q", said, a.ID, c.why)
			}
		})
	}
}

func TestNeededAgainBeforeAnAnswer(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	got := h.retired()
	h.apply(homelab(t))
	states := map[string]mesh.State{
		"ace.vaultwarden.credential.postgres_database": mesh.Asked,
		"ace.vaultwarden.database":                     mesh.Waits, // for its credential
		"ace.vaultwarden.route":                        mesh.Asked,
	}
	for _, key := range vaultwardenKeys {
		p := h.waitState(key, states[key], "")
		if p.Ask != "" || p.Warrant != nil {
			t.Errorf("%s needed again = %+v; want its ask and warrant cleared", key, p)
		}
		if key == vaultwardenCred {
			continue // it raised no ask
		}
		// Its ask is withdrawn: no longer open for the operator.
		var r mesh.Record
		bustest.WaitFor(t, 0, "the ask of "+key+" withdrawn", func() bool {
			r, _ = h.record(got[key].ID)
			return r.State == mesh.RecordExpired
		})
		if r.Warrant == nil || r.Warrant.By.Kind != mesh.KindWithdrawn || !strings.Contains(r.Warrant.Why, key) {
			t.Errorf("record of %s = %+v; want withdrawn by the seat, naming the key", key, r.Warrant)
		}
	}
	// Removed again: one open ask per key, the new one.
	again := h.retired()
	open, err := asks.List(h.ctx, h.nc, mesh.RecordOpen)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range askedFirst {
		n := 0
		for _, r := range open.Records {
			if r.Ask.About == "provision."+key {
				n++
				if r.Ask.ID != again[key].ID {
					t.Errorf("open ask of %s = %s; want the new %s", key, r.Ask.ID, again[key].ID)
				}
			}
		}
		if n != 1 {
			t.Errorf("%d open asks for %s; want 1", n, key)
		}
	}
}

// An open ask whose record vanishes from mesh-asks_records (while the seat
// runs, or while no seat runs) ended with no choice: said in the key's why,
// cleared, and asked again at once (in the same second, under the same id:
// its record is made anew).
func TestVanishedAskIsAskedAgain(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	got := h.retired()
	key := "ace.vaultwarden.route"
	askedAgain := func(old string) mesh.Provision {
		t.Helper()
		var p mesh.Provision
		bustest.WaitFor(t, 0, key+" asked again, its ask recorded open", func() bool {
			p, _ = h.provision(key)
			if p.State != mesh.Retiring || p.Ask == "" || !strings.Contains(p.Why, "vanished") {
				return false
			}
			r, ok := h.record(p.Ask)
			return ok && r.State == mesh.RecordOpen
		})
		want := "no build wanted or placed on ace requires route of route-proxy on control any more; its ask " + old +
			" vanished from " + mesh.RecordsBucket + " before anyone answered it, so it was asked again"
		if p.Why != want || p.Warrant != nil {
			t.Errorf("%s why = %q (warrant %+v)\nwant %q, no warrant", key, p.Why, p.Warrant, want)
		}
		return p
	}
	h.del(mesh.RecordsBucket, got[key].ID)
	p := askedAgain(got[key].ID)

	// While no seat runs.
	h.stopSeat()
	h.del(mesh.RecordsBucket, p.Ask)
	h.startSeat()
	askedAgain(p.Ask)
	// The other keys kept their asks.
	for _, other := range vaultwardenKeys {
		if q, _ := h.provision(other); other != key && q.Ask != got[other].ID {
			t.Errorf("%s ask = %q; want still %q", other, q.Ask, got[other].ID)
		}
	}
}

// TestOrphanedAskWithdrawnAtStart stops the seat after the key of an open
// ask was written needed again (state asked, no ask id) but before the seat
// withdrew the ask, as a seat stopped (SIGSTOP, its lease taken over) right
// after that write does: the seat that starts next withdraws the ask that no
// key names any more. Before, it stayed open for its whole time to live,
// and the key's next retirement made a second open ask of the same key
// (two serve --lease 3s, the holder stopped 0.3 s after putting a module
// back: 63 asks open for keys no longer retiring, then 2 and 3 open asks
// per key).
func TestOrphanedAskWithdrawnAtStart(t *testing.T) {
	h := startWith(t, homelab(t), options{router: true})
	got := h.retired()
	h.stopSeat()
	h.seat = nil // no seat to settle while the test writes
	const key = "ace.vaultwarden.route"
	p, ok := h.provision(key)
	if !ok || p.Ask != got[key].ID {
		t.Fatalf("%s = %+v; want it naming ask %s", key, p, got[key].ID)
	}
	p.State, p.Why, p.Ask, p.Warrant = mesh.Asked, "asked of route-proxy on control; "+noEntry+"route-proxy_bound", "", nil
	h.put(mesh.ProvisionsBucket, key, p)
	h.apply(homelab(t))
	h.startSeat()
	var r mesh.Record
	bustest.WaitFor(t, 0, "the orphaned ask of "+key+" withdrawn", func() bool {
		r, _ = h.record(got[key].ID)
		return r.State == mesh.RecordExpired
	})
	if r.Warrant == nil || r.Warrant.By.Kind != mesh.KindWithdrawn || !strings.Contains(r.Warrant.Why, key) {
		t.Errorf("record of %s = %+v; want withdrawn by the seat, naming the key", key, r.Warrant)
	}
}

// An ask that no router records (none runs: "no responders") is raised
// again, the same ask under the same id, after a backoff, until a router
// records it: its key keeps naming the ask meanwhile (never retiring with
// no ask), the tries are spaced (no tight loop), and once a router runs
// each key has one record. Before, the key's ask was cleared and never
// raised again until the key's node changed.
func TestUnrecordedAskIsRaisedAgain(t *testing.T) {
	var l logs
	h := startWith(t, homelab(t), options{log: slog.New(slog.NewTextHandler(&l, nil))})
	began := time.Now()
	h.apply(withoutVaultwarden(t))
	asked := map[string]string{}
	for _, key := range askedFirst {
		var p mesh.Provision
		bustest.WaitFor(t, 0, key+" retiring with an ask", func() bool {
			var ok bool
			p, ok = h.provision(key)
			return ok && p.State == mesh.Retiring && p.Ask != ""
		})
		asked[key] = p.Ask
	}
	const failed = "no ask router recorded the ask; it is raised again after a backoff"
	tries := func(id string) int {
		n := 0
		for _, line := range strings.Split(l.String(), "\n") {
			if strings.Contains(line, failed) && strings.Contains(line, "ask="+id+" ") {
				n++
			}
		}
		return n
	}
	bustest.WaitFor(t, 0, "each ask tried and raised again", func() bool {
		for _, id := range asked {
			if tries(id) < 2 {
				return false
			}
		}
		return true
	})
	for key, id := range asked {
		if p, _ := h.provision(key); p.State != mesh.Retiring || p.Ask != id {
			t.Errorf("%s while no router runs = %s ask %q; want retiring, still naming %s", key, p.State, p.Ask, id)
		}
		// The backoff starts at 1 s with a jitter of half: at most one try
		// every half second.
		if n, most := tries(id), 2+int(2*time.Since(began)/time.Second); n > most {
			t.Errorf("ask %s tried %d times in %s; want at most %d (a backoff, not a tight loop)", id, n, time.Since(began), most)
		}
	}

	rnc, rjs := bustest.Connect(t, h.srv, "mesh-asks")
	if _, err := asks.Start(h.ctx, rnc, rjs, nil); err != nil {
		t.Fatal(err)
	}
	for key, id := range asked {
		bustest.WaitFor(t, 15*time.Second, "the ask "+id+" of "+key+" recorded open", func() bool {
			r, ok := h.record(id)
			return ok && r.State == mesh.RecordOpen && r.Ask.About == "provision."+key
		})
	}
	h.settle()
	about := map[string]int{}
	for _, id := range h.keys(mesh.RecordsBucket, "") {
		if r, ok := h.record(id); ok {
			about[r.Ask.About]++
		}
	}
	for key, id := range asked {
		if p, _ := h.provision(key); p.Ask != id {
			t.Errorf("%s ask = %q; want still %s", key, p.Ask, id)
		}
		if n := about["provision."+key]; n != 1 {
			t.Errorf("%d records about %s; want 1", n, key)
		}
	}
}
