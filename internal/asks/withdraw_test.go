package asks_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// openIDs lists the ids of the open asks, through the router.
func (r rig) openIDs(t *testing.T) string {
	t.Helper()
	l, err := asks.List(r.ctx, r.operator, "")
	if err != nil {
		t.Fatalf("List(open) = %v", err)
	}
	var ids []string
	for _, rec := range l.Records {
		ids = append(ids, rec.Ask.ID)
	}
	return strings.Join(ids, " ")
}

func TestWithdraw(t *testing.T) {
	// The seat raised an ask for a retiring key, the key is needed again
	// (the seat withdraws the ask), then it retires again (a second ask):
	// only the second is open.
	r := start(t)
	key, a := vaultwarden(time.Hour)
	r.raise(t, mesh.AsksSubject, a)
	if got := r.openIDs(t); got != a.ID {
		t.Fatalf("open asks = %q; want %s", got, a.ID)
	}
	why := "key " + key + " is needed again"
	before := time.Now()
	got, err := asks.Withdraw(r.ctx, r.seat, "mesh-provisioner", a.ID, why)
	if err != nil {
		t.Fatalf("Withdraw(%s) = %v", a.ID, err)
	}
	rec, rev := r.record(t, a.ID)
	if rev != 2 {
		t.Errorf("record revision = %d; want 2 (the bucket's second write: raised, withdrawn)", rev)
	}
	if rec.State != mesh.RecordExpired || rec.Warrant == nil {
		t.Fatalf("record = %+v; want expired with a warrant", rec)
	}
	w := *rec.Warrant
	want := mesh.RecordWarrant{
		Asker: "mesh-provisioner", Ask: a.ID, Outcome: "expired",
		By:  mesh.Identity{Who: "mesh-provisioner", Kind: "withdrawn", Identity: "mesh-provisioner"},
		At:  w.At,
		Why: why,
	}
	if w != want {
		t.Errorf("warrant = %+v; want %+v", w, want)
	}
	if w.At.Before(before.Add(-time.Second)) || w.At.After(time.Now().Add(time.Second)) {
		t.Errorf("warrant at %v; want about now", w.At)
	}
	if got.State != rec.State || got.Warrant == nil || *got.Warrant != w || got.Ask.ID != a.ID {
		t.Errorf("Withdraw returned %+v; want the record written %+v", got, rec)
	}
	b, _ := json.Marshal(w)
	if !strings.Contains(string(b), `"by":{"who":"mesh-provisioner","kind":"withdrawn","identity":"mesh-provisioner"}`) ||
		!strings.Contains(string(b), `"why":"key ace.vaultwarden.database is needed again"`) {
		t.Errorf("warrant JSON = %s; want by kind withdrawn and the why", b)
	}

	if got := r.openIDs(t); got != "" {
		t.Errorf("open asks after the withdrawal = %q; want none", got)
	}
	l, err := asks.List(r.ctx, r.operator, mesh.RecordExpired)
	if err != nil || len(l.Records) != 1 || l.Records[0].Ask.ID != a.ID || l.Records[0].Warrant.Why != why {
		t.Errorf("List(expired) = %+v, %v; want the withdrawn ask with its why", l, err)
	}

	// The operator's answer comes too late.
	_, err = asks.Answer(r.ctx, r.operator, "operator", a.ID, "yes")
	if !errors.Is(err, asks.ErrNotOpen) {
		t.Fatalf("Answer after the withdrawal = %v; want %v", err, asks.ErrNotOpen)
	}
	wantWhy := "ask " + a.ID + " was withdrawn by mesh-provisioner at " + w.At.Format(time.RFC3339) + " (" + why + "); it is not open"
	if err.Error() != wantWhy {
		t.Errorf("Answer after the withdrawal = %q; want %q", err, wantWhy)
	}

	// Withdrawing again changes nothing and says so by returning the record.
	again, err := asks.Withdraw(r.ctx, r.seat, "mesh-provisioner", a.ID, "once more")
	if err != nil {
		t.Fatalf("Withdraw again = %v; want the record as it is", err)
	}
	if again.Warrant == nil || *again.Warrant != w {
		t.Errorf("Withdraw again returned warrant %+v; want the first one %+v", again.Warrant, w)
	}
	if _, again := r.record(t, a.ID); again != rev {
		t.Errorf("record revision after withdrawing twice = %d; want %d (not written again)", again, rev)
	}

	// The seat's decision: a withdrawn ask of a key still retiring with it is
	// cleared; of a key needed again there is nothing to decide.
	p := mesh.Provision{State: mesh.Retiring, Ask: a.ID}
	if d := retire.Decide(key, p, rec, retire.Asker, retire.Trust{Now: time.Now()}); d.Verdict != retire.Clear {
		t.Errorf("Decide(retiring) = %+v; want clear", d)
	}
	p = mesh.Provision{State: mesh.Provided}
	if d := retire.Decide(key, p, rec, retire.Asker, retire.Trust{Now: time.Now()}); d.Verdict != retire.Wait {
		t.Errorf("Decide(provided) = %+v; want wait", d)
	}

	// The key retires again: one open ask for it, the new one.
	_, second := vaultwarden(time.Hour)
	second.ID += "-2"
	r.raise(t, mesh.AsksSubject, second)
	if got := r.openIDs(t); got != second.ID {
		t.Errorf("open asks = %q; want only %s", got, second.ID)
	}
	if rec, err := asks.Answer(r.ctx, r.operator, "operator", second.ID, "no"); err != nil || rec.State != mesh.RecordAnswered {
		t.Errorf("Answer(second) = %+v, %v; want answered", rec, err)
	}
}

