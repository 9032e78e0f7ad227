package auth_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestAnswersAimedAtVerbsComeWithNoReply: the subject's last token is the
// server's word for who asked only for a request; an answer goes to the
// reply subject its asker chose, and the server routes an answer aimed at
// a literal verb's subject (the vault's rotate, the seat's unkeep and
// provisioning, the router's list) back through the import, from the
// answerers' own account. client-n1 makes such answers at its own pace:
// it asks the seat for a watch of its own keys with a header of its own,
// which the seat refuses at once, in no turn, with the reply subject of
// each literal verb (and of the wildcard verbs, mesh-vault.secret.m.m and
// mesh-asks.answer.alice, which the server routes no answer to). Every
// such message reaches its verb's answerer named by no one (bus.ErrNoAsker)
// and with no reply subject: what the answerers drop before any queue of
// theirs or any line of their log (the vault's turns, the seat's loop,
// package vault, seat, provisioning and asks). The neighbour: the
// operator's own request of each verb comes with a reply and is named.
func TestAnswersAimedAtVerbsComeWithNoReply(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	type heard struct {
		subject, asker, reply string
		err                   error
	}
	var mu sync.Mutex
	var all []heard
	literal := []string{access.Rotate, access.Unkeep, access.Provisioning, access.ListAsks}
	for user, subjects := range map[string][]string{
		access.VaultUser:  {access.SecretWildcard, access.Rotate},
		access.RouterUser: {access.AnswerWildcard, access.ListAsks},
		access.SeatUser:   {access.Provisioning, access.Unkeep},
	} {
		ans, err := bus.NewAnswerer(f.answering[user].nc, auth.AccountCredsPath(f.dir, access.Services, user))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range subjects {
			if _, err := ans.Subscribe(s, func(m *nats.Msg) {
				who, err := ans.Asker(m)
				mu.Lock()
				all = append(all, heard{m.Subject, who, m.Reply, err})
				mu.Unlock()
				if m.Reply != "" {
					_ = m.Respond([]byte(`{}`))
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := ans.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	own, err := access.WatchSubject("client-n1", mesh.AppliedBucket, "n1.m")
	if err != nil {
		t.Fatal(err)
	}
	conn, r := rawConnect(t, f.srv.URL(), auth.AccountCredsPath(f.dir, access.Requests, "client-n1"))
	hdr, body := "NATS/1.0\r\nX-Own: 1\r\n\r\n", `{}`
	for _, at := range append([]string{"mesh-vault.secret.m.m", "mesh-asks.answer.alice"}, literal...) {
		if _, err := fmt.Fprintf(conn, "HPUB %s %s %d %d\r\n%s%s\r\n", own, at, len(hdr), len(hdr)+len(body), hdr, body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fmt.Fprintf(conn, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	if line := rawUntilPong(r); line != "PONG" {
		t.Fatalf("client-n1's watch requests: %s", line)
	}
	bustest.WaitFor(t, 0, "the seat's refusals aimed at the literal verbs heard by their answerers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(all) >= len(literal)
	})
	// The operator's own requests; the refusals aimed at the verbs were
	// routed before the seat answered the last, and so have landed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, v := range literal {
		if _, err := f.asking[access.DefaultOperator].nc.RequestWithContext(ctx, v, []byte(`{}`)); err != nil {
			t.Fatalf("the operator asks %s: %v", v, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	aimed, asked := map[string]bool{}, map[string]bool{}
	for _, h := range all {
		switch {
		case h.asker == access.DefaultOperator && h.err == nil && strings.HasPrefix(h.reply, "_R_."):
			asked[h.subject] = true
		case h.asker == "" && errors.Is(h.err, bus.ErrNoAsker) && h.reply == "":
			aimed[h.subject] = true
		default:
			t.Errorf("%s heard from %q (%v) with the reply subject %q; want the operator's with a reply, or no one's with none", h.subject, h.asker, h.err, h.reply)
		}
	}
	for _, v := range literal {
		if !aimed[v] || !asked[v] {
			t.Errorf("%s: an answer aimed at it heard %v, the operator's request %v; want both", v, aimed[v], asked[v])
		}
	}
	if len(aimed) != len(literal) || len(asked) != len(literal) {
		t.Errorf("heard aimed answers on %v and requests on %v; want the literal verbs %v only", aimed, asked, literal)
	}
}
