package bus

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// Dial says how one component connects to the bus. Every component dials
// its own connection; connections are never shared between components, so
// that each can be held to its own permissions.
type Dial struct {
	// URL is the server's nats:// URL (a comma-separated list for a
	// cluster).
	URL string
	// Name is the component's name, shown by the server (for example
	// "seat", "client-ace").
	Name string
	// Creds is an optional NATS credentials file (a user JWT and its
	// nkey seed, as "mesh-provisioner auth gen" writes them). Without User,
	// the inbox prefix is "_INBOX_<name>" of the JWT's name claim: the user
	// the generated permissions let subscribe to that prefix only.
	Creds string
	// User and Password are optional plain credentials (the embedded
	// default's generated users).
	User, Password string
	// Replicas is the replica count of every bucket and stream made on
	// this connection whose config does not set its own ([Bucket],
	// [LeaseBucket], a [Copy] with Options.Create, and CreateKeyValue or
	// CreateStream of the returned JetStream context): 3 on a three-server
	// cluster. 0 means the server's default, one replica. At most
	// [MaxReplicas]; a standalone server refuses more than one.
	Replicas int
	// Domain is the JetStream domain of the servers that keep the mesh's
	// state, for a connection to a leafnode server of an edge site (whose
	// clients reach JetStream as "$JS.<domain>.API"); empty for a
	// connection to those servers themselves.
	Domain string
	// CA is an optional PEM file of the certificate authority that signs
	// the servers' certificates: with it the connection requires TLS and
	// checks the server's certificate against it (a cluster whose files
	// auth gen wrote with --tls-cert, --tls-key and --tls-ca). Empty
	// means the system's roots, for a server that asks for TLS.
	CA string
	// Log receives the connection's asynchronous errors (a denied publish
	// is only ever reported there) and reconnects. Nil means slog.Default().
	Log *slog.Logger
	// OnRefused, if set, is called on the connection's goroutine with each
	// permissions violation the server reports (wrapping
	// nats.ErrPermissionViolation, naming the subject), at once: a command
	// whose request was refused fails then, rather than wait for a reply
	// that never comes. It must not block.
	OnRefused func(err error)
	// OnRemoved, if set, is called once, on the connection's goroutine,
	// when the connection's access to the mesh was removed: its
	// credentials file is gone, or the server revoked its user and refused
	// the reconnect after (a user signed anew, whose old credentials were
	// revoked as its permissions changed, reconnects with its new file and
	// is not removed). err wraps
	// [ErrAccessRemoved] and names the user. The connection keeps
	// reconnecting with backoff (credentials given back let it in again);
	// a standalone process stops. It must not block.
	OnRemoved func(err error)
}

// ErrAccessRemoved is wrapped by the error a connection reports (in its
// log and to Dial.OnRemoved) when its access to the mesh was removed: its
// credentials file is gone, or the server revoked its user.
var ErrAccessRemoved = errors.New("access to the mesh was removed")

// DisconnectGrace is how long a lost connection may take to come back
// before it is said at warn: a shorter loss is said at info.
const DisconnectGrace = 5 * time.Second

// Reconnect delays: the first try after a connection is lost waits
// about ReconnectFirst, each further try of the whole server list waits
// twice the one before, up to ReconnectMost; each delay gets a random
// jitter of up to a quarter of itself, so that the components of a mesh
// do not all come back at once.
const (
	ReconnectFirst = 250 * time.Millisecond
	ReconnectMost  = 30 * time.Second
)

// ReconnectDelay returns the wait before the attempts-th try (1 for the
// first) of the connection's server list: [ReconnectFirst] doubled per
// earlier try up to [ReconnectMost], plus up to a quarter of it at random.
func ReconnectDelay(attempts int) time.Duration {
	d := ReconnectFirst
	for i := 1; i < attempts && d < ReconnectMost; i++ {
		d *= 2
	}
	d = min(d, ReconnectMost)
	return d + rand.N(d/4+1)
}

// A connection pings its server every PingInterval and takes it as dead
// after MaxPingsOut pings unanswered: a server that stopped answering (a
// partition, a machine gone) is found within about 6 s, and the connection
// reconnects to another server of its list, not after nats.go's default of
// 2 minutes x 2 pings.
const (
	PingInterval = 2 * time.Second
	MaxPingsOut  = 3
)

