package kit

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// Conn is a provider's two bus connections, as its bus users may use them:
// the storage user's, whose JetStream context [Config].JetStream takes
// (the provisions it follows, its entries), and the requests user's, on
// which [AskConsumers] and [AskSecrets] ask the vault.
type Conn struct {
	// NC and JetStream are the storage user's connection and its
	// JetStream context.
	NC        *nats.Conn
	JetStream jetstream.JetStream
	// Ask is the requests user's connection.
	Ask *nats.Conn
}

// Close closes both connections. Call it after [Kit.Done].
func (c *Conn) Close() {
	c.NC.Close()
	if c.Ask != c.NC {
		c.Ask.Close()
	}
}

// Connect dials the bus at url (a comma-separated list for a cluster) as a
// provider's own bus users, from creds: the storage user's credentials
// file, "<module>.creds" in the directory `up` writes (DATA/auth) or `auth
// gen -o DIR` wrote, with the requests user's beside it in
// "mesh-requests/<module>.creds". Name is shown by the server (the
// module's name will do). Each connection is what the generated
// permissions expect of that user: replies on its own inbox prefix
// ("_INBOX_<user>"), watches whose consumers take the user's own names;
// it reconnects forever with backoff, finds a dead server within seconds,
// and says each permission the server refuses in log (nil means
// slog.Default()). With creds "" (a server without users, `up
// --no-auth`) one plain connection serves both. It returns an error when
// no server answers at url, the server refuses the credentials, or the
// requests user's file is missing.
func Connect(url, creds, name string, log *slog.Logger) (*Conn, error) {
	d := bus.Dial{URL: url, Name: name, Creds: creds, Log: log}
	nc, js, err := bus.Connect(d)
	if err != nil {
		return nil, err
	}
	if creds == "" {
		return &Conn{NC: nc, JetStream: js, Ask: nc}, nil
	}
	ask, err := bus.ConnectIn(d, access.Requests)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("kit: connect: %w", err)
	}
	return &Conn{NC: nc, JetStream: js, Ask: ask}, nil
}
