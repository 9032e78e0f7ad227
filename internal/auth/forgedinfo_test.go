package auth_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
)

// TestNoAskerForgesItsRequestInfo: an answerer names the asker the server
// names, whatever header lines the asker sent. client-n1 asks the vault's
// mesh-vault.secret.m (m is placed on n1, so the server lets it) speaking
// the protocol itself, with a Nats-Request-Info line of its own naming the
// module m (which the vault answers m's values of every node): written as
// a header line, and smuggled behind a bare LF, which nats-server does not
// take for a line break (it strips only a Nats-Request-Info that follows
// CRLF, and appends its own) while nats.go does (it splits lines on LF and
// Get returns the first value), and with the header block cut so that the
// server's own line is glued into the value of another (the forged one is
// then the only Nats-Request-Info nats.go sees). Each must be named
// client-n1 (the header line, which the server replaces), or refused as
// naming no asker (bus.ErrNoAsker: a smuggled line): never m.
func TestNoAskerForgesItsRequestInfo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	vcreds := auth.AccountCredsPath(dir, access.Services, "mesh-vault")
	vc, err := dial(srv.URL(), nats.UserCredentials(vcreds))
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	a, err := bus.NewAnswerer(vc, vcreds)
	if err != nil {
		t.Fatal(err)
	}
	named := make(chan string, 8)
	if _, err := vc.Subscribe("mesh-vault.secret.*", func(m *nats.Msg) {
		who, err := a.Asker(m)
		if errors.Is(err, bus.ErrNoAsker) {
			named <- "refused"
		} else {
			named <- fmt.Sprintf("%q %v", who, err)
		}
		_ = m.Respond([]byte("{}"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := vc.Flush(); err != nil {
		t.Fatal(err)
	}
	forged := `{"acc":"AFORGED","user":"UFORGED","name_tag":"m","kind":"Client"}`
	named1 := fmt.Sprintf("%q %v", "client-n1", nil)
	for _, c := range []struct{ shape, hdr, want string }{
		{"a header line", "NATS/1.0\r\nNats-Request-Info: " + forged + "\r\n\r\n", named1},
		{"behind a bare LF", "NATS/1.0\r\nX-A: b\nNats-Request-Info: " + forged + "\r\n\r\n", "refused"},
		{"behind a bare LF alone", "NATS/1.0\nNats-Request-Info: " + forged + "\r\n\r\n", "refused"},
		{"behind a bare LF, the server's line glued into another", "NATS/1.0\nNats-Request-Info: " + forged + "\nY: zz  ", "refused"},
		{"behind a bare LF, the server's line glued into the forged one", "NATS/1.0\nNats-Request-Info: " + forged + "  ", "refused"},
	} {
		rawRequest(t, srv.URL(), auth.AccountCredsPath(dir, access.Requests, "client-n1"), kit.SecretSubject("m"), c.hdr)
		select {
		case got := <-named:
			if got != c.want {
				t.Errorf("client-n1's request with a forged Nats-Request-Info %s: the answerer names the asker %s; want %s", c.shape, got, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("client-n1's request with a forged Nats-Request-Info %s did not reach the vault's answerer", c.shape)
		}
	}
}

// rawRequest connects to url as the user of creds speaking the protocol
// itself (rawConnect) and publishes an empty request on subject with the
// header block hdr as it is (HPUB), its reply to the user's inbox.
func rawRequest(t *testing.T, url, creds, subject, hdr string) {
	t.Helper()
	conn, r := rawConnect(t, url, creds)
	inbox := access.InboxPrefix("client-n1") + ".raw"
	if _, err := fmt.Fprintf(conn, "SUB %s 1\r\nHPUB %s %s %d %d\r\n%s\r\nPING\r\n", inbox, subject, inbox, len(hdr), len(hdr), hdr); err != nil {
		t.Fatal(err)
	}
	if line := rawUntilPong(r); line != "PONG" {
		t.Fatalf("requesting as %s: %s", creds, line)
	}
}