// Connect dials the bus and returns the connection and its JetStream
// context. The connection reconnects forever (to any server of the URL
// list, and to the servers the cluster tells of); its inbox prefix is
// "_INBOX_<user or name>" so that permissions can scope replies per user.
// The JetStream context makes buckets and streams with d.Replicas. It
// returns an error from [CheckReplicas] for d.Replicas over [MaxReplicas]
// or below 0.
func Connect(d Dial) (*nats.Conn, jetstream.JetStream, error) {
	if d.Replicas != 0 {
		if err := CheckReplicas(d.Replicas); err != nil {
			return nil, nil, err
		}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	nc, err := dial(d)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if d.Domain != "" {
		js, err = jetstream.NewWithDomain(nc, d.Domain)
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("bus: jetstream for %s: %w", d.Name, err)
	}
	js, err = withScoping(nc, withReplicas(js, d.Replicas, d.Log), CredsPublish(d.Creds), watchAsker(nc, d))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("bus: jetstream for %s: %w", d.Name, err)
	}
	return nc, js, nil
}

// dial connects as d says (see [Connect]), with no JetStream context.
func dial(d Dial) (*nats.Conn, error) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	who := d.User
	if who == "" && d.Creds != "" {
		who = CredsUser(d.Creds)
	}
	if who == "" {
		who = d.Name
	}
	refused := &refusals{}
	late := &lateAnswers{}
	var disconnects atomic.Int64 // the connection's disconnects so far
	opts := []nats.Option{
		nats.Name(d.Name),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			wait := ReconnectDelay(attempts)
			log.Debug("bus: reconnecting", "component", d.Name, "try", attempts, "wait", wait)
			return wait
		}),
		// A refused user keeps trying with backoff rather than close: the
		// operator may give its credentials back.
		nats.IgnoreAuthErrorAbort(),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		nats.CustomInboxPrefix("_INBOX_" + inboxToken(who)),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), ".CONSUMER.DELETE.") {
				// A scoped party's watch stopped (or started again): the
				// library asks to delete its consumer, which only the seat
				// and the operators may; the server removes it.
				log.Debug("bus: a consumer is left to the server to remove", "component", d.Name, "err", err)
				return
			}
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "Publish to \"_R_.") {
				// An answer sent after the server forgot its request's
				// reply (the asker's wait ended, or a connection came
				// back meanwhile): it reaches no one, as intended.
				late.say(d.Name, log)
				return
			}
			if d.OnRefused != nil && errors.Is(err, nats.ErrPermissionViolation) {
				d.OnRefused(err)
				return // the command says it
			}
			if credsRefusal(err) {
				refused.say(d, who, log, err)
				return
			}
			if sub == nil && Transient(err) {
				// A reconnect's handshake the server did not finish within
				// the library's connect timeout (2 s: a slow server, a
				// loaded machine): the library tries again with backoff,
				// and a disconnect that lasts is said at warn (above).
				log.Info("bus: a reconnect's handshake timed out; trying again", "component", d.Name, "err", err)
				return
			}
			log.Error("bus: asynchronous error", "component", d.Name, "subject", subject, "err", err)
		}),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if err == nil {
				return
			}
			// A connection lost and back within DisconnectGrace (a
			// server restarting, a user signed anew) is routine: said at
			// info, and at warn only when it lasts.
			n := disconnects.Add(1)
			log.Info("bus: disconnected; reconnecting", "component", d.Name, "err", err)
			time.AfterFunc(DisconnectGrace, func() {
				if disconnects.Load() == n && !c.IsConnected() && !c.IsClosed() {
					log.Warn("bus: disconnected and not back yet; reconnecting with backoff", "component", d.Name, "for", DisconnectGrace, "err", err)
				}
			})
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			refused.clear()
			log.Info("bus: reconnected", "component", d.Name, "url", c.ConnectedUrl())
		}),
	}
	if d.Creds != "" {
		opts = append(opts, nats.UserCredentials(d.Creds))
	}
	if d.User != "" {
		opts = append(opts, nats.UserInfo(d.User, d.Password))
	}
	if d.CA != "" {
		opts = append(opts, nats.RootCAs(d.CA))
	}
	nc, err := nats.Connect(d.URL, opts...)
	if err != nil {
		if d.Creds != "" {
			return nil, fmt.Errorf("bus: connect %s as %s with %s: %w", d.URL, d.Name, d.Creds, err)
		}
		return nil, fmt.Errorf("bus: connect %s as %s: %w", d.URL, d.Name, err)
	}
	return nc, nil
}

