package access

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// Users of the product's own parties.
const (
	// SeatUser is the seat's NATS user.
	SeatUser = mesh.Module
	// RouterUser is the ask router's NATS user.
	RouterUser = "mesh-asks"
	// VaultUser is the vault's NATS user (also mesh-vault's module user).
	VaultUser = mesh.VaultModule
	// DefaultOperator is the operator's user when none is named.
	DefaultOperator = "operator"
)

// ClientUser returns the NATS user of node's client: "client-<node>".
func ClientUser(node string) string { return "client-" + node }

// ReservedModule says why name may not be a module's, or "" when it may:
// each module gets a bus user of its own name, so a module may not be
// named as the seat's or the ask router's user, the default operator's
// ([DefaultOperator]), or any node's client ("client-..."). (An operator
// named otherwise is known only where users are issued: [Parties] refuses
// a module of that name there.)
func ReservedModule(name string) string {
	switch name {
	case SeatUser:
		return "it is the seat's bus user"
	case RouterUser:
		return "it is the ask router's bus user"
	case DefaultOperator:
		return "it is the operator's bus user"
	}
	if strings.HasPrefix(name, "client-") {
		return `names beginning "client-" are the nodes' clients' bus users`
	}
	return ""
}

// Mesh is what the parties are made from: a mesh file's nodes, modules,
// placement and which modules keep entries, and the operators' names.
type Mesh struct {
	// Nodes lists the nodes; each gets a client.
	Nodes []string
	// Modules lists the modules; each gets its own user.
	Modules []string
	// Providers lists the modules that keep entries (their trunk
	// manifest's state names "bound"). mesh-vault always does.
	Providers []string
	// Placement holds the modules placed on each node.
	Placement map[string][]string
	// Operators names the operators' users; none means [DefaultOperator].
	Operators []string
	// Contributes holds, per module, the collections (their names,
	// unescaped) that its manifests contribute to: the collect keys
	// <node>.<collection>.<module> a client of a node it is placed on
	// writes.
	Contributes map[string][]string
	// Held holds, per node, the keys of applied and collect that the node
	// holds and its placement no longer gives it (a module moved away or
	// the node leaving, its client not yet done deleting them): its client
	// may still write them. Only a mesh read from the bus has them.
	Held map[string]HeldKeys
}

// HeldKeys are keys of a node held in applied and collect.
type HeldKeys struct {
	Applied, Collect []string
}

// Party is one NATS user of the mesh and the roles it has.
type Party struct {
	// User is the NATS user name; the party's inbox prefix is
	// "_INBOX_<User>" and its credentials file "<User>.creds".
	User string
	// Roles are the roles of the table the party has.
	Roles []Role
	// Module is the party's module (roles Module, Provider, Vault).
	Module string
	// Node is the client's node (role Client).
	Node string
	// mesh is the mesh the party belongs to, for the placeholders.
	mesh *Mesh
}

// Has reports whether the party has role r.
func (p Party) Has(r Role) bool { return slices.Contains(p.Roles, r) }

