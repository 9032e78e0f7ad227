// Package pgprovider is the PostgreSQL provider (module "postgres"), built
// on the provider kit (package kit) with pgx.
//
// For each needed "database" provision whose provider is postgres on its
// node (keys <node>.<consumer>.database[.<local>]) it makes, on the server
// its DSN names:
//
//   - a role for the consumer, named by [RoleName] from the mesh's name
//     ([Config].Mesh) and the key's node, consumer and local
//     ("<mesh>_<node>_<consumer>[_<local>]"; deterministic, within
//     PostgreSQL's 63 bytes), that
//     logs in with the consumer's own credential: the value the vault
//     answers the provider on "mesh-vault.consumers.postgres.postgres" for the
//     credential key the provision depends on. The password is sent as a
//     SCRAM-SHA-256 verifier, never in the clear;
//   - a database of the same name, owned by that role, that PUBLIC may not
//     connect to.
//
// Both carry the mesh's mark ([Mark]: COMMENT ON ROLE and ON DATABASE,
// naming the mesh and the key), checked before any change: a role or
// database of the name that does not carry it (made by hand, or by another
// mesh) is never taken; the key fails with a [*NotOursError] naming it and
// why. So meshes sharing one server never meet, as long as their names
// differ.
//
// Both are made only when missing (a restart creates nothing twice). A
// database that another role owns (the owner role, after the consumer's
// role retired on the operator's yes) is handed back to the role whole:
// inside it, every schema, table, view, sequence, routine, type and large
// object that role owns outside the system schemas is given to the
// consumer's role (one transaction), then the database itself. The
// password is set on every provide, so a rotated credential (a new
// generation in the credential's reference) changes it. The entry is
// provided with the credential's vault name and generation; a statement
// PostgreSQL refuses is failed with PostgreSQL's own message as why (tried
// again with backoff); a server that cannot be reached is waits, tried
// again with backoff until it answers.
//
// The entry's connection names the address consumers reach the server at:
// [Config].Advertise ("host:port"; postgres --advertise), else the DSN's
// host and port. A loopback address (127.0.0.0/8, ::1, localhost, a Unix
// socket) is refused to a consumer on another node than the provider's,
// unless [Config].OneMachine says every node runs on this machine (up): its
// key fails, naming the address and how to give another, and nothing is
// made for it.
//
// Every [Config].Check (a minute) the roles of the provided keys are read
// from pg_authid (one query) and the vault is asked for their credentials
// (one ask): a role dropped, made NOLOGIN, or whose password was removed or
// changed outside the product (its SCRAM verifier does not match the value
// the consumer was given; no password is kept beside the vault's) is said
// in its key, failed with a why naming the role, what changed and the
// credential, and the next try (with backoff) sets the role again as it
// was handed out: LOGIN and the same value, the same generation, so the
// consumer's configuration stays right. A key whose credential the vault
// holds at a newer generation is left to the provide of the rotation.
//
// On the operator's "yes" the role is shut out first (NOLOGIN, its password
// removed) and its sessions are ended, so the removed consumer logs in no
// more whatever follows; then, in every database of the server where it
// owns objects or holds privileges (pg_shdepend names them), and in the
// DSN's database, what it owns is handed to the owner role (REASSIGN OWNED:
// the DSN's user unless [Config].Owner names another; its database too) and
// what was granted to it is dropped (DROP OWNED), and the role is dropped.
// The database and its data stay. When DROP ROLE is still refused (a
// database that allows no connections, or one the DSN's role may not
// enter), the retire fails with a [*RetireError] naming each database not
// handed over and why, which the kit writes as the entry's why (the
// retiring key says it) and tries again with backoff.
package pgprovider