// CredsUser returns the name claim of the user JWT in the credentials
// file at path (the party's user, as "auth gen" writes it), or "" when the
// file cannot be read or holds no user JWT (nats.Connect then says why).
func CredsUser(path string) string {
	uc := credsClaims(path)
	if uc == nil {
		return ""
	}
	return uc.Name
}

// WatchTokenOf returns [access.WatchToken] of user keyed by the seed of
// the credentials file at seatCreds (the seat's user, in any account: the
// file its answerer of watches dials), or "" when the file cannot be read
// or holds no seed. The seat names user's watches' consumers with it.
func WatchTokenOf(seatCreds, user string) string {
	seed := credsSeed(seatCreds)
	if seed == nil {
		return ""
	}
	return access.WatchToken(seed, user)
}

// credsSeed returns the nkey seed in the credentials file at path, or nil.
func credsSeed(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return nil
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil
	}
	return seed
}

// CredsPublish returns the subjects the user JWT in the credentials file
// at path allows its user to publish (patterns, as the server enforces
// them; a domain's twins included), or nil when the file cannot be read or
// holds no user JWT. It says what the party may do, not that the server
// agrees: the server checks every publish.
func CredsPublish(path string) []string {
	uc := credsClaims(path)
	if uc == nil {
		return nil
	}
	return uc.Pub.Allow
}

// credsClaims returns the claims of the user JWT in the credentials file
// at path, or nil.
func credsClaims(path string) *jwt.UserClaims {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return nil
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil
	}
	return uc
}

// inboxToken keeps a user name usable as one subject token.
func inboxToken(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '.' || c == '*' || c == '>' || c == ' ' {
			b[i] = '_'
		}
	}
	return string(b)
}