// Parties returns one party per user of m, sorted by user: the seat, the
// ask router, the vault, one per module (a provider when it keeps
// entries), one client per node and one per operator. It returns an error
// when a name is not valid or two parties would have the same user (a
// module named like a node's client, an operator named like a module).
func Parties(m Mesh) ([]Party, error) {
	mm := m
	mm.Providers = slices.Clone(m.Providers)
	if !slices.Contains(mm.Providers, VaultUser) {
		mm.Providers = append(mm.Providers, VaultUser)
	}
	sort.Strings(mm.Providers)
	if len(mm.Operators) == 0 {
		mm.Operators = []string{DefaultOperator}
	}
	byUser := map[string]*Party{}
	var errs []string
	add := func(p Party) {
		if !mesh.ValidName(p.User) {
			errs = append(errs, fmt.Sprintf("user %q is not a valid name (lower-case [a-z0-9][a-z0-9-]*)", p.User))
			return
		}
		if old, ok := byUser[p.User]; ok {
			errs = append(errs, fmt.Sprintf("user %q would be both %s and %s", p.User, describe(*old), describe(p)))
			return
		}
		p.mesh = &mm
		byUser[p.User] = &p
	}
	add(Party{User: SeatUser, Roles: []Role{Seat}})
	add(Party{User: RouterUser, Roles: []Role{Router}})
	vault := Party{User: VaultUser, Module: VaultUser, Roles: []Role{Module, Provider, Vault}}
	add(vault)
	for _, mod := range mm.Modules {
		switch mod {
		case VaultUser:
			continue
		case SeatUser, RouterUser:
			errs = append(errs, fmt.Sprintf("module %q has the name of one of the provisioner's own parties", mod))
			continue
		}
		p := Party{User: mod, Module: mod, Roles: []Role{Module}}
		if slices.Contains(mm.Providers, mod) {
			p.Roles = append(p.Roles, Provider)
		}
		add(p)
	}
	for _, n := range mm.Nodes {
		add(Party{User: ClientUser(n), Node: n, Roles: []Role{Client}})
	}
	for _, o := range mm.Operators {
		add(Party{User: o, Roles: []Role{Operator}})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("access: %s", strings.Join(errs, "; "))
	}
	out := make([]Party, 0, len(byUser))
	for _, p := range byUser {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	return out, nil
}

func describe(p Party) string {
	switch {
	case p.Has(Client):
		return "the client of " + p.Node
	case p.Has(Operator):
		return "an operator"
	case p.Module != "":
		return "the module " + p.Module
	}
	return string(p.Roles[0])
}

// Rules returns the party's rows of [Table] with every placeholder filled
// in: a row with [Placed], [PlacedProvider], [AnyProvider] or
// [Contributed] becomes one row per such module (or contribution), and a
// row with [HeldApplied] or [HeldCollect] one per key the node holds
// (none when there is none).
func (p Party) Rules() []Rule {
	var out []Rule
	// One replacer for every rule: it is built anew per call (a mesh of
	// 10,000 nodes has over 10,000 parties, each with about 30 rules).
	simple := strings.NewReplacer(Self, p.Module, Node, p.Node, User, p.User)
	for _, r := range Table {
		if !p.Has(r.Role) {
			continue
		}
		for _, x := range p.fill(r, simple) {
			if !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
	}
	return out
}

// fill returns r with the party's placeholders filled in: simple replaces
// Self, Node and User with the party's.
func (p Party) fill(r Rule, simple *strings.Replacer) []Rule {
	r.Target, r.Keys = simple.Replace(r.Target), simple.Replace(r.Keys)
	var each []string
	var hole string
	switch {
	case r.Keys == HeldApplied || r.Keys == HeldCollect:
		held := p.mesh.Held[p.Node]
		keys := held.Applied
		if r.Keys == HeldCollect {
			keys = held.Collect
		}
		out := make([]Rule, 0, len(keys))
		for _, k := range keys {
			if !strings.HasPrefix(k, p.Node+".") || strings.ContainsAny(k, "*> ") {
				continue // never a key of another node, nor a pattern
			}
			x := r
			x.Keys = k
			out = append(out, x)
		}
		return out
	case strings.Contains(r.Keys, Contributed):
		hole = Contributed
		for _, m := range p.placed() {
			for _, c := range p.mesh.Contributes[m] {
				each = append(each, token.Escape(c)+"."+token.Escape(m))
			}
		}
	case strings.Contains(r.Target, PlacedProvider):
		hole = PlacedProvider
		for _, m := range p.placed() {
			if slices.Contains(p.mesh.Providers, m) {
				each = append(each, m)
			}
		}
	case strings.Contains(r.Target, Placed), strings.Contains(r.Keys, Placed):
		hole, each = Placed, p.placed()
	case strings.Contains(r.Target, AnyProvider):
		hole, each = AnyProvider, p.mesh.Providers
	default:
		return []Rule{r}
	}
	out := make([]Rule, 0, len(each))
	for _, m := range each {
		x := r
		x.Target = strings.ReplaceAll(r.Target, hole, m)
		x.Keys = strings.ReplaceAll(r.Keys, hole, m)
		out = append(out, x)
	}
	return out
}

// placed returns the modules placed on the party's node.
func (p Party) placed() []string {
	if p.Node == "" {
		return nil
	}
	return p.mesh.Placement[p.Node]
}

// Allows reports whether the table lets the party do act on target (a
// bucket or a subject) and, for Write and Read, on key. It is the table's
// own answer, independent of the server: the tests compare the server's
// with it.
func (p Party) Allows(act Act, target, key string) bool {
	for _, r := range p.Rules() {
		if r.Act != act {
			continue
		}
		switch act {
		case Write, Read:
			if (r.Target == target || r.Target == AnyBucket) && Matches(r.Keys, key) {
				return true
			}
		case Make:
			if r.Target == target || r.Target == AnyBucket {
				return true
			}
		default:
			if Matches(r.Target, target) {
				return true
			}
		}
	}
	return false
}

// Matches reports whether the NATS subject (or key) s matches pattern,
// whose token "*" matches one token and a last token ">" one or more.
func Matches(pattern, s string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(s, ".")
	for i, t := range pt {
		if t == ">" && i == len(pt)-1 {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}

// MayBeOperator reports whether user may be an operator's user: it is none
// of the product's own parties' (the seat, the router, the vault) and no
// node's client's. A module's user cannot be told from its name alone.
func MayBeOperator(user string) bool {
	switch user {
	case SeatUser, RouterUser, VaultUser:
		return false
	}
	return !strings.HasPrefix(user, "client-")
}
