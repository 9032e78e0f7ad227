package asks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Answer asks the router, on [AnswerSubject] of user, to answer the open
// ask with option, and returns the record as the router wrote it (state
// answered, with the warrant). user must be the NATS user nc is connected
// as: the bus permissions pin it. An error answer comes back as a
// [*RouterError] (unwrapping to [ErrUnknownAsk], [ErrNotOpen],
// [ErrUnknownOption], ...); with no router on the bus the error wraps
// [ErrNoRouter]. It blocks until the answer or until ctx is done.
func Answer(ctx context.Context, nc *nats.Conn, user, ask, option string) (mesh.Record, error) {
	subject := AnswerSubject(user)
	var rep Reply
	if err := request(ctx, nc, subject, AnswerRequest{Ask: ask, Option: option}, &rep); err != nil {
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