func TestWithdrawRefusals(t *testing.T) {
	r := start(t)
	_, open := vaultwarden(time.Hour)
	r.raise(t, mesh.AsksSubject, open)
	_, answered := vaultwarden(time.Hour)
	answered.ID += "-answered"
	r.raise(t, mesh.AsksSubject, answered)
	if _, err := asks.Answer(r.ctx, r.operator, "operator", answered.ID, "no"); err != nil {
		t.Fatal(err)
	}
	_, openRev := r.record(t, open.ID)
	_, answeredRev := r.record(t, answered.ID)

	for _, c := range []struct {
		name, asker, ask, why string
		is                    error
		says                  string
	}{
		{"unknown ask", "mesh-provisioner", "retire-nothing-1", "gone", asks.ErrUnknownAsk,
			"no ask retire-nothing-1 is recorded"},
		{"another asker", "mesh-vault", open.ID, "not mine", asks.ErrOtherAsker,
			"ask " + open.ID + ` was raised by "mesh-provisioner", not "mesh-vault"; only its asker withdraws it`},
		{"answered ask", "mesh-provisioner", answered.ID, "needed again", asks.ErrNotOpen,
			"ask " + answered.ID + ` was answered "no" by operator at `},
		{"no why", "mesh-provisioner", open.ID, "", asks.ErrBadRequest,
			`withdrawal names no ask or no why: ask "` + open.ID + `", why ""`},
		{"no ask", "mesh-provisioner", "", "needed again", asks.ErrBadRequest,
			`withdrawal names no ask or no why: ask "", why "needed again"`},
		{"not a module", "Mesh Provisioner", open.ID, "needed again", asks.ErrBadRequest,
			"subject mesh-asks.withdraw.Mesh=20Provisioner does not name an asker module"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := asks.Withdraw(r.ctx, r.seat, c.asker, c.ask, c.why)
			if !errors.Is(err, c.is) {
				t.Fatalf("Withdraw(%s, %s) = %v; want %v", c.asker, c.ask, err, c.is)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("Withdraw(%s, %s) = %q; want it to say %q", c.asker, c.ask, err, c.says)
			}
		})
	}
	// A refused withdrawal leaves the records as they were.
	if rec, rev := r.record(t, open.ID); rec.State != mesh.RecordOpen || rec.Warrant != nil || rev != openRev {
		t.Errorf("open ask after refusals = %s with %+v at revision %d; want open at %d", rec.State, rec.Warrant, rev, openRev)
	}
	if rec, rev := r.record(t, answered.ID); rec.State != mesh.RecordAnswered || rec.Warrant.Option != "no" || rev != answeredRev {
		t.Errorf("answered ask after refusals = %s with %+v at revision %d; want answered no at %d", rec.State, rec.Warrant, rev, answeredRev)
	}
	m, err := r.seat.RequestWithContext(r.ctx, asks.WithdrawSubject("mesh-provisioner"), []byte(`gone`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Data), `"code":"bad-request"`) {
		t.Errorf("withdrawal of broken JSON = %s; want code bad-request", m.Data)
	}
	if got := asks.WithdrawSubject("mesh-provisioner"); got != "mesh-asks.withdraw.mesh-provisioner" {
		t.Errorf("WithdrawSubject(mesh-provisioner) = %q; want mesh-asks.withdraw.mesh-provisioner", got)
	}
}

