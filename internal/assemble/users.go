package assemble

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// User returns the bus user component c connects as (package access): the
// seat "mesh-provisioner", the router "mesh-asks", the vault "mesh-vault",
// the postgres provider "postgres", a node's client "client-<node>", the
// operator's connection [access.DefaultOperator].
func (c Component) User() string {
	switch c.Role {
	case Client:
		return access.ClientUser(c.Node)
	case Operator:
		return access.DefaultOperator
	}
	return c.Module()
}

// UsersDialer returns a [Dialer] that connects each component to url as
// its own user ([Component.User]), with that user's credentials file in
// dir (as [auth.Gen] and "auth gen" write them).
func UsersDialer(url, dir string, log *slog.Logger) Dialer {
	return func(c Component) bus.Dial {
		return bus.Dial{URL: url, Name: c.Name(), Creds: auth.CredsPath(dir, c.User()), Log: log}
	}
}

// Users issues and revokes the bus users of a running mesh. A [Follower]
// calls Issue whenever the mesh changes, before it starts a component, so
// that every component it starts finds its credentials.
type Users interface {
	// Issue makes sure every party of m has its user with the permissions
	// m gives it (their credentials files written), and returns the users
	// whose credentials changed (new, or signed anew with other
	// permissions: a component running as one of them reconnects with the
	// new file) and the users revoked (parties no longer in m).
	Issue(m access.Mesh) (changed, revoked []string, err error)
}

// GenUsers is the [Users] of up's data directory: [auth.Gen] over Dir
// (the configuration, keys and credentials files) with StoreDir, run again
// on the live mesh at every change. A user added this way connects at
// once: its JWT is signed by the account's key, which the running server
// trusts.
type GenUsers struct {
	// Dir is the users' directory (DATA/auth).
	Dir string
	// StoreDir is the JetStream store directory Gen writes into the
	// configuration.
	StoreDir string
	// Before, if set, is called before each Gen (up waits there for the
	// credentials files its first Gen left for later).
	Before func() error
	// Log receives the revocations said.
	Log *slog.Logger
}

// Issue runs [auth.Gen] over the parties of m and returns the users whose
// credentials file holds other bytes than before, and those Gen revoked.
func (g *GenUsers) Issue(m access.Mesh) (changed, revoked []string, err error) {
	if g.Before != nil {
		if err := g.Before(); err != nil {
			return nil, nil, err
		}
	}
	parties, err := access.Parties(m)
	if err != nil {
		return nil, nil, err
	}
	before := make(map[string][]byte, len(parties))
	for _, p := range parties {
		b, _ := os.ReadFile(auth.CredsPath(g.Dir, p.User)) // a missing file is a new user
		before[p.User] = b
	}
	res, err := auth.Gen(g.Dir, parties, auth.Options{StoreDir: g.StoreDir, Source: "the live mesh"})
	if err != nil {
		return nil, nil, fmt.Errorf("assemble: users: %w", err)
	}
	for _, p := range parties {
		b, err := os.ReadFile(res.Creds[p.User])
		if err != nil {
			return nil, nil, fmt.Errorf("assemble: users: %w", err)
		}
		if !bytes.Equal(b, before[p.User]) {
			changed = append(changed, p.User)
		}
	}
	revokeNow(g.log(), res.Revoked)
	return changed, slices.Clone(res.Revoked), nil
}

func (g *GenUsers) log() *slog.Logger {
	if g.Log == nil {
		return slog.Default()
	}
	return g.Log
}

// revokeNow makes the revocation of users take effect on the running
// server. [auth.Gen] has revoked them in the account's JWT of the
// configuration, which the server reads when it starts; until the account
// is pushed to the running server (its resolver), their old credentials
// still connect, and it is said.
func revokeNow(log *slog.Logger, users []string) {
	if len(users) == 0 {
		return
	}
	log.Warn("assemble: users revoked in the configuration; the running server accepts their old credentials until it restarts",
		"users", users)
}
