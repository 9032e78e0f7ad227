package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// AccountCreds returns the credentials file of the same user in account
// acc, as "auth gen" writes it beside the storage one: "<dir>/<acc>/<file>"
// for creds "<dir>/<file>".
func AccountCreds(creds string, acc access.Account) string {
	return filepath.Join(filepath.Dir(creds), string(acc), filepath.Base(creds))
}

// ConnectIn dials d's user in account acc ([access.Services] or
// [access.Requests]): with d.Creds, the credentials [AccountCreds] names,
// which must exist; without, as d says (a server without accounts, where
// one connection space holds every subject). The connection has no
// JetStream context: those accounts hold no bucket. It returns an error
// naming the missing file, or the error of connecting.
func ConnectIn(d Dial, acc access.Account) (*nats.Conn, error) {
	if d.Creds != "" {
		d.Creds = AccountCreds(d.Creds, acc)
		if _, err := os.Stat(d.Creds); err != nil {
			return nil, fmt.Errorf("bus: %s has no user in the account %s: %w (copy %s/%s from the directory \"auth gen\" or \"node join\" wrote, to %s, beside %s)",
				d.Name, acc, err, acc, filepath.Base(d.Creds), d.Creds, filepath.Join(filepath.Dir(filepath.Dir(d.Creds)), filepath.Base(d.Creds)))
		}
	}
	return dial(d)
}

// ErrNoAsker is wrapped by the error of [Answerer.Asker] for a request the
// server names no asker of: it did not cross the import of the requests
// account (a message published in the services account, a reply routed
// back in, a JetStream delivery), so nothing says who sent it.
var ErrNoAsker = errors.New("the server names no asker of the request")

// RequestInfoHeader is the header in which the server tells a responder
// who sent a request that crossed a service import sharing the asker's
// identity: a JSON object with, among others, "acc" (the asker's account's
// public key), "name_tag" (its user's JWT name), "kind" ("Client").
const RequestInfoHeader = "Nats-Request-Info"

// requestInfo is the part of [RequestInfoHeader] an [Answerer] reads.
type requestInfo struct {
	Account string `json:"acc"`
	NameTag string `json:"name_tag"`
	User    string `json:"user"`
	Kind    string `json:"kind"`
}

// name returns the asker's user name: its JWT's name in operator mode
// (where "user" is the user's public key), else the user of a
// configuration's accounts.
func (ri requestInfo) name() string {
	if ri.NameTag != "" || nkeys.IsValidPublicUserKey(ri.User) {
		return ri.NameTag
	}
	return ri.User
}

// Answerer is a responder's connection for its verbs, and who it is: it
// tells who sent each request from what the server says.
type Answerer struct {
	// Conn is the responder's connection: its user in [access.Services],
	// or its only connection on a server without accounts.
	*nats.Conn
	// own is the public key of the account of the connection's user; ""
	// without credentials.
	own string
	// said holds what [Answerer.Asker] made of the headers it read last,
	// by the header's text (at most [askersSaid] of them): the server
	// writes the same header for every request of one connection (its
	// user's JWT among its fields) until its round-trip time changes, so
	// that a flood of one connection's requests is told apart from
	// another's by a map lookup, not by decoding a JSON object of a
	// kilobyte or two each.
	mu   sync.Mutex
	said map[string]asker
	// seed is the nkey seed of the responder's credentials (nil without):
	// the key of the names the seat gives its askers' watches
	// ([access.WatchToken]).
	seed []byte
}

// asker is what [Answerer.Asker] made of one header: a user, or an error.
type asker struct {
	user, key string
	err       error
}

// askersSaid bounds [Answerer].said: past it, the map starts again empty
// (an asker that varies its header, by reconnecting, makes the vault
// decode again, never hold more).
const askersSaid = 1024

