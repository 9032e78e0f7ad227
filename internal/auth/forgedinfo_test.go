package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestNoAskerForgesItsRequestInfo: an answerer takes the asker its
// subject names, which the server pins, and refuses a request whose
// header names another. client-n1 asks the vault's
// mesh-vault.secret.m.client-n1 (m is placed on n1, so the server lets it)
// speaking the protocol itself, with a Nats-Request-Info line of its own
// naming the module m (which the vault answers m's values of every node):
// written as a header line (the server replaces it), smuggled behind a bare
// LF, and in a header block that ends in a bare blank line, which the
// server appends its own line past (it strips nothing there) while nats.go
// reads no further: the forged line is then the only Nats-Request-Info
// nats.go sees. Each must be taken as client-n1's or refused, never as m's;
// and the subject that would name m as the asker
// (mesh-vault.secret.m.m) is the server's to refuse.
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
	if _, err := vc.Subscribe(access.SecretWildcard, func(m *nats.Msg) {
		asker := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		switch err := a.SentBy(m, asker); {
		case err == nil:
			named <- asker
		case strings.Contains(err.Error(), "names the asker") || errors.Is(err, bus.ErrNoAsker):
			named <- "refused"
		default:
			named <- err.Error()
		}
		_ = m.Respond([]byte("{}"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := vc.Flush(); err != nil {
		t.Fatal(err)
	}
	forged := `{"acc":"AFORGED","user":"UFORGED","name_tag":"m","kind":"Client"}`
	creds := auth.AccountCredsPath(dir, access.Requests, "client-n1")
	for _, c := range []struct{ shape, hdr, want string }{
		{"a header line", "NATS/1.0\r\nNats-Request-Info: " + forged + "\r\n\r\n", "client-n1"},
		{"behind a bare LF", "NATS/1.0\r\nX-A: b\nNats-Request-Info: " + forged + "\r\n\r\n", "refused"},
		{"behind a bare LF alone", "NATS/1.0\nNats-Request-Info: " + forged + "\r\n\r\n", "refused"},
		{"behind a bare LF, the server's line glued into another", "NATS/1.0\nNats-Request-Info: " + forged + "\nY: zz  ", "refused"},
		{"behind a bare LF, the server's line glued into the forged one", "NATS/1.0\nNats-Request-Info: " + forged + "  ", "refused"},
		{"in a block ending in a bare blank line", "NATS/1.0\r\nNats-Request-Info: " + forged + "\n\nab", "refused"},
		{"alone in a block ending in a bare blank line", "NATS/1.0\nNats-Request-Info: " + forged + "\n\n\r\n", "refused"},
	} {
		rawRequest(t, srv.URL(), creds, kit.SecretSubject("m", "client-n1"), c.hdr)
		select {
		case got := <-named:
			if got != c.want {
				t.Errorf("client-n1's request with a forged Nats-Request-Info %s: the answerer takes it as %s; want %s", c.shape, got, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("client-n1's request with a forged Nats-Request-Info %s did not reach the vault's answerer", c.shape)
		}
	}
	// The subject naming m as the asker: the server's refusal, and nothing
	// reaches the vault.
	conn, r := rawConnect(t, srv.URL(), creds)
	if _, err := fmt.Fprintf(conn, "PUB %s _INBOX_client-n1.raw 2\r\n{}\r\nPING\r\n", kit.SecretSubject("m", "m")); err != nil {
		t.Fatal(err)
	}
	if line := rawUntilPong(r); !strings.Contains(line, "Permissions Violation for Publish") {
		t.Errorf("client-n1 publishing %s: %q; want the server's permissions violation", kit.SecretSubject("m", "m"), line)
	}
	select {
	case got := <-named:
		t.Errorf("client-n1's request on %s reached the vault (taken as %s); want it refused by the server", kit.SecretSubject("m", "m"), got)
	case <-time.After(200 * time.Millisecond):
	}
}

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

// TestNoAskerForgesAWatchInAnothersName: the seat's watch verb takes the
// asker from its subject, which the server pins. client-n1 asks a watch of
// its own applied key speaking the protocol itself, with a header block
// ending in a bare blank line whose Nats-Request-Info names client-n2 (the
// server's own line, appended past it, is not read): the seat refuses it,
// naming both; the subject naming client-n2 as the asker is the server's
// permissions violation; and client-n1's plain request is answered a
// consumer under one of its own names, keyed by the seat's seed.
func TestNoAskerForgesAWatchInAnothersName(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	creds := auth.AccountCredsPath(f.dir, access.Requests, "client-n1")
	own, err := access.WatchSubject("client-n1", mesh.AppliedBucket, "n1.m")
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"deliver":%q,"from":"last","heartbeat":1000000000}`, access.InboxPrefix("client-n1")+".w")
	forged := `{"acc":"AFORGED","user":"UFORGED","name_tag":"client-n2","kind":"Client"}`
	hdr := "NATS/1.0\r\nNats-Request-Info: " + forged + "\n\nab"
	got := rawAsk(t, f.srv.URL(), creds, own, hdr, body)
	var refusal struct {
		Name  string `json:"name"`
		Error struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(got), &refusal)
	if why := refusal.Error.Description; refusal.Name != "" || !strings.Contains(why, `names the asker "client-n1"`) || !strings.Contains(why, `"client-n2"`) {
		t.Errorf("client-n1's watch request with a forged Nats-Request-Info naming client-n2: the seat answered %s; want its refusal naming both", got)
	}
	theirs, err := access.WatchSubject("client-n2", mesh.AppliedBucket, "n1.m")
	if err != nil {
		t.Fatal(err)
	}
	conn, r := rawConnect(t, f.srv.URL(), creds)
	if _, err := fmt.Fprintf(conn, "PUB %s _INBOX_client-n1.raw %d\r\n%s\r\nPING\r\n", theirs, len(body), body); err != nil {
		t.Fatal(err)
	}
	if line := rawUntilPong(r); !strings.Contains(line, "Permissions Violation for Publish") {
		t.Errorf("client-n1 publishing %s: %q; want the server's permissions violation", theirs, line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := f.asking["client-n1"].nc.RequestWithContext(ctx, own, []byte(body))
	token := bus.WatchTokenOf(auth.AccountCredsPath(f.dir, access.Services, access.SeatUser), "client-n1")
	if err != nil || token == "" || !strings.Contains(string(m.Data), `"name":"client-n1-w1-`+token+`"`) {
		t.Errorf("client-n1's own watch request: %v %v; want its consumer client-n1-w1-%s", m, err, token)
	}
}

// rawAsk sends a request on subject with the header block hdr and body as
// the user of creds, speaking the protocol itself, and returns the
// answer's payload (or the server's -ERR line).
func rawAsk(t *testing.T, url, creds, subject, hdr, body string) string {
	t.Helper()
	conn, r := rawConnect(t, url, creds)
	inbox := access.InboxPrefix(bus.CredsUser(creds)) + ".rawask"
	if _, err := fmt.Fprintf(conn, "SUB %s 1\r\nHPUB %s %s %d %d\r\n%s%s\r\n", inbox, subject, inbox, len(hdr), len(hdr)+len(body), hdr, body); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err.Error()
		}
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "-ERR") {
			return line
		}
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "MSG" && f[0] != "HMSG" {
			continue
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			t.Fatalf("the server's line %q", line)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatal(err)
		}
		if f[0] == "HMSG" {
			h, _ := strconv.Atoi(f[len(f)-2])
			return string(b[h:n])
		}
		return string(b[:n])
	}
}

// TestARefusedRequestIsSaidAtOnce: bus.Request (the kit's and the client's
// asks of the vault) returns the server's permissions violation for a
// subject the user may not publish, before any deadline (here none but the
// test's), and answers the allowed neighbour.
func TestARefusedRequestIsSaidAtOnce(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.answerAll(t)
	nc := f.asking["client-n1"].nc
	if _, err := bus.Request(context.Background(), nc, kit.SecretSubject("m", "m"), []byte(`{}`)); !errors.Is(err, nats.ErrPermissionViolation) ||
		!strings.Contains(err.Error(), kit.SecretSubject("m", "m")) {
		t.Errorf("client-n1's request on %s = %v; want the server's permissions violation naming it", kit.SecretSubject("m", "m"), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m, err := bus.Request(ctx, nc, kit.SecretSubject("m", "client-n1"), []byte(`{}`)); err != nil || string(m.Data) != `{"answer":1}` {
		t.Errorf("client-n1's request on %s = %v, %v; want the responder's answer", kit.SecretSubject("m", "client-n1"), m, err)
	}
}
