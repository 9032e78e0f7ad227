package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// claimsUpdate is the subject on which every server of a full resolver
// takes a newer account JWT (each server subscribes: one publish reaches
// every server of a cluster).
const claimsUpdate = "$SYS.REQ.CLAIMS.UPDATE"

// ErrClaimsRefused is returned (wrapped, naming the account and the
// server's words) by [PushClaims] when a server refuses an account JWT.
var ErrClaimsRefused = errors.New("bus: account JWT refused")

// PushClaims delivers each account JWT of jwts to the servers, on
// $SYS.REQ.CLAIMS.UPDATE, with nc: a connection of a system-account user
// (auth's SystemCreds). Each server with a full resolver stores a JWT newer
// than its own and applies it at once: a user it revokes is disconnected
// and refused. For each JWT it waits until servers servers (at least one)
// have answered "jwt updated", and returns an error wrapping
// [ErrClaimsRefused] when one refuses it, or an error naming the account
// when fewer answer before ctx is done (ctx without a deadline: 5 s).
func PushClaims(ctx context.Context, nc *nats.Conn, jwts []string, servers int) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	servers = max(servers, 1)
	for _, token := range jwts {
		name := token
		if ac, err := jwt.DecodeAccountClaims(token); err == nil {
			name = fmt.Sprintf("%s (%s)", ac.Name, ac.Subject)
		}
		if err := pushOne(ctx, nc, token, name, servers); err != nil {
			return err
		}
	}
	return nil
}

// pushOne publishes one account JWT and reads the answers of servers
// servers.
func pushOne(ctx context.Context, nc *nats.Conn, token, name string, servers int) error {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("bus: push account %s: %w", name, err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(claimsUpdate, inbox, []byte(token)); err != nil {
		return fmt.Errorf("bus: push account %s: %w", name, err)
	}
	seen := map[string]bool{}
	for len(seen) < servers {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("bus: push account %s: %d of %d servers answered: %w", name, len(seen), servers, err)
		}
		var r server.ServerAPIClaimUpdateResponse
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return fmt.Errorf("bus: push account %s: an answer that does not decode (%q): %w", name, msg.Data, err)
		}
		from := "a server"
		if r.Server != nil {
			from = r.Server.Name
		}
		if r.Error != nil {
			return fmt.Errorf("%w: account %s, by %s: %s", ErrClaimsRefused, name, from, strings.TrimSpace(r.Error.Description))
		}
		seen[from] = true
	}
	return nil
}

// LookupClaims returns the servers' copy of the account pub's JWT, asked on
// $SYS.REQ.ACCOUNT.<pub>.CLAIMS.LOOKUP with nc (a system-account user's
// connection): the first answer, "" when that server holds none. It
// returns an error when no server answers before ctx is done (ctx without
// a deadline: 5 s).
func LookupClaims(ctx context.Context, nc *nats.Conn, pub string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, "$SYS.REQ.ACCOUNT."+pub+".CLAIMS.LOOKUP", nil)
	if err != nil {
		return "", fmt.Errorf("bus: look up account %s: %w", pub, err)
	}
	return string(msg.Data), nil
}
