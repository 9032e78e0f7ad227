package asks_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// rig is a test's bus: a server with a running router, a connection for
// the seat (publishing asks) and one for the operator (answering).
type rig struct {
	s        *bus.Server
	ctx      context.Context
	seat     *nats.Conn
	operator *nats.Conn
	records  jetstream.KeyValue
}

func start(t *testing.T) rig {
	t.Helper()
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s, "asks")
	ctx := bustest.Context(t) // cancelled before the connection closes
	if _, err := asks.Start(ctx, nc, js, nil); err != nil {
		t.Fatal(err)
	}
	return open(t, s, ctx)
}

func open(t *testing.T, s *bus.Server, ctx context.Context) rig {
	t.Helper()
	seat, sjs := bustest.Connect(t, s, "seat")
	operator, _ := bustest.Connect(t, s, "operator")
	kv, err := bus.Bucket(ctx, sjs, mesh.RecordsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rig{s: s, ctx: ctx, seat: seat, operator: operator, records: kv}
}

// vaultwarden returns the ask of the retiring key ace.vaultwarden.database,
// expiring ttl from now.
func vaultwarden(ttl time.Duration) (string, mesh.Ask) {
	k := mesh.ProvisionKey{Node: "ace", Consumer: "vaultwarden", Provision: "database"}
	a := retire.Ask(k, mesh.Provision{
		Consumer: mesh.Ref{Module: "vaultwarden", Node: "ace"},
		Provider: mesh.Ref{Module: "postgres", Node: "control"},
		State:    mesh.Retiring,
	}, time.Now(), time.Hour)
	a.Expires = time.Now().Add(ttl).UTC()
	return k.String(), a
}

// raise publishes a on asks.mesh-provisioner as a request and returns the
// router's reply.
func (r rig) raise(t *testing.T, subject string, a any) asks.Reply {
	t.Helper()
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.seat.RequestWithContext(r.ctx, subject, b)
	if err != nil {
		t.Fatalf("raise on %s: %v", subject, err)
	}
	var rep asks.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatalf("reply %s: %v", m.Data, err)
	}
	return rep
}

// record reads the record of ask id from the bucket, with its revision.
func (r rig) record(t *testing.T, id string) (mesh.Record, uint64) {
	t.Helper()
	e, err := r.records.Get(r.ctx, id)
	if err != nil {
		t.Fatalf("record %s: %v", id, err)
	}
	var rec mesh.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatalf("record %s = %s: %v", id, e.Value(), err)
	}
	return rec, e.Revision()
}

func TestAskIsRecordedOnce(t *testing.T) {
	r := start(t)
	_, a := vaultwarden(time.Hour)
	b, _ := json.Marshal(a)
	for range 2 {
		if err := r.seat.Publish(mesh.AsksSubject, b); err != nil {
			t.Fatal(err)
		}
	}
	// A third time, changed, as a request: answered after the two publishes,
	// which the router's one subscription takes in order.
	changed := a
	changed.Headline = "Something else?"
	rep := r.raise(t, mesh.AsksSubject, changed)
	if rep.Error != "" || rep.Record == nil {
		t.Fatalf("raise again = %+v; want the record held", rep)
	}
	if rep.Record.Ask.Headline != "Remove vaultwarden's database access?" {
		t.Errorf("raise again answered headline %q; want the first one's", rep.Record.Ask.Headline)
	}
	rec, rev := r.record(t, a.ID)
	if rev != 1 {
		t.Errorf("record %s has revision %d; want 1 (written once)", a.ID, rev)
	}
	if rec.State != mesh.RecordOpen || rec.Warrant != nil {
		t.Errorf("record state %q, warrant %+v; want open, none", rec.State, rec.Warrant)
	}
	if rec.Ask.Asker != "mesh-provisioner" || rec.Ask.ID != a.ID || rec.Ask.Headline != a.Headline || len(rec.Ask.Options) != 2 {
		t.Errorf("recorded ask = %+v; want %+v with asker mesh-provisioner", rec.Ask, a)
	}
	if !rec.Ask.Expires.Equal(a.Expires) {
		t.Errorf("recorded expiry %v; want %v", rec.Ask.Expires, a.Expires)
	}
}

