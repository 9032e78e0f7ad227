// Package assemble says what runs in a mesh, as which bus user and on which
// connection, and starts it. Every component (the seat, the ask router, the
// vault, the postgres provider, each node's client, and the operator's own
// connection in up) is a [Component]; a [Dialer] says how each one dials
// the bus (URL, connection name, credentials), so that each can connect as
// its own bus user; an [Assembly] dials one connection per component,
// waits for the buckets the component follows but another component makes
// (with backoff, said in the log), and starts it. up and the standalone
// subcommands (serve, router, vault, postgres, client) all start their
// components here, so that a subcommand only parses flags and prints.
//
// A whole mesh on one machine (up) is [Assembly.StartMesh]: the router,
// the seat, and a [Follower] of the live mesh, which starts a node's
// client, the vault and the postgres provider when the bus's placement
// places their node or module ([Wanted] says which), issues their users
// first ([Users], [GenUsers]) and stops them when they leave. [Data] says
// where a data directory keeps each part (store, users, client roots,
// vault stores) and the users its embedded server starts with.
package assemble

import (
	"fmt"
	"log/slog"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Role is what a component does in the mesh.
type Role string

// The roles of a mesh's components.
const (
	// Operator is the operator's own connection (up applies the mesh file
	// and reads what the seat keeps through it).
	Operator Role = "operator"
	// Seat is the provisioner's seat and its verb
	// mesh-provisioner.provisioning (module mesh-provisioner).
	Seat Role = "seat"
	// Router is the ask router (module mesh-asks).
	Router Role = "router"
	// Vault is mesh-vault on one node.
	Vault Role = "vault"
	// Postgres is the PostgreSQL provider (module postgres) on one node.
	Postgres Role = "postgres"
	// Client is one node's client.
	Client Role = "client"
)

// Component is one part of a mesh that runs on a bus connection of its
// own. Node is the node it runs for: required for [Vault], [Postgres] and
// [Client], empty for the others.
type Component struct {
	Role Role
	Node string
}

// Name returns the component's connection name, as the server shows it:
// "mesh-provisioner-seat", "mesh-asks", "mesh-vault", "postgres",
// "client-<node>" or "operator".
func (c Component) Name() string {
	switch c.Role {
	case Seat:
		return mesh.Module + "-seat"
	case Client:
		return "client-" + c.Node
	}
	if m := c.Module(); m != "" {
		return m
	}
	return string(c.Role)
}

// Module returns the module the component acts as on the bus
// ("mesh-provisioner", "mesh-asks", "mesh-vault", "postgres"), or "" for a
// node's client and the operator, which are no module.
func (c Component) Module() string {
	switch c.Role {
	case Seat:
		return mesh.Module
	case Router:
		return asks.Module
	case Vault:
		return mesh.VaultModule
	case Postgres:
		return pgprovider.Module
	}
	return ""
}

// String returns the component for the log: "seat", "vault on control",
// "client of ace".
func (c Component) String() string {
	switch {
	case c.Node == "":
		return string(c.Role)
	case c.Role == Client:
		return "client of " + c.Node
	}
	return fmt.Sprintf("%s on %s", c.Role, c.Node)
}

// Answers reports whether the component answers verbs (the seat, the ask
// router, the vault): it has a user in the services account.
func (c Component) Answers() bool {
	return c.Role == Seat || c.Role == Router || c.Role == Vault
}

// Asks reports whether the component asks verbs as it runs (the seat asks
// the ask router, the postgres provider and a node's client the vault): it
// has a user in the requests account.
func (c Component) Asks() bool { return c.Role == Seat || c.Role == Postgres || c.Role == Client }

// CheckUser returns an error when user (the name in the credentials the
// component is given) is not the component's own ([Component.User]), or,
// for the operator, whose user is any operator's, is one of the product's
// own parties or a node's client: a component started with another party's credentials is refused
// at once, with this message, rather than running with rights that are
// not its own (and waiting forever for reads the server refuses).
func (c Component) CheckUser(user string) error {
	switch {
	case user == "":
		return nil // no user JWT: the server refuses the connection, and says why
	case c.Role == Operator:
		if !access.MayBeOperator(user) {
			return fmt.Errorf("they are the user %q's, not an operator's", user)
		}
	case user != c.User():
		return fmt.Errorf("they are the user %q's; %s runs as %q", user, c, c.User())
	}
	return nil
}

// Awaits returns the buckets the component follows, all of which the seat
// process makes: its verb makes plans, provisions, refused, registry,
// applied and collect; the seat makes mesh-asks_records and, once the mesh
// places a provider that keeps entries, that provider's "<provider>_bound".
// The assembly waits for each to exist before it starts the component, so
// that a component started before the seat waits instead of following a
// missing bucket, and never needs the right to make one (with the users
// "auth gen" makes, only the seat and operators may).
func (c Component) Awaits() []string {
	switch c.Role {
	case Router:
		return []string{mesh.RecordsBucket}
	case Vault:
		return []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.BoundBucket(mesh.VaultModule)}
	case Postgres:
		return []string{mesh.ProvisionsBucket, mesh.BoundBucket(pgprovider.Module)}
	case Client:
		return []string{mesh.PlansBucket, mesh.RegistryBucket, mesh.AppliedBucket, mesh.CollectBucket}
	}
	return nil
}

// Dialer says how component c dials the bus: URL, connection name,
// credentials (Creds, or User and Password) and logger. It is called once
// for each component an [Assembly] starts. A Dialer that gives each
// component its own credentials makes each its own bus user.
type Dialer func(c Component) bus.Dial

// Shared returns a [Dialer] that dials url for every component, with the
// component's [Component.Name], the credentials file creds (none when
// empty), and log. It suits a standalone subcommand, which runs one
// component, and up without users.
func Shared(url, creds string, log *slog.Logger) Dialer {
	return func(c Component) bus.Dial {
		return bus.Dial{URL: url, Name: c.Name(), Creds: creds, Log: log}
	}
}

// Mesh returns what runs for a mesh file: the seat, the ask router, then,
// node by node in file order, mesh-vault and postgres where they are placed
// (in placement order), then a client per node in file order.
func Mesh(f *meshfile.File) []Component {
	out := []Component{{Role: Seat}, {Role: Router}}
	for _, node := range f.Nodes {
		for _, m := range f.Placement[node] {
			switch m {
			case mesh.VaultModule:
				out = append(out, Component{Role: Vault, Node: node})
			case pgprovider.Module:
				out = append(out, Component{Role: Postgres, Node: node})
			}
		}
	}
	for _, node := range f.Nodes {
		out = append(out, Component{Role: Client, Node: node})
	}
	return out
}
