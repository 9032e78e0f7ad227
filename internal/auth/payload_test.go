package auth_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
)

// TestVaultAskersRequestsAreBounded: a user of the requests account that
// asks only the vault (a node's client, a module, a provider) carries at
// most access.MaxVaultRequest bytes a message, the server's word: its
// connection is told that bound, and a request one byte larger sent as
// the raw protocol (no library refusing it first) is refused by the
// server ("Maximum Payload Violation"), while one of the bound's size is
// taken. The operator, whose asks and answers carry texts, keeps
// access.MaxSharedValue.
func TestVaultAskersRequestsAreBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gen(t, dir)
	srv := serve(t, dir, t.TempDir())
	creds := func(user string) string { return auth.AccountCredsPath(dir, access.Requests, user) }
	for _, c := range []struct {
		user string
		want int64
	}{
		{"client-n1", access.MaxVaultRequest},
		{"m", access.MaxVaultRequest},
		{"a", access.MaxVaultRequest},
		{"operator", access.MaxSharedValue},
	} {
		nc, err := dial(srv.URL(), nats.UserCredentials(creds(c.user)), nats.CustomInboxPrefix(access.InboxPrefix(c.user)))
		if err != nil {
			t.Fatalf("connect %s in %s: %v", c.user, access.Requests, err)
		}
		waitFor(t, fmt.Sprintf("max payload of %d told to %s's connection in %s (it says %d)", c.want, c.user, access.Requests, nc.MaxPayload()),
			func() bool { return nc.MaxPayload() == c.want })
		nc.Close()
	}

	// The raw protocol: what an attacker's own client sends.
	subject := kit.SecretSubject("m", "client-n1")
	if said := rawPublish(t, srv.URL(), creds("client-n1"), subject, access.MaxVaultRequest+1); !strings.Contains(said, "Maximum Payload Violation") {
		t.Errorf("client-n1's request of %d bytes on %s: the server said %q; want its Maximum Payload Violation", access.MaxVaultRequest+1, subject, said)
	}
	if said := rawPublish(t, srv.URL(), creds("client-n1"), subject, access.MaxVaultRequest); said != "PONG" {
		t.Errorf("client-n1's request of %d bytes on %s: the server said %q; want it taken (PONG)", access.MaxVaultRequest, subject, said)
	}
}
