package bus_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// request returns a request whose Nats-Request-Info says the client user
// name of account acc sent it on connection id, with a JWT of a
// kilobyte as the server writes it.
func request(acc, name string, id int) *nats.Msg {
	m := nats.NewMsg("mesh-vault.secret.gitea")
	m.Header.Set(bus.RequestInfoHeader, fmt.Sprintf(`{"acc":%q,"name_tag":%q,"user":"UABC","kind":"Client","id":%d,"jwt":%q}`,
		acc, name, id, strings.Repeat("x", 1024)))
	return m
}

// TestAskerHoldsWhatItMadeOfAHeader: the answerer names each request's
// asker as the header says, the same for a header read again (held) and
// for one read first; a request from the answerer's own account is no
// one's however often it comes; a flood of headers that all differ (a
// party reconnecting) leaves it holding at most its bound, each still
// named right.
func TestAskerHoldsWhatItMadeOfAHeader(t *testing.T) {
	a := bus.AnswererIn(nil, "ASERVICES")
	for range 3 {
		for _, c := range []struct {
			m       *nats.Msg
			want    string
			wantErr error
		}{
			{request("AREQUESTS", "client-ace", 1), "client-ace", nil},
			{request("AREQUESTS", "client-g14", 2), "client-g14", nil},
			{request("ASERVICES", "mesh-vault", 3), "", bus.ErrNoAsker},
			{nats.NewMsg("mesh-vault.rotate"), "", bus.ErrNoAsker},
		} {
			who, err := a.Asker(c.m)
			if who != c.want || !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
				t.Errorf("Asker(%s) = %q, %v; want %q, %v", c.m.Header.Get(bus.RequestInfoHeader)[:60], who, err, c.want, c.wantErr)
			}
		}
	}
	if n := bus.AskersSaid(a); n != 3 {
		t.Errorf("the answerer holds %d headers; want the 3 it read (a request with no header is not held)", n)
	}
	for i := range 3 * bus.MaxAskersSaid {
		name := fmt.Sprintf("client-n%d", i%7)
		if who, err := a.Asker(request("AREQUESTS", name, 10+i)); who != name || err != nil {
			t.Fatalf("Asker of the %dth header = %q, %v; want %q", i, who, err, name)
		}
		if n := bus.AskersSaid(a); n > bus.MaxAskersSaid {
			t.Fatalf("the answerer holds %d headers; want at most %d", n, bus.MaxAskersSaid)
		}
	}
}

// BenchmarkAsker is the cost of naming the asker of one request whose
// header the answerer read before (a flood of one connection's requests):
// compare with BenchmarkAskerNew, where every header is new.
func BenchmarkAsker(b *testing.B) {
	a := bus.AnswererIn(nil, "ASERVICES")
	m := request("AREQUESTS", "client-ace", 1)
	for b.Loop() {
		if _, err := a.Asker(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAskerNew is [BenchmarkAsker] with a header never read before.
func BenchmarkAskerNew(b *testing.B) {
	a := bus.AnswererIn(nil, "ASERVICES")
	ms := make([]*nats.Msg, 4096)
	for i := range ms {
		ms[i] = request("AREQUESTS", "client-ace", i)
	}
	i := 0
	for b.Loop() {
		if _, err := a.Asker(ms[i%len(ms)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestSentByTakesTheSubjectsAsker: a request is taken as its subject's
// asker only where the server's header names the same user; a header
// naming another (an asker's own, past where nats.go reads the server's)
// or none is refused, and an answerer with no credentials takes the
// subject's word.
func TestSentByTakesTheSubjectsAsker(t *testing.T) {
	a := bus.AnswererIn(nil, "ASERVICES")
	for _, c := range []struct {
		header, asker string
		ok            bool
	}{
		{"client-ace", "client-ace", true},
		{"gitea", "client-ace", false},
		{"client-ace", "gitea", false},
	} {
		m := request("AREQUESTS", c.header, 1)
		m.Subject = "mesh-vault.secret.gitea." + c.asker
		err := a.SentBy(m, c.asker)
		if (err == nil) != c.ok {
			t.Errorf("SentBy(header %s, subject's asker %s) = %v; want ok %v", c.header, c.asker, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), `names the asker "`+c.asker+`"`) {
			t.Errorf("SentBy(header %s, subject's asker %s) = %v; want it to name both", c.header, c.asker, err)
		}
	}
	if err := a.SentBy(nats.NewMsg("mesh-vault.secret.gitea.gitea"), "gitea"); !errors.Is(err, bus.ErrNoAsker) {
		t.Errorf("SentBy of a request with no header = %v; want ErrNoAsker", err)
	}
	if err := bus.AnswererIn(nil, "").SentBy(nats.NewMsg("mesh-vault.secret.gitea.gitea"), "gitea"); err != nil {
		t.Errorf("SentBy on a server without accounts = %v; want nil (the subject's word)", err)
	}
}