// NewAnswerer returns the answerer of nc, dialled with the credentials
// file creds ("" for none: a server without accounts). It returns an
// error when creds holds no user JWT.
func NewAnswerer(nc *nats.Conn, creds string) (*Answerer, error) {
	a := &Answerer{Conn: nc}
	if creds == "" {
		return a, nil
	}
	b, err := os.ReadFile(creds)
	if err != nil {
		return nil, fmt.Errorf("bus: answerer: %w", err)
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return nil, fmt.Errorf("bus: answerer: %s: %w", creds, err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, fmt.Errorf("bus: answerer: %s: %w", creds, err)
	}
	a.own = uc.IssuerAccount
	if a.own == "" {
		a.own = uc.Issuer
	}
	a.seed = credsSeed(creds)
	return a, nil
}

// AnswererIn returns the answerer of nc, whose user is in account (its
// public key in operator mode, its name among a configuration's
// accounts): a request the server says came from that account is no
// one's. An empty account is [Answerer.Open].
func AnswererIn(nc *nats.Conn, account string) *Answerer {
	return &Answerer{Conn: nc, own: account}
}

// Open reports whether the answerer runs with no credentials (a server
// without accounts): no server names an asker then.
func (a *Answerer) Open() bool { return a.own == "" }

// Asker returns the user that sent the request m, as the server says in
// its [RequestInfoHeader]: the JWT name of a client's user in another
// account than the answerer's (the requests account, whose import of the
// verbs shares the asker's identity), or, on a server whose configuration
// holds the accounts and users, the user's name. It returns "" and nil
// when the answerer is [Answerer.Open], and an error wrapping [ErrNoAsker]
// when the server names no client user of another account. What it made
// of a header is held (see [Answerer].said): the requests of one
// connection cost a lookup.
//
// The name is only as good as the header: an asker that writes its own
// header block, ending in a bare blank line, has its line read and the
// server's not. Take who asked from a subject the server's permissions pin
// to the asker ([Answerer.SentBy]); Asker alone tells that a request
// crossed the requests account's import, on a verb only some users may
// publish (the operators' rotate and unkeep).
func (a *Answerer) Asker(m *nats.Msg) (string, error) {
	user, _, err := a.AskerOf(m)
	return user, err
}

// AskerOf returns what [Answerer.Asker] does and the asker's user's public
// key in operator mode ("" on a server whose configuration holds the
// users).
func (a *Answerer) AskerOf(m *nats.Msg) (user, key string, err error) {
	if a.Open() {
		return "", "", nil
	}
	if err := forgedInfo(m.Header); err != nil {
		return "", "", err
	}
	h := m.Header.Get(RequestInfoHeader)
	if h == "" {
		return "", "", fmt.Errorf("%w (no %s header)", ErrNoAsker, RequestInfoHeader)
	}
	a.mu.Lock()
	said, ok := a.said[h]
	a.mu.Unlock()
	if ok {
		return said.user, said.key, said.err
	}
	said = a.asker(h)
	a.mu.Lock()
	if a.said == nil || len(a.said) >= askersSaid {
		a.said = make(map[string]asker)
	}
	a.said[h] = said
	a.mu.Unlock()
	return said.user, said.key, said.err
}

// SentBy returns nil when the request m may be taken as sent by user,
// the asker its subject names (the server's publish permission pins that
// token to the user who published it: the product's verbs that answer by
// asker end in its name, see [access.SecretOfSelf]). The server's
// [RequestInfoHeader] is a second check: the request must have crossed
// the import of the requests account from a client user, and the header
// must name the same user. The header alone is not the server's word: an
// asker may write a header block that ends in a bare blank line, which the
// server appends its own line past and nats.go reads no further than, so
// that the first line, the asker's, is all a responder sees. An answerer
// that is [Answerer.Open] takes the subject's word. The error wraps
// [ErrNoAsker] when no client user of another account sent m, or says
// the two names.
func (a *Answerer) SentBy(m *nats.Msg, user string) error {
	if a.Open() {
		return nil
	}
	who, _, err := a.AskerOf(m)
	if err != nil {
		return err
	}
	if who != user {
		return fmt.Errorf("%s names the asker %q, but the server's %s names %q: refused (a header block written to pass as the server's)", m.Subject, user, RequestInfoHeader, who)
	}
	return nil
}

// WatchToken returns the token of user's watches' consumer names
// ([access.WatchToken]) keyed by the answerer's own seed, or "" for an
// answerer with no credentials.
func (a *Answerer) WatchToken(user string) string {
	if a.seed == nil {
		return ""
	}
	return access.WatchToken(a.seed, user)
}

// forgedInfo returns an error wrapping [ErrNoAsker] when the headers h of
// a request may hold a [RequestInfoHeader] the asker wrote rather than the
// server's: the header more than once, or any other header beside it.
// nats-server (2.15) strips an asker's own Nats-Request-Info only from a
// line that follows a CRLF, and appends its own line; nats.go splits
// header lines on a bare LF too and gives the first value. So a line
// smuggled behind a bare LF came first, and the server's line could even
// be glued into another header's value. No asker of the product's verbs
// sends a header of its own: a request that carries one is refused, and
// so is a value that does not decode as one JSON object ([Answerer.asker]:
// the server's line glued after the asker's leaves trailing text).
func forgedInfo(h nats.Header) error {
	if n := len(h.Values(RequestInfoHeader)); n > 1 {
		return fmt.Errorf("%w (%s comes %d times: one was not the server's)", ErrNoAsker, RequestInfoHeader, n)
	}
	for k := range h {
		if k != RequestInfoHeader {
			return fmt.Errorf("%w (the request carries the header %q beside the server's %s: refused, since it could hide a line the server did not strip)", ErrNoAsker, k, RequestInfoHeader)
		}
	}
	return nil
}

// asker decodes the header h (a [RequestInfoHeader]'s text) as
// [Answerer.AskerOf] says. A request from a client connection, or from an
// edge site's leafnode link (whose user is the edge node's client's in
// that account: what crosses the link is what that client may do), names
// its user; any other names nobody.
func (a *Answerer) asker(h string) asker {
	var ri requestInfo
	if err := json.Unmarshal([]byte(h), &ri); err != nil {
		return asker{err: fmt.Errorf("%w (%s does not decode: %v)", ErrNoAsker, RequestInfoHeader, err)}
	}
	user := ri.name()
	switch {
	case (ri.Kind != "Client" && ri.Kind != "Leafnode") || user == "":
		return asker{err: fmt.Errorf("%w (sent by a %q with no user)", ErrNoAsker, ri.Kind)}
	case ri.Account == a.own:
		return asker{err: fmt.Errorf("%w (sent from the responders' own account, by %s)", ErrNoAsker, user)}
	}
	key := ""
	if nkeys.IsValidPublicUserKey(ri.User) {
		key = ri.User
	}
	return asker{user: user, key: key}
}

// ConnectAnswerer dials d's user in [access.Services] ([ConnectIn]) and
// returns its answerer.
func ConnectAnswerer(d Dial) (*Answerer, error) {
	nc, err := ConnectIn(d, access.Services)
	if err != nil {
		return nil, err
	}
	creds := ""
	if d.Creds != "" {
		creds = AccountCreds(d.Creds, access.Services)
	}
	a, err := NewAnswerer(nc, creds)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return a, nil
}

// Request sends body on subject with a reply inbox of nc's and returns the
// first answer. The request is followed by a PING: the server's refusal of
// a subject the user may not publish comes before its PONG, so that a
// refused request returns at once with the server's permissions violation
// (wrapping nats.ErrPermissionViolation) rather than waiting for ctx. No
// responders is nats.ErrNoResponders. A ctx without a deadline waits 5 s
// for the PONG, and for the answer as long as ctx.
func Request(ctx context.Context, nc *nats.Conn, subject string, body []byte) (*nats.Msg, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	before := nc.LastError()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return nil, err
	}
	flushed := nc.FlushWithContext
	if _, ok := ctx.Deadline(); !ok {
		flushed = func(context.Context) error { return nc.FlushTimeout(5 * time.Second) }
	}
	if err := flushed(ctx); err != nil {
		return nil, err
	}
	if e := nc.LastError(); e != nil && e != before && errors.Is(e, nats.ErrPermissionViolation) &&
		strings.Contains(e.Error(), `Publish to "`+subject+`"`) {
		return nil, e
	}
	msg, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	return msg, nil
}
