package assemble

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

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
	// Revoke revokes user at once (its old credentials refused by the
	// running servers): the user of a component whose module was
	// unplaced, once it has stopped. A later Issue that needs the user
	// again issues it a new key.
	Revoke(user string) error
}

// GenUsers is the [Users] of up's data directory: [auth.Gen] over Dir
// (the server's configuration, keys and credentials files) with StoreDir,
// run again on the live mesh at every change, and the accounts' JWTs
// pushed to the running server at URL when a user was revoked or had its
// permissions changed, so that old credentials are refused at once. A
// user added this way connects at once: its JWT is signed by the
// account's signing key, which the running server trusts.
type GenUsers struct {
	// Dir is the users' directory (DATA/auth).
	Dir string
	// StoreDir is the JetStream store directory Gen writes into the
	// configuration.
	StoreDir string
	// URL is the running server's (a comma-separated list for a
	// cluster), to which the accounts are pushed as the directory's
	// system user.
	URL string
	// Before, if set, is called before each Gen (up waits there for the
	// credentials files its first Gen left for later).
	Before func() error
	// Log receives the revocations said.
	Log *slog.Logger
}

// Issue runs [auth.Gen] over the parties of m, pushes the accounts when a
// user was revoked or narrowed, and returns the users Gen signed anew and
// those it revoked.
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
	res, err := auth.Gen(g.Dir, parties, auth.Options{StoreDir: g.StoreDir, Source: "the live mesh"})
	if err != nil {
		return nil, nil, fmt.Errorf("assemble: users: %w", err)
	}
	if len(res.Revoked)+len(res.Narrowed) > 0 {
		if err := g.push(res.Authority, res.Accounts); err != nil {
			return nil, nil, err
		}
		g.log().Info("assemble: accounts pushed: the old credentials of these users are refused", "revoked", res.Revoked, "narrowed", res.Narrowed)
	} else if len(res.AccountsSigned) > 0 {
		// The mesh grew past an account's bound of connections.
		if err := g.push(res.Authority, res.Accounts); err != nil {
			return nil, nil, err
		}
		g.log().Info("assemble: accounts pushed: their bounds follow the mesh", "accounts", res.AccountsSigned)
	}
	return slices.Clone(res.Signed), slices.Clone(res.Revoked), nil
}

// Revoke revokes user in the directory's account ([auth.Authority.Revoke])
// and pushes the accounts, unless it was revoked already.
func (g *GenUsers) Revoke(user string) error {
	a, err := auth.Open(g.Dir, auth.Options{StoreDir: g.StoreDir, Source: "the live mesh"})
	if err != nil {
		return fmt.Errorf("assemble: users: %w", err)
	}
	changed, err := a.Revoke(user)
	if err != nil || !changed {
		return err
	}
	jwts, err := a.Accounts()
	if err != nil {
		return fmt.Errorf("assemble: users: %w", err)
	}
	if err := g.push(a, jwts); err != nil {
		return err
	}
	g.log().Info("assemble: accounts pushed: the old credentials of this user are refused", "revoked", user)
	return nil
}

// push delivers the accounts' JWTs to the running server as a's system
// user.
func (g *GenUsers) push(a *auth.Authority, jwts []string) error {
	creds, err := a.SystemCreds()
	if err != nil {
		return fmt.Errorf("assemble: users: %w", err)
	}
	nc, _, err := bus.Connect(bus.Dial{URL: g.URL, Name: auth.PushUser, Creds: creds, Log: g.log()})
	if err != nil {
		return fmt.Errorf("assemble: users: push: %w", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.PushClaims(ctx, nc, jwts, 1); err != nil {
		return fmt.Errorf("assemble: users: push: %w", err)
	}
	return nil
}

func (g *GenUsers) log() *slog.Logger {
	if g.Log == nil {
		return slog.Default()
	}
	return g.Log
}

// RenewEvery is how often [KeepRenewed] renews a mesh's credentials
// files: a thirtieth of their life, so that each is renewed ten times
// before the third of its life that is left when it is due.
const RenewEvery = auth.DefaultExpiry / 30

// KeepRenewed renews the due credentials files of a every [RenewEvery]
// until ctx is done; a running component reads its renewed file when the
// server closes its connection at the old JWT's expiry. A failure is
// logged and tried again at the next tick.
func KeepRenewed(ctx context.Context, a *auth.Authority, log *slog.Logger) {
	t := time.NewTicker(RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		renewed, err := a.Renew()
		if err != nil {
			log.Error("up: renew credentials", "dir", a.Dir(), "err", err)
			continue
		}
		if len(renewed) > 0 {
			log.Info("up: credentials renewed", "dir", a.Dir(), "users", len(renewed))
		}
	}
}