func TestBadAsksAreRefused(t *testing.T) {
	r := start(t)
	_, good := vaultwarden(time.Hour)
	if rep := r.raise(t, mesh.AsksSubject, good); rep.Error != "" {
		t.Fatalf("raise = %+v", rep)
	}
	for _, c := range []struct {
		name    string
		subject string
		change  func(a *mesh.Ask)
		why     string
	}{
		{"no id", mesh.AsksSubject, func(a *mesh.Ask) { a.ID = "" }, "asks: bad ask: ask has no id"},
		{"an id no key can be", mesh.AsksSubject, func(a *mesh.Ask) { a.ID = "retire ace" },
			`asks: bad ask: ask id "retire ace" holds ' ', which a record key cannot`},
		{"no binds", mesh.AsksSubject, func(a *mesh.Ask) { a.Options[1].Binds = "" },
			`binds "", not the hex SHA-256 of its act`},
		{"no expiry", mesh.AsksSubject, func(a *mesh.Ask) { a.Expires = time.Time{} }, ": no expiry"},
		{"no options", mesh.AsksSubject, func(a *mesh.Ask) { a.Options = nil }, ": no options"},
		{"another asker named", mesh.AsksSubject, func(a *mesh.Ask) { a.ID += "-x"; a.Asker = "mesh-vault" },
			`names the asker "mesh-vault" but was published on asks.mesh-provisioner`},
		{"an id recorded for another asker", mesh.AsksSubjectOf("mesh-vault"), func(a *mesh.Ask) { a.Asker = "" },
			`is already recorded for the asker "mesh-provisioner", not "mesh-vault"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := good
			a.Options = append([]mesh.AskOption(nil), good.Options...)
			c.change(&a)
			rep := r.raise(t, c.subject, a)
			if rep.Code != "bad-ask" || !strings.Contains(rep.Error, c.why) {
				t.Errorf("raise = %+v; want code bad-ask and an error holding %q", rep, c.why)
			}
		})
	}
	m, err := r.seat.RequestWithContext(r.ctx, mesh.AsksSubject, []byte(`{"id":`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Data), `"code":"bad-ask"`) {
		t.Errorf("raise of broken JSON answered %s; want code bad-ask", m.Data)
	}
}

func TestAnswer(t *testing.T) {
	for i, option := range []string{"yes", "no"} {
		t.Run(option, func(t *testing.T) {
			r := start(t)
			key, a := vaultwarden(time.Hour)
			r.raise(t, mesh.AsksSubject, a)
			before := time.Now()
			got, err := asks.Answer(r.ctx, r.operator, "operator", a.ID, option)
			if err != nil {
				t.Fatalf("Answer(%s) = %v", option, err)
			}
			rec, _ := r.record(t, a.ID)
			if rec.State != mesh.RecordAnswered || rec.Warrant == nil {
				t.Fatalf("record = %+v; want answered with a warrant", rec)
			}
			w := *rec.Warrant
			want := mesh.RecordWarrant{
				Asker: "mesh-provisioner", Ask: a.ID, Outcome: "chosen", Option: option,
				Binds: a.Options[i].Binds,
				By:    mesh.Identity{Who: "operator", Kind: "nats-user", Identity: "operator"},
				At:    w.At,
			}
			if w != want {
				t.Errorf("warrant = %+v; want %+v", w, want)
			}
			if w.Binds != mesh.ActDigest(key, a.ID, option) {
				t.Errorf("warrant binds %s; want the act digest %s", w.Binds, mesh.ActDigest(key, a.ID, option))
			}
			if w.At.Before(before.Add(-time.Second)) || w.At.After(time.Now().Add(time.Second)) {
				t.Errorf("warrant at %v; want about now", w.At)
			}
			if got.State != rec.State || *got.Warrant != w {
				t.Errorf("Answer returned %+v; want the record written %+v", got, rec)
			}
			// The seat's decision takes the record as a warrant.
			p := mesh.Provision{State: mesh.Retiring, Ask: a.ID}
			if d := retire.Decide(key, p, rec, retire.Asker, retire.Trust{Now: time.Now()}); d.Verdict != retire.Warrant || d.Warrant.Option != option {
				t.Errorf("Decide = %+v; want the warrant %s", d, option)
			}
		})
	}
}

func TestAnswerRefusals(t *testing.T) {
	r := start(t)
	_, answered := vaultwarden(time.Hour)
	r.raise(t, mesh.AsksSubject, answered)
	if _, err := asks.Answer(r.ctx, r.operator, "operator", answered.ID, "no"); err != nil {
		t.Fatal(err)
	}
	_, open := vaultwarden(time.Hour)
	open.ID += "-open"
	r.raise(t, mesh.AsksSubject, open)
	_, gone := vaultwarden(200 * time.Millisecond)
	gone.ID += "-gone"
	r.raise(t, mesh.AsksSubject, gone)
	bustest.WaitFor(t, 0, "the ask to expire", func() bool {
		rec, _ := r.record(t, gone.ID)
		return rec.State == mesh.RecordExpired
	})

	for _, c := range []struct {
		name, ask, option string
		is                error
		why               string
	}{
		{"unknown ask", "retire-nothing-1", "yes", asks.ErrUnknownAsk, "no ask retire-nothing-1 is recorded"},
		{"answered ask", answered.ID, "yes", asks.ErrNotOpen,
			"ask " + answered.ID + ` was answered "no" by operator at `},
		{"expired ask", gone.ID, "yes", asks.ErrNotOpen,
			"ask " + gone.ID + " expired at " + gone.Expires.Format(time.RFC3339) + "; it is not open"},
		{"unknown option", open.ID, "maybe", asks.ErrUnknownOption,
			"ask " + open.ID + ` offers no option "maybe" (it offers yes, no)`},
		{"no option", open.ID, "", asks.ErrBadRequest, `answer names no ask or no option: ask "` + open.ID + `", option ""`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := asks.Answer(r.ctx, r.operator, "operator", c.ask, c.option)
			if !errors.Is(err, c.is) {
				t.Fatalf("Answer(%s, %s) = %v; want %v", c.ask, c.option, err, c.is)
			}
			if !strings.Contains(err.Error(), c.why) {
				t.Errorf("Answer(%s, %s) = %q; want it to say %q", c.ask, c.option, err, c.why)
			}
		})
	}
	// A refused answer leaves the records as they were.
	if rec, _ := r.record(t, open.ID); rec.State != mesh.RecordOpen || rec.Warrant != nil {
		t.Errorf("open ask after refusals = %+v; want open", rec)
	}
	if rec, _ := r.record(t, answered.ID); rec.Warrant == nil || rec.Warrant.Option != "no" {
		t.Errorf("answered ask after refusals = %+v; want the warrant no", rec)
	}
	m, err := r.operator.RequestWithContext(r.ctx, asks.AnswerSubject("operator"), []byte(`yes`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Data), `"code":"bad-request"`) {
		t.Errorf("answer of broken JSON = %s; want code bad-request", m.Data)
	}
}

func TestAnswerNamesTheUserOfTheSubject(t *testing.T) {
	r := start(t)
	_, a := vaultwarden(time.Hour)
	r.raise(t, mesh.AsksSubject, a)
	rec, err := asks.Answer(r.ctx, r.operator, "ops.alice", a.ID, "no")
	if err != nil {
		t.Fatal(err)
	}
	if want := (mesh.Identity{Who: "ops.alice", Kind: "nats-user", Identity: "ops.alice"}); rec.Warrant.By != want {
		t.Errorf("by = %+v; want %+v", rec.Warrant.By, want)
	}
	if got := asks.AnswerSubject("ops.alice"); got != "mesh-asks.answer.ops=2Ealice" {
		t.Errorf("AnswerSubject(ops.alice) = %q; want mesh-asks.answer.ops=2Ealice", got)
	}
}

func TestExpiryMarksTheRecordExpired(t *testing.T) {
	r := start(t)
	key, a := vaultwarden(300 * time.Millisecond)
	r.raise(t, mesh.AsksSubject, a)
	var rec mesh.Record
	bustest.WaitFor(t, 0, "the ask to expire", func() bool {
		rec, _ = r.record(t, a.ID)
		return rec.State != mesh.RecordOpen
	})
	if rec.State != mesh.RecordExpired || rec.Warrant == nil {
		t.Fatalf("record = %+v; want expired with a warrant", rec)
	}
	want := mesh.RecordWarrant{
		Asker: "mesh-provisioner", Ask: a.ID, Outcome: "expired",
		By: mesh.Identity{Who: "mesh-asks", Kind: "clock", Identity: "mesh-asks"}, At: rec.Warrant.At,
	}
	if *rec.Warrant != want {
		t.Errorf("warrant = %+v; want %+v", *rec.Warrant, want)
	}
	if rec.Warrant.At.Before(a.Expires) {
		t.Errorf("expired at %v, before the ask's expiry %v", rec.Warrant.At, a.Expires)
	}
	p := mesh.Provision{State: mesh.Retiring, Ask: a.ID}
	if d := retire.Decide(key, p, rec, retire.Asker, retire.Trust{Now: time.Now()}); d.Verdict != retire.Clear {
		t.Errorf("Decide = %+v; want clear", d)
	}
}

func TestExpiryIsArmedAtStartFromTheRecords(t *testing.T) {
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s, "asks")
	ctx := bustest.Context(t)
	r := open(t, s, ctx)
	_, due := vaultwarden(-time.Minute)
	due.ID += "-due"
	due.Asker = "mesh-provisioner"
	_, soon := vaultwarden(400 * time.Millisecond)
	soon.ID += "-soon"
	soon.Asker = "mesh-provisioner"
	_, later := vaultwarden(time.Hour)
	later.Asker = "mesh-provisioner"
	for _, a := range []mesh.Ask{due, soon, later} {
		b, _ := json.Marshal(mesh.Record{State: mesh.RecordOpen, Ask: a})
		if _, err := r.records.Put(ctx, a.ID, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := asks.Start(ctx, nc, js, nil); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "both due asks to expire", func() bool {
		a, _ := r.record(t, due.ID)
		b, _ := r.record(t, soon.ID)
		return a.State == mesh.RecordExpired && b.State == mesh.RecordExpired
	})
	if rec, _ := r.record(t, later.ID); rec.State != mesh.RecordOpen {
		t.Errorf("the later ask is %s; want open", rec.State)
	}
}

func TestList(t *testing.T) {
	r := start(t)
	_, first := vaultwarden(2 * time.Hour)
	_, second := vaultwarden(time.Hour)
	second.ID += "-b"
	_, third := vaultwarden(3 * time.Hour)
	third.ID += "-c"
	for _, a := range []mesh.Ask{first, second, third} {
		r.raise(t, mesh.AsksSubject, a)
	}
	if _, err := asks.Answer(r.ctx, r.operator, "operator", third.ID, "yes"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.records.Put(r.ctx, "broken", []byte(`{"state":`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the broken record to be listed", func() bool {
		l, err := asks.List(r.ctx, r.operator, "all")
		return err == nil && len(l.Odd) == 1
	})
	ids := func(l asks.Listing) string {
		var s []string
		for _, rec := range l.Records {
			s = append(s, rec.Ask.ID+":"+rec.State)
		}
		return strings.Join(s, " ")
	}
	l, err := asks.List(r.ctx, r.operator, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(l), second.ID+":open "+first.ID+":open"; got != want {
		t.Errorf("List(open) = %s; want %s (soonest expiry first)", got, want)
	}
	l, err = asks.List(r.ctx, r.operator, "all")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(l), second.ID+":open "+first.ID+":open "+third.ID+":answered"; got != want {
		t.Errorf("List(all) = %s; want %s", got, want)
	}
	if len(l.Odd) != 1 || l.Odd[0].Key != "broken" || !strings.HasPrefix(l.Odd[0].Why, "record does not decode: ") {
		t.Errorf("List(all).Odd = %+v; want the key broken, with why", l.Odd)
	}
	if _, err := asks.List(r.ctx, r.operator, "closed"); !errors.Is(err, asks.ErrBadRequest) {
		t.Errorf("List(closed) = %v; want %v", err, asks.ErrBadRequest)
	}
}

func TestNoRouter(t *testing.T) {
	s := bustest.Server(t)
	nc, _ := bustest.Connect(t, s, "operator")
	ctx := bustest.Context(t)
	if _, err := asks.Answer(ctx, nc, "operator", "retire-x-1", "yes"); !errors.Is(err, asks.ErrNoRouter) {
		t.Errorf("Answer with no router = %v; want %v", err, asks.ErrNoRouter)
	}
	if _, err := asks.Withdraw(ctx, nc, "mesh-provisioner", "retire-x-1", "needed again"); !errors.Is(err, asks.ErrNoRouter) {
		t.Errorf("Withdraw with no router = %v; want %v", err, asks.ErrNoRouter)
	}
	if _, err := asks.List(ctx, nc, ""); !errors.Is(err, asks.ErrNoRouter) {
		t.Errorf("List with no router = %v; want %v", err, asks.ErrNoRouter)
	}
}

func TestTwoRouters(t *testing.T) {
	// Two routers share the records: an ask is recorded once, and of two
	// answers given at once exactly one is taken.
	r := start(t)
	nc, js := bustest.Connect(t, r.s, "asks-2")
	if _, err := asks.Start(r.ctx, nc, js, nil); err != nil {
		t.Fatal(err)
	}
	_, a := vaultwarden(time.Hour)
	b, _ := json.Marshal(a)
	for range 5 {
		if err := r.seat.Publish(mesh.AsksSubject, b); err != nil {
			t.Fatal(err)
		}
	}
	bustest.WaitFor(t, 0, "the ask to be recorded", func() bool {
		_, err := r.records.Get(r.ctx, a.ID)
		return err == nil
	})
	alice, _ := bustest.Connect(t, r.s, "alice")
	type result struct {
		option string
		err    error
	}
	results := make(chan result, 2)
	for _, c := range []struct {
		nc     *nats.Conn
		user   string
		option string
	}{{r.operator, "operator", "yes"}, {alice, "alice", "no"}} {
		go func() {
			_, err := asks.Answer(r.ctx, c.nc, c.user, a.ID, c.option)
			results <- result{c.option, err}
		}()
	}
	var taken []string
	for range 2 {
		res := <-results
		switch {
		case res.err == nil:
			taken = append(taken, res.option)
		case !errors.Is(res.err, asks.ErrNotOpen):
			t.Errorf("answer %s = %v; want nil or %v", res.option, res.err, asks.ErrNotOpen)
		}
	}
	if len(taken) != 1 {
		t.Fatalf("answers taken: %v; want exactly one", taken)
	}
	rec, _ := r.record(t, a.ID)
	if rec.State != mesh.RecordAnswered || rec.Warrant.Option != taken[0] {
		t.Errorf("record = %s with %+v; want answered %s", rec.State, rec.Warrant, taken[0])
	}
	// Five publishes on two routers: still the one record (revision 1), then
	// the answer (revision 2).
	if _, rev := r.record(t, a.ID); rev != 2 {
		t.Errorf("record revision = %d; want 2 (recorded once, answered once)", rev)
	}
}

// An ask raised again after its record was deleted is recorded anew, even
// while the router's copy of the records is behind the bucket (its watch
// starting again, as it did in a run of the test command): whether an id
// is recorded is the bucket's word. Before, the copy's stale record was
// answered as "recorded" and no record was left.
func TestAskRaisedAgainAfterItsRecordWentIsRecorded(t *testing.T) {
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s, "asks")
	ctx := bustest.Context(t)
	router, err := asks.Start(ctx, nc, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := open(t, s, ctx)
	_, a := vaultwarden(time.Hour)
	if rep := r.raise(t, mesh.AsksSubject, a); rep.Error != "" || rep.Record == nil {
		t.Fatalf("raise = %+v; want recorded", rep)
	}
	release := asks.HoldRecords(router)
	if err := r.records.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	rep := r.raise(t, mesh.AsksSubject, a)
	release()
	if rep.Error != "" || rep.Record == nil || rep.Record.State != mesh.RecordOpen || rep.Record.Ask.ID != a.ID {
		t.Fatalf("raise again = %+v; want %s recorded open", rep, a.ID)
	}
	rec, _ := r.record(t, a.ID)
	if rec.State != mesh.RecordOpen || rec.Ask.ID != a.ID {
		t.Errorf("record of %s after raising it again = %+v; want open", a.ID, rec)
	}
}
