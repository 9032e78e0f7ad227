package retire_test

import (
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func TestDecide(t *testing.T) {
	k, p := gitea()
	key := k.String()
	ask := retire.Ask(k, p, now, time.Hour)
	id := ask.ID
	p.Ask = id
	at := now.Add(10 * time.Minute)
	operator := mesh.Identity{Who: "operator", Kind: "nats-user", Identity: "operator"}
	seen := at.Add(time.Minute) // the seat's clock as it reads the record

	// answered returns the record of the ask answered with option, binding
	// binds.
	answered := func(option, binds string) mesh.Record {
		return mesh.Record{State: mesh.RecordAnswered, Ask: ask, Warrant: &mesh.RecordWarrant{
			Asker: "mesh-provisioner", Ask: id, Outcome: mesh.OutcomeChosen, Option: option, Binds: binds, By: operator, At: at,
		}}
	}
	yes := answered("yes", mesh.ActDigest(key, id, "yes"))
	no := answered("no", mesh.ActDigest(key, id, "no"))
	expired := mesh.Record{State: mesh.RecordExpired, Ask: ask, Warrant: &mesh.RecordWarrant{
		Asker: "mesh-provisioner", Ask: id, Outcome: mesh.OutcomeExpired, By: mesh.Identity{Who: "mesh-asks"}, At: ask.Expires,
	}}
	withdrawn := mesh.Record{State: mesh.RecordExpired, Ask: ask, Warrant: &mesh.RecordWarrant{
		Asker: "mesh-provisioner", Ask: id, Outcome: mesh.OutcomeExpired,
		By: mesh.Identity{Who: "mesh-provisioner", Kind: mesh.KindWithdrawn, Identity: "mesh-provisioner"},
		At: at, Why: "key ace.gitea.database.main is needed again",
	}}
	// with returns rec changed by f, leaving rec and its warrant as they were.
	with := func(rec mesh.Record, f func(*mesh.Record)) mesh.Record {
		if rec.Warrant != nil {
			w := *rec.Warrant
			rec.Warrant = &w
		}
		rec.Ask.Options = append([]mesh.AskOption(nil), rec.Ask.Options...)
		f(&rec)
		return rec
	}
	provision := func(f func(*mesh.Provision)) mesh.Provision {
		q := p
		f(&q)
		return q
	}

	for _, c := range []struct {
		name    string
		p       mesh.Provision
		rec     mesh.Record
		verdict retire.Verdict
		warrant *mesh.Warrant
		why     string
		now     time.Time // the seat's clock; zero means seen
	}{
		{
			name: "yes", p: p, rec: yes, verdict: retire.Warrant,
			warrant: &mesh.Warrant{Ask: id, Option: "yes", By: operator, At: at},
			why:     "ask " + id + " of key ace.gitea.database.main was answered \"yes\" by operator (nats-user operator) at 2026-11-30T03:40:00Z",
		},
		{
			name: "no", p: p, rec: no, verdict: retire.Warrant,
			warrant: &mesh.Warrant{Ask: id, Option: "no", By: operator, At: at},
			why:     "ask " + id + " of key ace.gitea.database.main was answered \"no\" by operator (nats-user operator) at 2026-11-30T03:40:00Z",
		},
		{
			name: "expired", p: p, rec: expired, verdict: retire.Clear,
			why: "ask " + id + " of key ace.gitea.database.main expired with no choice; it is cleared and asked again when the key changes",
		},
		{
			name: "expired without a warrant", p: p, rec: with(expired, func(r *mesh.Record) { r.Warrant = nil }),
			verdict: retire.Clear,
			why:     "ask " + id + " of key ace.gitea.database.main expired with no choice; it is cleared and asked again when the key changes",
		},
		{
			name: "withdrawn", p: p, rec: withdrawn, verdict: retire.Clear,
			why: "ask " + id + " of key ace.gitea.database.main was withdrawn by mesh-provisioner " +
				"(key ace.gitea.database.main is needed again) with no choice; it is cleared and asked again when the key changes",
		},
		{
			name: "withdrawn, the key no longer retiring", p: provision(func(q *mesh.Provision) { q.State = mesh.Provided }),
			rec: withdrawn, verdict: retire.Wait,
			why: "key ace.gitea.database.main is provided, not retiring: there is nothing to decide",
		},
		{
			name: "withdrawn, the key's ask cleared", p: provision(func(q *mesh.Provision) { q.State = mesh.Provided; q.Ask = "" }),
			rec: withdrawn, verdict: retire.Wait,
			why: "key ace.gitea.database.main is provided, not retiring: there is nothing to decide",
		},
		{
			name: "withdrawn by another asker", p: p,
			rec:     with(withdrawn, func(r *mesh.Record) { r.Warrant.Asker = "mesh-vault" }),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main is from asker \"mesh-vault\", " +
				"not \"mesh-provisioner\"; the key is left as it was",
		},
		{
			name: "open", p: p, rec: mesh.Record{State: mesh.RecordOpen, Ask: ask}, verdict: retire.Wait,
			why: "ask " + id + " of key ace.gitea.database.main is still open",
		},
		{
			name: "not recorded yet", p: p, rec: mesh.Record{}, verdict: retire.Wait,
			why: "ask " + id + " of key ace.gitea.database.main is not recorded by the ask router yet",
		},
		{
			name: "not retiring", p: provision(func(q *mesh.Provision) { q.State = mesh.Provided }), rec: yes,
			verdict: retire.Wait,
			why:     "key ace.gitea.database.main is provided, not retiring: there is nothing to decide",
		},
		{
			name: "no ask raised", p: provision(func(q *mesh.Provision) { q.Ask = "" }), rec: yes,
			verdict: retire.Wait,
			why:     "key ace.gitea.database.main is retiring but has raised no ask yet",
		},
		{
			name: "already decided",
			p: provision(func(q *mesh.Provision) {
				q.Warrant = &mesh.Warrant{Ask: id, Option: "no", By: operator, At: at}
			}),
			rec: yes, verdict: retire.Wait,
			why: "key ace.gitea.database.main already holds the warrant \"no\" of ask " + id,
		},
		{
			name: "tampered: binds another key's digest", p: p,
			rec:     answered("yes", mesh.ActDigest("ace.nextcloud.database.main", id, "yes")),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" but binds \"" +
				mesh.ActDigest("ace.nextcloud.database.main", id, "yes") + "\", not this act's digest " +
				mesh.ActDigest(key, id, "yes") + "; the key is left as it was",
		},
		{
			name: "tampered: binds the other option's digest", p: p,
			rec:     answered("yes", mesh.ActDigest(key, id, "no")),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" but binds \"" +
				mesh.ActDigest(key, id, "no") + "\", not this act's digest " +
				mesh.ActDigest(key, id, "yes") + "; the key is left as it was",
		},
		{
			name: "tampered: another asker", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.Asker = "mesh-vault" }),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main is from asker \"mesh-vault\", " +
				"not \"mesh-provisioner\"; the key is left as it was",
		},
		{
			name: "tampered: an ask raised by another asker", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Ask.Asker = "mesh-vault" }),
			verdict: retire.Refuse,
			why: "ask " + id + " of key ace.gitea.database.main was raised by \"mesh-vault\", " +
				"not \"mesh-provisioner\"; the key is left as it was",
		},
		{
			name: "tampered: an option the ask never offered", p: p,
			rec:     answered("maybe", mesh.ActDigest(key, id, "maybe")),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"maybe\", " +
				"which the ask never offered; the key is left as it was",
		},
		{
			name: "tampered: an option added to the recorded ask", p: p,
			rec: with(answered("maybe", mesh.ActDigest(key, id, "maybe")), func(r *mesh.Record) {
				r.Ask.Options = append(r.Ask.Options, mesh.AskOption{ID: "maybe", Binds: mesh.ActDigest(key, id, "maybe")})
			}),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"maybe\", " +
				"which the ask never offered; the key is left as it was",
		},
		{
			name: "tampered: an option taken out of the recorded ask", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Ask.Options = r.Ask.Options[1:] }),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\", " +
				"which the ask never offered; the key is left as it was",
		},
		{
			name: "tampered: a warrant for another ask id", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.Ask = "retire-ace-gitea-database-main-1" }),
			verdict: retire.Refuse,
			why: "the record of ask " + id + " for key ace.gitea.database.main holds a warrant for ask " +
				"\"retire-ace-gitea-database-main-1\"; the key is left as it was",
		},
		{
			name: "tampered: binds an older ask's digest", p: p,
			rec:     answered("yes", mesh.ActDigest(key, "retire-ace-gitea-database-main-1", "yes")),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" but binds \"" +
				mesh.ActDigest(key, "retire-ace-gitea-database-main-1", "yes") + "\", not this act's digest " +
				mesh.ActDigest(key, id, "yes") + "; the key is left as it was",
		},
		{
			name: "the record of another ask", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Ask.ID = "retire-ace-gitea-database-main-1" }),
			verdict: retire.Refuse,
			why: "the record read for ask " + id + " of key ace.gitea.database.main holds ask " +
				"\"retire-ace-gitea-database-main-1\"; the key is left as it was",
		},
		{
			name: "the record of an ask about another key", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Ask.About = "provision.ace-gitea.database.main" }),
			verdict: retire.Refuse,
			why: "the record of ask " + id + " for key ace.gitea.database.main is about " +
				"\"provision.ace-gitea.database.main\", not \"provision.ace.gitea.database.main\"; the key is left as it was",
		},
		{
			name: "answered without a warrant", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant = nil }),
			verdict: retire.Refuse,
			why:     "ask " + id + " of key ace.gitea.database.main is answered but its record holds no warrant; the key is left as it was",
		},
		{
			name: "answered with an expired outcome", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.Outcome = mesh.OutcomeExpired }),
			verdict: retire.Refuse,
			why:     "ask " + id + " of key ace.gitea.database.main is answered but its warrant's outcome is \"expired\"; the key is left as it was",
		},
		{
			name: "expired with a chosen outcome", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.State = mesh.RecordExpired }),
			verdict: retire.Refuse,
			why:     "ask " + id + " of key ace.gitea.database.main is expired but its warrant's outcome is \"chosen\"; the key is left as it was",
		},
		{
			name: "expired for another ask id", p: p,
			rec:     with(expired, func(r *mesh.Record) { r.Warrant.Ask = "retire-x-1" }),
			verdict: retire.Refuse,
			why: "the record of ask " + id + " for key ace.gitea.database.main holds a warrant for ask " +
				"\"retire-x-1\"; the key is left as it was",
		},
		{
			name: "answered by nobody", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.By = mesh.Identity{} }),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" but names no one " +
				"who answered; the key is left as it was",
		},
		{
			name: "answered in the future", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.At = seen.Add(retire.Skew + time.Second) }),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" at 2026-11-30T03:41:31Z, " +
				"after the seat's now 2026-11-30T03:41:00Z: it cannot be true; the key is left as it was",
		},
		{
			name: "answered within the clocks' skew", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.At = seen.Add(retire.Skew) }),
			verdict: retire.Warrant,
			warrant: &mesh.Warrant{Ask: id, Option: "yes", By: operator, At: seen.Add(retire.Skew)},
			why: "ask " + id + " of key ace.gitea.database.main was answered \"yes\" by operator (nats-user operator) " +
				"at 2026-11-30T03:41:30Z",
		},
		{
			name: "answered before the ask was raised", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.At = now.Add(-retire.Skew - time.Second) }),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" at 2026-11-30T03:29:29Z, " +
				"before the ask was raised at 2026-11-30T03:30:00Z: it cannot be true; the key is left as it was",
		},
		{
			name: "answered after the ask expired", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.At = ask.Expires }),
			now:     ask.Expires.Add(time.Minute),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" at 2026-11-30T04:30:00Z, " +
				"not before the ask expired at 2026-11-30T04:30:00Z: it cannot be true; the key is left as it was",
		},
		{
			name: "answered with no time", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.Warrant.At = time.Time{} }),
			verdict: retire.Refuse,
			why:     "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" but says no time; the key is left as it was",
		},
		{
			name: "answered by free text", p: p,
			rec: with(yes, func(r *mesh.Record) {
				r.Warrant.By = mesh.Identity{Who: "nobody-at-all", Kind: "nats-user", Identity: "operator"}
			}),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" by \"nobody-at-all\", " +
				"whose identity is \"operator\": it names two users; the key is left as it was",
		},
		{
			name: "answered by another kind", p: p,
			rec: with(yes, func(r *mesh.Record) {
				r.Warrant.By = mesh.Identity{Who: "operator", Kind: "clock", Identity: "operator"}
			}),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" by an identity of kind " +
				"\"clock\", not \"nats-user\" (an operator's NATS user); the key is left as it was",
		},
		{
			name: "answered by a node's client", p: p,
			rec: with(yes, func(r *mesh.Record) {
				r.Warrant.By = mesh.Identity{Who: "client-ace", Kind: "nats-user", Identity: "client-ace"}
			}),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" by the user \"client-ace\", " +
				"which is none of the operators' (it is the product's own or a node's client); the key is left as it was",
		},
		{
			name: "answered by the router", p: p,
			rec: with(yes, func(r *mesh.Record) {
				r.Warrant.By = mesh.Identity{Who: "mesh-asks", Kind: "nats-user", Identity: "mesh-asks"}
			}),
			verdict: retire.Refuse,
			why: "the warrant of ask " + id + " for key ace.gitea.database.main chose \"yes\" by the user \"mesh-asks\", " +
				"which is none of the operators' (it is the product's own or a node's client); the key is left as it was",
		},
		{
			name: "unknown record state", p: p,
			rec:     with(yes, func(r *mesh.Record) { r.State = "withdrawn" }),
			verdict: retire.Refuse,
			why:     "the record of ask " + id + " for key ace.gitea.database.main is in the unknown state \"withdrawn\"; the key is left as it was",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := c.now
			if clock.IsZero() {
				clock = seen
			}
			d := retire.Decide(key, c.p, c.rec, retire.Asker, retire.Trust{Now: clock})
			if d.Verdict != c.verdict {
				t.Errorf("Decide(...).Verdict = %q; want %q", d.Verdict, c.verdict)
			}
			if d.Why != c.why {
				t.Errorf("Decide(...).Why = %q\nwant %q", d.Why, c.why)
			}
			switch {
			case (d.Warrant == nil) != (c.warrant == nil):
				t.Errorf("Decide(...).Warrant = %+v; want %+v", d.Warrant, c.warrant)
			case d.Warrant != nil && *d.Warrant != *c.warrant:
				t.Errorf("Decide(...).Warrant = %+v; want %+v", *d.Warrant, *c.warrant)
			}
		})
	}
}

func TestDecideBindsThisKeyOnly(t *testing.T) {
	// The same answered record, read for a key of the same ask id but another
	// provision, is refused: a warrant binds exactly one key.
	k, p := gitea()
	ask := retire.Ask(k, p, now, time.Hour)
	p.Ask = ask.ID
	rec := mesh.Record{State: mesh.RecordAnswered, Ask: ask, Warrant: &mesh.RecordWarrant{
		Asker: retire.Asker, Ask: ask.ID, Outcome: mesh.OutcomeChosen, Option: retire.Yes,
		Binds: ask.Options[0].Binds, By: mesh.Identity{Who: "operator", Kind: "nats-user", Identity: "operator"}, At: now,
	}}
	trust := retire.Trust{Now: now}
	if d := retire.Decide(k.String(), p, rec, retire.Asker, trust); d.Verdict != retire.Warrant {
		t.Fatalf("Decide(own key) = %q (%s); want warrant", d.Verdict, d.Why)
	}
	if d := retire.Decide("ace.gitea.database", p, rec, retire.Asker, trust); d.Verdict != retire.Refuse {
		t.Errorf("Decide(other key) = %q (%s); want refuse", d.Verdict, d.Why)
	}
}