// HasJetStream reports whether nc, dialled as d says, reaches JetStream:
// the server it is connected to has it, or, with d.Domain (a leafnode
// server of an edge site, which has none of its own), the domain's
// JetStream answers within 2 s. A user that may ask the account's
// JetStream info ($JS.<domain>.API.INFO: an operator, the seat), or one
// of no user JWT (plain credentials, or none), asks it; a scoped party may
// not (it would wait in the server's API queue, which every account
// shares: docs/trust.md), and asks instead a direct get of a key it may read in each of its buckets
// ([probeToken] in the place of the pattern's wildcards), which the
// stream itself answers, the key there or not: any answer is JetStream's.
// No answer (no responders: the leaf is not linked; or none within 2 s,
// its buckets not made yet), or a user that may get no key, is false.
func HasJetStream(nc *nats.Conn, d Dial) bool {
	if on, _ := nc.ConnectedServerJetStream(); on || d.Domain == "" {
		return on
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	api := "$JS." + d.Domain + ".API."
	uc := credsClaims(d.Creds)
	if uc == nil || mayPublish(uc.Pub.Allow, api+"INFO") {
		js, err := jetstream.NewWithDomain(nc, d.Domain)
		if err != nil {
			return false
		}
		_, err = js.AccountInfo(ctx)
		return err == nil
	}
	probes := directProbes(uc.Pub.Allow, api)
	answered := make(chan bool, len(probes))
	for _, subject := range probes {
		go func() {
			_, err := nc.RequestWithContext(ctx, subject, nil)
			answered <- err == nil
		}()
	}
	for range probes {
		if <-answered {
			return true
		}
	}
	return false
}

// mayPublish reports whether the publish allow list pub allows subject.
func mayPublish(pub []string, subject string) bool {
	for _, p := range pub {
		if access.Matches(p, subject) {
			return true
		}
	}
	return false
}

// directProbes returns, for each stream whose direct gets the publish
// allow list pub allows under the API prefix api, one subject of such a
// get: a key of the first pattern with [probeToken] for its wildcards.
func directProbes(pub []string, api string) []string {
	fill := strings.NewReplacer("*", probeToken, ">", probeToken)
	var out []string
	seen := map[string]bool{}
	for _, p := range pub {
		rest, ok := strings.CutPrefix(p, api+"DIRECT.GET.")
		st, keys, ok2 := strings.Cut(rest, ".")
		if !ok || !ok2 || st == "*" || st == ">" || seen[st] {
			continue
		}
		seen[st] = true
		out = append(out, api+"DIRECT.GET."+st+"."+fill.Replace(keys))
	}
	return out
}

// credsRefusal reports whether err is the server's or the library's
// refusal of a connection's credentials: an authorization violation, a
// user or account whose authentication expired or was revoked, or a
// credentials file that cannot be read.
func credsRefusal(err error) bool {
	for _, e := range []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked,
		nats.ErrAccountAuthExpired, fs.ErrNotExist, fs.ErrPermission} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// refusals keeps what one connection last said of its refusals, so that a
// reconnect refused again and again is said once per change of its text,
// and the removal of its access once.
type refusals struct {
	mu      sync.Mutex
	last    string
	removed bool
	// revoked says the server told the open connection its user was
	// revoked: confirmed as removed by the next refusal (a reconnect
	// refused), not by itself, since a user signed anew (its permissions
	// changed) reconnects with its new credentials file.
	revoked bool
}

// say logs err, a refusal of d's credentials (user who), when its text
// differs from the last one said, and the first time the refusals show the
// access removed (the credentials file gone; the user revoked, and a
// reconnect refused after: a user signed anew reconnects with its new
// file) says so and calls d.OnRemoved.
func (r *refusals) say(d Dial, who string, log *slog.Logger, err error) {
	r.mu.Lock()
	gone := errors.Is(err, fs.ErrNotExist) || r.revoked
	r.revoked = r.revoked || errors.Is(err, nats.ErrAuthRevoked)
	changed := err.Error() != r.last
	r.last = err.Error()
	first := gone && !r.removed
	r.removed = r.removed || gone
	r.mu.Unlock()
	switch {
	case changed && errors.Is(err, nats.ErrAuthRevoked) && !gone:
		// Routine when the user was signed anew (its permissions
		// changed): the reconnect reads its credentials file again. A
		// reconnect refused after says the removal.
		log.Info("bus: its user's JWT was revoked; reconnecting with its credentials file", "component", d.Name, "user", who, "err", err)
	case changed:
		log.Warn("bus: refused; reconnecting with backoff", "component", d.Name, "user", who, "err", err)
	}
	if first {
		removed := fmt.Errorf("bus: %s (user %s): %w: %w", d.Name, who, ErrAccessRemoved, err)
		log.Error("bus: "+ErrAccessRemoved.Error(), "component", d.Name, "user", who, "err", err)
		if d.OnRemoved != nil {
			d.OnRemoved(removed)
		}
	}
}

// clear forgets the refusals said, once the connection is back.
// lateAnswersSaid is how often a connection says the answers it sent after
// the server forgot their requests.
const lateAnswersSaid = time.Minute

// lateAnswers counts a connection's answers sent after the server forgot
// their requests' replies: a flood of requests that time out makes one
// each, so they are said once per [lateAnswersSaid], counted, not one
// line each.
type lateAnswers struct {
	mu   sync.Mutex
	n    int
	said time.Time
}

// say counts one late answer, and logs the count at info when the last
// such line is older than [lateAnswersSaid] (the first at once).
func (l *lateAnswers) say(component string, log *slog.Logger) {
	l.mu.Lock()
	l.n++
	n, now := l.n, time.Now()
	sayNow := now.Sub(l.said) >= lateAnswersSaid
	if sayNow {
		l.said, l.n = now, 0
	}
	l.mu.Unlock()
	if sayNow {
		log.Info("bus: answers came after the server forgot their requests; dropped (they reach no one)",
			"component", component, "answers", n, "per", lateAnswersSaid)
	}
}

func (r *refusals) clear() {
	r.mu.Lock()
	r.last, r.removed, r.revoked = "", false, false
	r.mu.Unlock()
}
