// Package access states spec section 10 ("who may write what") as data:
// [Table] lists, per role, every act a party may do on the bus (write or
// read keys of a bucket, make a bucket, ask or answer a verb). [Parties]
// turns a mesh (its nodes, modules, placement and operators) into one party
// per NATS user, and [Party.Permissions] expands a party's rules into the
// exact NATS publish and subscribe subjects the server enforces. The same
// table gives the tests their rows: [Party.Allows] says whether a party may
// do an act, by the table alone.
//
// The package is pure: it opens no connection and signs nothing (package
// auth makes users and credentials from what it says).
package access

import (
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Role is what a party is in the mesh; a party has one or more roles (the
// vault's user is a module, a provider and the vault).
type Role string

// Roles of parties.
const (
	// Seat is the provisioner's seat (user "mesh-provisioner"): it alone
	// writes what the provisioner keeps.
	Seat Role = "seat"
	// Router is the ask router (user "mesh-asks").
	Router Role = "router"
	// Vault is mesh-vault's answerer of its verbs (user "mesh-vault").
	Vault Role = "vault"
	// Provider is a module whose trunk manifest's state names "bound": it
	// writes entries in its own bucket "<module>_bound".
	Provider Role = "provider"
	// Module is every module's own user (user "<module>"): it asks the vault
	// for its own secrets and credentials.
	Module Role = "module"
	// Client is a node's client (user "client-<node>").
	Client Role = "client"
	// Operator is an operator's user: applies the mesh file, reads
	// everything, answers asks under its own name.
	Operator Role = "operator"
)

// Act is a kind of use of the bus.
type Act string

// Acts a [Rule] grants.
const (
	// Write puts and deletes the keys matching a rule's Keys in its bucket.
	Write Act = "write"
	// Read watches and gets the keys matching a rule's Keys in its bucket.
	Read Act = "read"
	// Make creates the bucket.
	Make Act = "make"
	// Remove deletes a stream that is none of the mesh's buckets (Target
	// [AnyBucket]: any stream of the account), or a bucket's stream that
	// captures subjects besides its keys: only the seat's setup does, so
	// that a stream made before only the seat made streams (capturing an
	// inbox or a verb) does not stay for ever. The seat also deletes a
	// bucket's stream whose store the server lost, to make it again
	// (bus.ErrStoreLost, bus.Mend).
	Remove Act = "remove"
	// Ask sends requests on the subject (and gets the replies in the
	// party's own inbox).
	Ask Act = "ask"
	// Answer subscribes to the subject and replies to its requests.
	Answer Act = "answer"
)

// Placeholders that a [Rule]'s Target and Keys may hold; [Party.Rules]
// fills them in for one party.
const (
	// Self is the party's module (for the roles Provider, Module, Vault).
	Self = "<self>"
	// Node is the client's node.
	Node = "<node>"
	// User is the party's NATS user name.
	User = "<user>"
	// Placed stands for each module placed on the client's node: the rule is
	// made once per such module.
	Placed = "<placed>"
	// PlacedProvider stands for each provider placed on the client's node.
	PlacedProvider = "<placed-provider>"
	// AnyProvider stands for each provider of the mesh.
	AnyProvider = "<provider>"
	// Contributed, in Keys, stands for each "<collection>.<module>" (both
	// escaped, as in a collect key) of a module placed on the client's
	// node and a collection the module's manifests contribute to
	// ([Mesh.Contributes]).
	Contributed = "<contributed>"
	// HeldApplied and HeldCollect, as Keys, stand for each key of applied
	// and of collect that the client's node holds and that its placement
	// no longer names ([Mesh.Held]): its client may still delete them.
	HeldApplied = "<held-applied>"
	HeldCollect = "<held-collect>"
	// AnyBucket as a Target of Read or Make is every bucket of the account.
	AnyBucket = "*"
	// AllKeys as Keys is every key of the bucket.
	AllKeys = ">"
)

// Rule is one row of the table: a party with Role may do Act on Target (a
// bucket for Write, Read and Make; a subject for Ask and Answer), for
// Write and Read only on the keys matching Keys (a NATS pattern of key
// tokens: "<node>.>" is every key of the node).
type Rule struct {
	Role   Role
	Act    Act
	Target string
	Keys   string
}

// ConfigBucket is mesh-config's bucket of resolved configuration values,
// key <node>.<module>.<name>: node clients read their node's keys to render.
const ConfigBucket = "mesh-config_resolved"

// Subjects of the verbs the table names (the ask router's, the vault's and
// the provisioner's); they are the subjects those components use. A verb
// whose answer depends on who asks ends in the asker's user name
// ([User]): the vault's "mesh-vault.secret.<module>.<asker>" and
// "mesh-vault.consumers.<provider>.<asker>", the router's
// "mesh-asks.answer.<user>", the seat's watches ([WatchVerb]). The
// server's publish permission pins that token to the user who sent the
// request, which the header Nats-Request-Info does not: an asker may write
// a header block the server appends its own line to, past where nats.go
// stops reading (docs/trust.md).
const (
	AsksOfSeat       = "asks." + mesh.Module
	AsksWildcard     = "asks.*"
	AnswerWildcard   = "mesh-asks.answer.*"
	AnswerOfUser     = "mesh-asks.answer." + User
	WithdrawWildcard = "mesh-asks.withdraw.*"
	WithdrawOfSeat   = "mesh-asks.withdraw." + mesh.Module
	ListAsks         = "mesh-asks.list"
	SecretWildcard   = "mesh-vault.secret.*.*"
	SecretOfSelf     = "mesh-vault.secret." + Self + "." + User
	SecretOfPlaced   = "mesh-vault.secret." + Placed + "." + User
	ConsumersWild    = "mesh-vault.consumers.*.*"
	ConsumersOfSelf  = "mesh-vault.consumers." + Self + "." + User
	ConsumersPlaced  = "mesh-vault.consumers." + PlacedProvider + "." + User
	Rotate           = "mesh-vault.rotate"
	Provisioning     = mesh.ProvisioningSubject
	Unkeep           = mesh.UnkeepSubject // the seat's verb that clears a kept no: operators only
)

// BoundOf is the Target of a provider's bucket "<provider>_bound" for the
// placeholder provider (Self or AnyProvider).
func BoundOf(provider string) string { return mesh.BoundBucket(provider) }

// seatKeeps are the buckets the seat alone writes (spec 2.2 and 10): its
// states, its lease, and the retired needs state whose leftovers it
// deletes.
var seatKeeps = []string{mesh.RegistryBucket, mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket,
	mesh.SeatBucket, mesh.NeedsBucket}

// SeatKeeps reports whether the seat alone writes bucket ([Table]): its
// states (registry, plans, provisions, refused), its lease, the needs
// state.
func SeatKeeps(bucket string) bool {
	for _, b := range seatKeeps {
		if b == bucket {
			return true
		}
	}
	return false
}

// seatMakes are the buckets the seat makes when they are missing: those
// it keeps, those it follows (every provider's entries among them), and
// those others write (the operators' from the mesh file, the router's
// records, the clients' applied, collect and leases, and mesh-config's
// resolved values, which the clients read). No other party
// makes a bucket or a stream: a maker chooses its stream's subjects, and
// could take another's (an inbox, a verb) or fill the account.
var seatMakes = append(append(append([]string{}, seatKeeps...), operatorWrites...),
	mesh.RecordsBucket, mesh.AppliedBucket, mesh.CollectBucket, mesh.ClientsBucket, ConfigBucket, BoundOf(AnyProvider))

// Buckets returns the buckets the seat makes, but the providers' entries
// (one "<provider>_bound" per provider, made as providers appear): what a
// mesh's setup makes before anything runs.
func Buckets() []string {
	var out []string
	for _, b := range seatMakes {
		if b != BoundOf(AnyProvider) {
			out = append(out, b)
		}
	}
	return out
}

// operatorWrites are the buckets an operator's apply writes from the mesh
// file (spec 9).
var operatorWrites = []string{mesh.PlacementBucket, mesh.WantsBucket, mesh.ModulesBucket, mesh.ManifestsBucket,
	mesh.BuildsBucket, mesh.HaveBucket}

// Table is spec section 10 as data: every act each role may do. Anything
// not in it is refused by the server. Read it as "a <role> may <act>
// <target> [keys]".
var Table = join(
	// The seat: it alone writes registry, plans, provisions, refused and
	// its lease; it reads every bucket (the entries of every provider, with
	// no fixed list); it makes the buckets it follows; it raises and
	// withdraws its asks; it answers the read-only verb, the operators'
	// unkeep and the scoped parties' watches (see WatchVerb).
	each(seatKeeps, func(b string) Rule { return Rule{Seat, Write, b, AllKeys} }),
	each(seatMakes, func(b string) Rule { return Rule{Seat, Make, b, ""} }),
	[]Rule{
		{Seat, Read, AnyBucket, AllKeys},
		{Seat, Remove, AnyBucket, ""},
		{Seat, Ask, AsksOfSeat, ""},
		{Seat, Ask, WithdrawOfSeat, ""},
		{Seat, Answer, Provisioning, ""},
		{Seat, Answer, Unkeep, ""},
		{Seat, Answer, WatchWildcard, ""},
	},
	// The ask router: its records, and the verbs every module and
	// operator sends it.
	[]Rule{
		{Router, Write, mesh.RecordsBucket, AllKeys},
		{Router, Read, mesh.RecordsBucket, AllKeys},
		{Router, Answer, AsksWildcard, ""},
		{Router, Answer, AnswerWildcard, ""},
		{Router, Answer, WithdrawWildcard, ""},
		{Router, Answer, ListAsks, ""},
	},
	// The vault answers its verbs; the subject names the module it answers
	// for and, last, the asker, which the table pins to the asker's user.
	// It reads the clients' applied records: a rotated credential comes in
	// force once its consumer's node says it rendered it.
	[]Rule{
		{Vault, Answer, SecretWildcard, ""},
		{Vault, Answer, ConsumersWild, ""},
		{Vault, Answer, Rotate, ""},
		{Vault, Read, mesh.AppliedBucket, AllKeys},
	},
	// A provider writes its own entries only, and reads plans and
	// provisions (never writes them); it asks the vault for its consumers'
	// credentials.
	[]Rule{
		{Provider, Write, BoundOf(Self), AllKeys},
		{Provider, Read, BoundOf(Self), AllKeys},
		{Provider, Read, mesh.PlansBucket, AllKeys},
		{Provider, Read, mesh.ProvisionsBucket, AllKeys},
		{Provider, Ask, ConsumersOfSelf, ""},
	},
	// Every module asks the vault for its own secrets and credentials.
	[]Rule{
		{Module, Ask, SecretOfSelf, ""},
	},
	// A node's client writes only the exact keys its node's modules have:
	// applied <node>.<module> of each module placed on its node, collect
	// <node>.<collection>.<module> of each collection such a module's
	// manifests contribute to, the keys its node still holds of modules
	// no longer placed there (to delete them), and its node's lease in
	// mesh-provisioner_clients (key <node>). With history 1 and the
	// buckets' value bound, a client holds at most that many values there
	// (see BucketLimits). It reads its node's plans, provisions, applied
	// and collect keys, the registry, its node's keys of every provider's
	// entries and of mesh-config (to render), and asks the vault for the
	// modules placed on its node (to render their configuration).
	[]Rule{
		{Client, Write, mesh.AppliedBucket, Node + "." + Placed},
		{Client, Write, mesh.CollectBucket, Node + "." + Contributed},
		{Client, Write, mesh.AppliedBucket, HeldApplied},
		{Client, Write, mesh.CollectBucket, HeldCollect},
		{Client, Read, mesh.AppliedBucket, Node + ".>"},
		{Client, Read, mesh.CollectBucket, Node + ".>"},
		{Client, Write, mesh.ClientsBucket, Node},
		{Client, Read, mesh.ClientsBucket, Node},
		{Client, Read, mesh.PlansBucket, Node + ".>"},
		{Client, Read, mesh.ProvisionsBucket, Node + ".>"},
		{Client, Read, mesh.RegistryBucket, AllKeys},
		{Client, Read, BoundOf(AnyProvider), Node + ".>"},
		{Client, Read, ConfigBucket, Node + ".>"},
		{Client, Ask, SecretOfPlaced, ""},
		{Client, Ask, ConsumersPlaced, ""},
	},
	// An operator applies the mesh file, reads everything (and makes no
	// bucket: the seat makes them),
	// answers asks under its own name, lists them, rotates credentials and
	// asks the read-only verb.
	each(operatorWrites, func(b string) Rule { return Rule{Operator, Write, b, AllKeys} }),
	[]Rule{
		{Operator, Read, AnyBucket, AllKeys},
		{Operator, Ask, AnswerOfUser, ""},
		{Operator, Ask, ListAsks, ""},
		{Operator, Ask, Rotate, ""},
		{Operator, Ask, Provisioning, ""},
		{Operator, Ask, Unkeep, ""},
	},
)

func join(parts ...[]Rule) []Rule {
	var out []Rule
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func each(buckets []string, rule func(string) Rule) []Rule {
	out := make([]Rule, len(buckets))
	for i, b := range buckets {
		out[i] = rule(b)
	}
	return out
}
