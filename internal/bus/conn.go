package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	// Log receives the connection's asynchronous errors (a denied publish
	// is only ever reported there) and reconnects. Nil means slog.Default().
	Log *slog.Logger
	// OnRefused, if set, is called on the connection's goroutine with each
	// permissions violation the server reports (wrapping
	// nats.ErrPermissionViolation, naming the subject), at once: a command
	// whose request was refused fails then, rather than wait for a reply
	// that never comes. It must not block.
	OnRefused func(err error)
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
	return nc, withReplicas(js, d.Replicas, d.Log), nil
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
	opts := []nats.Option{
		nats.Name(d.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		nats.CustomInboxPrefix("_INBOX_" + inboxToken(who)),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if d.OnRefused != nil && errors.Is(err, nats.ErrPermissionViolation) {
				d.OnRefused(err)
				return // the command says it
			}
			log.Error("bus: asynchronous error", "component", d.Name, "subject", subject, "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("bus: disconnected", "component", d.Name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("bus: reconnected", "component", d.Name, "url", c.ConnectedUrl())
		}),
	}
	if d.Creds != "" {
		opts = append(opts, nats.UserCredentials(d.Creds))
	}
	if d.User != "" {
		opts = append(opts, nats.UserInfo(d.User, d.Password))
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
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return ""
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return ""
	}
	return uc.Name
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

// HasJetStream reports whether nc reaches JetStream: the server it is
// connected to has it, or, with a domain (a leafnode server of an edge
// site, which has none of its own), the domain's JetStream answers
// ($JS.<domain>.API.INFO) within 2 s.
func HasJetStream(nc *nats.Conn, domain string) bool {
	if on, _ := nc.ConnectedServerJetStream(); on || domain == "" {
		return on
	}
	js, err := jetstream.NewWithDomain(nc, domain)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err == nil
}