func TestWithdrawnAskIsNotExpiredByTheClock(t *testing.T) {
	// a is withdrawn before its time; the clock then expires b, due after a:
	// by then a's time has passed, and a's record is still the withdrawal.
	r := start(t)
	_, a := vaultwarden(time.Second)
	_, b := vaultwarden(1200 * time.Millisecond)
	b.ID += "-b"
	r.raise(t, mesh.AsksSubject, a)
	r.raise(t, mesh.AsksSubject, b)
	withdrawn, err := asks.Withdraw(r.ctx, r.seat, "mesh-provisioner", a.ID, "needed again")
	if err != nil {
		t.Fatal(err)
	}
	if withdrawn.Warrant.By.Kind != mesh.KindWithdrawn {
		t.Fatalf("Withdraw = %+v; want withdrawn (the test's ask expired too soon)", withdrawn.Warrant)
	}
	_, withdrawnRev := r.record(t, a.ID)
	bustest.WaitFor(t, 0, "the later ask to expire", func() bool {
		rec, _ := r.record(t, b.ID)
		return rec.State == mesh.RecordExpired
	})
	if rec, _ := r.record(t, b.ID); rec.Warrant == nil || rec.Warrant.By.Kind != "clock" {
		t.Errorf("later ask's warrant = %+v; want the clock's", rec.Warrant)
	}
	rec, rev := r.record(t, a.ID)
	if rev != withdrawnRev || rec.Warrant == nil || *rec.Warrant != *withdrawn.Warrant {
		t.Errorf("withdrawn ask = %+v at revision %d; want the withdrawal %+v at %d", rec.Warrant, rev, withdrawn.Warrant, withdrawnRev)
	}
}

func TestWithdrawAnAskWhoseTimeIsUp(t *testing.T) {
	// An open record whose time is up: the clock expires it, at once or
	// after the withdrawal. Either way the withdrawal succeeds and the
	// record holds the clock's warrant.
	r := start(t)
	_, a := vaultwarden(-time.Minute)
	a.Asker = "mesh-provisioner"
	b, _ := json.Marshal(mesh.Record{State: mesh.RecordOpen, Ask: a})
	if _, err := r.records.Put(r.ctx, a.ID, b); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the router to hold the record", func() bool {
		l, err := asks.List(r.ctx, r.operator, "all")
		return err == nil && len(l.Records) == 1
	})
	got, err := asks.Withdraw(r.ctx, r.seat, "mesh-provisioner", a.ID, "needed again")
	if err != nil {
		t.Fatalf("Withdraw = %v; want the expired record", err)
	}
	want := mesh.Identity{Who: "mesh-asks", Kind: "clock", Identity: "mesh-asks"}
	if got.State != mesh.RecordExpired || got.Warrant == nil || got.Warrant.By != want || got.Warrant.Why != "" {
		t.Errorf("Withdraw = %+v with %+v; want expired by the clock", got, got.Warrant)
	}
	rec, _ := r.record(t, a.ID)
	if rec.State != mesh.RecordExpired || rec.Warrant == nil || *rec.Warrant != *got.Warrant {
		t.Errorf("record = %+v with %+v; want the one returned", rec, rec.Warrant)
	}
}
