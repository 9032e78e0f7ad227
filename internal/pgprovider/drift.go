package pgprovider

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// checked is one provided key as the drift check reads it: its role, and
// the credential it was provided with (its vault key and generation).
type checked struct {
	key        string
	role       string
	credential string
	generation int64
}

// checkLoop runs the drift check every cfg.Check until ctx is done.
func (p *Provider) checkLoop(ctx context.Context) {
	select {
	case <-p.kit.Ready():
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(p.cfg.Check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.check(ctx)
		}
	}
}

// check finds the provided keys whose role no longer takes the credential
// handed to the consumer, changed outside the product: the role dropped,
// made NOLOGIN, its password removed or changed (its SCRAM verifier in
// pg_authid does not match the vault's value), or its database dropped.
// Each such key is marked (drift) and handled again: its provide fails,
// saying what changed, and the next try sets the role as it was handed out
// (the same credential, the same generation); until it is provided again
// the check passes it by. It costs one query and one
// ask of the vault for all of the provider's provided keys; a key whose
// credential the vault now answers at another generation than the key's
// reference is left to the provide the kit makes of it (a rotation).
func (p *Provider) check(ctx context.Context) {
	var keys []checked
	p.kit.Ours(func(key string, prov mesh.Provision) bool {
		if prov.State != mesh.Provided || prov.Reference == nil {
			return true
		}
		pk, err := mesh.ParseProvisionKey(key)
		if err != nil || pk.Provision != Provision {
			return true
		}
		for _, d := range prov.DependsOn {
			if dk, err := mesh.ParseProvisionKey(d); err == nil && dk.Provision == mesh.CredentialProvision {
				keys = append(keys, checked{key: key, role: RoleName(p.cfg.Mesh, pk), credential: d, generation: prov.Reference.Generation})
				break
			}
		}
		return true
	})
	if len(keys) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	conn, err := p.connect(actx, "")
	if err != nil {
		p.log.Debug("postgres: drift check: the server did not answer", "err", err)
		return
	}
	defer conn.Close(context.Background())
	names := make([]string, len(keys))
	for i, c := range keys {
		names[i] = c.role
	}
	type role struct {
		login    bool
		verifier *string
		hasDB    bool
	}
	roles := map[string]role{}
	rows, err := conn.Query(actx, `SELECT a.rolname::text, a.rolcanlogin, a.rolpassword,
		EXISTS (SELECT 1 FROM pg_database d WHERE d.datname = a.rolname)
		FROM pg_authid a WHERE a.rolname = ANY($1)`, names)
	if err == nil {
		for rows.Next() {
			var name string
			var r role
			if err = rows.Scan(&name, &r.login, &r.verifier, &r.hasDB); err != nil {
				break
			}
			roles[name] = r
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42501" {
			p.unchecked.Do(func() {
				p.log.Warn("postgres: passwords changed outside mesh-provisioner are not found: the DSN's role may not read pg_authid (a superuser may)", "err", err)
			})
			return
		}
		p.log.Debug("postgres: drift check failed", "err", err)
		return
	}
	// The vault is asked after the roles are read: a rotation sets the
	// role's new password only once the vault holds the new generation, so
	// a value answered now at the key's generation is the one the role
	// held when it was read.
	a, err := kit.AskConsumers(actx, p.nc, Module, kit.VaultRequest{})
	if err != nil {
		p.log.Debug("postgres: drift check: the vault did not answer", "err", err)
		return
	}
	values := map[string]kit.Credential{}
	for _, c := range a.Credentials {
		values[c.Key] = c
	}
	for _, c := range keys {
		v, ok := values[c.credential]
		if !ok || v.Generation != c.generation || p.drifting(c.key) {
			continue
		}
		r, ok := roles[c.role]
		var why string
		switch {
		case !ok:
			why = whyRoleDropped(c.role, v)
		case !r.login:
			why = whyRoleNoLogin(c.role, v)
		case r.verifier == nil:
			why = whyPasswordRemoved(c.role, v)
		case !scramMatches(*r.verifier, v.Value):
			why = whyPasswordChanged(c.role, v)
		case !r.hasDB:
			why = whyDatabaseDropped(c.role)
		default:
			continue
		}
		// Still provided as it was read: not retired or provided anew
		// meanwhile.
		if now, ok := p.kit.Provision(c.key); !ok || now.State != mesh.Provided || now.Reference == nil || now.Reference.Generation != c.generation {
			continue
		}
		p.mu.Lock()
		p.drift[c.key] = drift{why: why}
		p.mu.Unlock()
		p.log.Warn("postgres: a role was changed outside mesh-provisioner; its key fails, then it is set back", "key", c.key, "role", c.role, "why", why)
		p.kit.Again(c.key)
	}
}

// drift is what the check found changed outside the product for a key,
// and whether a provide has said it (failed the key with why): the next
// provide mends it, and the key's drift is forgotten once it is provided.
// While a key has one the check passes it by, so that a change is said
// once.
type drift struct {
	why  string
	said bool
}

// sayDrift returns the why of key's drift when no provide has said it yet,
// and marks it said.
func (p *Provider) sayDrift(key string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.drift[key]
	if !ok || d.said {
		return "", false
	}
	p.drift[key] = drift{why: d.why, said: true}
	return d.why, true
}

// forgetDrift forgets key's drift: it is mended (provided again), or its
// role goes.
func (p *Provider) forgetDrift(key string) {
	p.mu.Lock()
	delete(p.drift, key)
	p.mu.Unlock()
}

// drifting reports whether key has a drift not yet mended.
func (p *Provider) drifting(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.drift[key]
	return ok
}
