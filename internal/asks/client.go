package asks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Answer asks the router, on [AnswerSubject] of user, to answer the open
// ask with option, and returns the record as the router wrote it (state
// answered, with the warrant). user must be the NATS user nc is connected
// as: the bus permissions pin it. An error answer comes back as a
// [*RouterError] (unwrapping to [ErrUnknownAsk], [ErrNotOpen],
// [ErrUnknownOption], ...); with no router on the bus the error wraps
// [ErrNoRouter]. It blocks until the answer or until ctx is done.
//
// When nc connects with a user JWT (a mesh with accounts), the answer is
// signed: Answer reads the ask's record from the router, takes the digest
// the option binds ([Binds]: for an ask about a provision, computed here
// from the key it is about, the ask id and the option, not taken from the
// router) and sends the user JWT and the signature of that digest by the
// user's nkey (nc's credentials sign it, as they sign the server's nonce),
// which the router copies into the warrant and the seat checks. An ask the
// router does not know, or an option it does not offer, goes unsigned: the
// router refuses it.
func Answer(ctx context.Context, nc *nats.Conn, user, ask, option string) (mesh.Record, error) {
	subject := AnswerSubject(user)
	req := AnswerRequest{Ask: ask, Option: option}
	if err := sign(ctx, nc, &req); err != nil {
		return mesh.Record{}, err
	}
	var rep Reply
	if err := request(ctx, nc, subject, req, &rep); err != nil {
		return mesh.Record{}, err
	}
	if rep.Error != "" || rep.Code != "" {
		return mesh.Record{}, &RouterError{Code: rep.Code, Why: rep.Error}
	}
	if rep.Record == nil {
		return mesh.Record{}, fmt.Errorf("asks: answer on %s: the router answered no record", subject)
	}
	return *rep.Record, nil
}

// sign sets req's JWT and Sig when nc connects with a user JWT: see
// [Answer].
func sign(ctx context.Context, nc *nats.Conn, req *AnswerRequest) error {
	if nc.Opts.UserJWT == nil || nc.Opts.SignatureCB == nil {
		return nil // no accounts: nothing to sign with, and nothing checks it
	}
	var l Listing
	if err := request(ctx, nc, ListSubject, ListRequest{Ask: req.Ask}, &l); err != nil {
		return err
	}
	if l.Error != "" || l.Code != "" {
		return &RouterError{Code: l.Code, Why: l.Error}
	}
	if len(l.Records) != 1 || l.Records[0].Ask.ID != req.Ask {
		return nil // not recorded: the router refuses the answer
	}
	binds, ok := Binds(l.Records[0].Ask, req.Option)
	if !ok {
		return nil // not offered: the router refuses the answer
	}
	token, err := nc.Opts.UserJWT()
	if err != nil {
		return fmt.Errorf("asks: answer %s: reading the user JWT: %w", req.Ask, err)
	}
	sig, err := nc.Opts.SignatureCB([]byte(binds))
	if err != nil {
		return fmt.Errorf("asks: answer %s: signing the digest %s: %w", req.Ask, binds, err)
	}
	req.JWT, req.Sig = token, retire.Sign(sig)
	return nil
}

// Binds returns the digest an answer choosing option of the ask a signs,
// and false when a offers no such option. For an ask about a provision
// ("provision.<key>") it is [mesh.ActDigest] of that key, the ask's id and
// the option, whatever the option says it binds: a router that shows
// another act's digest gets no signature of it. For any other ask it is
// the digest the option binds.
func Binds(a mesh.Ask, option string) (string, bool) {
	o, ok := a.Option(option)
	if !ok {
		return "", false
	}
	if key, ok := strings.CutPrefix(a.About, "provision."); ok {
		return mesh.ActDigest(key, a.ID, option), true
	}
	return o.Binds, true
}

// Withdraw asks the router, on [WithdrawSubject] of asker, to end the ask
// id that asker raised, because of why (non-empty; kept in the warrant), and
// returns the record as the router then holds it. An open ask becomes
// expired with the warrant {"asker","ask","outcome":"expired","by":{"who":
// asker,"kind":"withdrawn","identity":asker},"at","why"}; its expiry is
// forgotten. An ask already expired (withdrawn before, or by the clock, also
// one whose time is up as it is withdrawn) is left as it is and returned:
// withdrawing is idempotent. An error answer is a [*RouterError]: an
// answered ask is [ErrNotOpen] (the operator's answer stands in the record;
// it is not undone), an ask not recorded [ErrUnknownAsk], an ask raised by
// another module [ErrOtherAsker], an empty id or why [ErrBadRequest]. With
// no router on the bus the error wraps [ErrNoRouter]. asker must be the
// module nc publishes for: the bus permissions pin it. It blocks until the
// answer or until ctx is done.
func Withdraw(ctx context.Context, nc *nats.Conn, asker, id, why string) (mesh.Record, error) {
	subject := WithdrawSubject(asker)
	var rep Reply
	if err := request(ctx, nc, subject, WithdrawRequest{Ask: id, Why: why}, &rep); err != nil {
		return mesh.Record{}, err
	}
	if rep.Error != "" || rep.Code != "" {
		return mesh.Record{}, &RouterError{Code: rep.Code, Why: rep.Error}
	}
	if rep.Record == nil {
		return mesh.Record{}, fmt.Errorf("asks: withdraw on %s: the router answered no record", subject)
	}
	return *rep.Record, nil
}

// List asks the router, on [ListSubject], for the records of state ("" for
// open, "all" for every one), soonest expiry first. Errors are as for
// [Answer].
func List(ctx context.Context, nc *nats.Conn, state string) (Listing, error) {
	var l Listing
	if err := request(ctx, nc, ListSubject, ListRequest{State: state}, &l); err != nil {
		return Listing{}, err
	}
	if l.Error != "" || l.Code != "" {
		return Listing{}, &RouterError{Code: l.Code, Why: l.Error}
	}
	return l, nil
}

// request sends req as JSON on subject and decodes the answer into rep.
func request(ctx context.Context, nc *nats.Conn, subject string, req, rep any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("asks: request on %s: %w", subject, err)
	}
	m, err := nc.RequestWithContext(ctx, subject, b)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w on %s (is the ask router running, in `up`?)", ErrNoRouter, subject)
	}
	if err != nil {
		return fmt.Errorf("asks: request on %s: %w", subject, err)
	}
	if err := json.Unmarshal(m.Data, rep); err != nil {
		return fmt.Errorf("asks: answer on %s does not decode: %w", subject, err)
	}
	return nil
}
