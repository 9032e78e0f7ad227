package access

import (
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Limits are what the server lets one connection of a party's user hold
// (the user JWT's limits; nats-server 2.15 enforces both per connection):
// a subscription past Subs is refused with "maximum subscriptions
// exceeded" (the connection stays), a message over Payload bytes (headers
// included) closes the connection with "Maximum Payload Violation" (the
// server tells each connection its bound in its INFO, and nats.go refuses
// such a publish itself: nats.ErrMaxPayload). NATS has no bound on one
// user's connections: [AccountLimitsOf] bounds each account's.
type Limits struct {
	Subs    int64
	Payload int64
}

// Bounds of [Party.LimitsIn]: what a party's real work holds, with
// headroom. A component holds per bucket it follows a watch's inbox and
// the bucket's stream advisories (package bus), each once more while a
// watch is made anew or a connection restores them; per verb it answers
// one subscription; and a few inboxes besides (nats.go's request inbox,
// replies in flight). `up` on the homelab mesh holds 44 subscriptions on
// the seat's storage connection (22 buckets), 9 on a node's client's, 10 on
// the vault's.
const (
	// SubsBase is every connection's share: inboxes and replies.
	SubsBase = 64
	// SubsPerBucket is what one bucket followed (read, written or made)
	// may hold on a storage connection.
	SubsPerBucket = 8
	// SubsPerVerb is what one verb answered, or imported, may hold.
	SubsPerVerb = 2
	// PayloadRequest bounds a message of a party that writes no value:
	// JetStream API requests (a consumer's or stream's configuration);
	// a writer's values may have it beside their bound (headers).
	PayloadRequest = 64 << 10
)

// LimitsIn returns the limits of the party's user in account acc: its
// subscriptions ([SubsBase], and [SubsPerBucket] per bucket it follows in
// [Storage], or [SubsPerVerb] per verb it answers in [Services] or per
// verb imported in [Requests], where a leafnode link of an edge node
// carries the imports' subscriptions too), rounded up to a power of two so
// that the mesh gaining a provider signs a party anew only when the bound
// doubles; and its payload: in Storage [PayloadRequest] and the value
// bound of the largest bucket it writes ([BucketLimits]), so that a value
// over its bucket's bound is still the stream's to refuse; in
// Services [MaxValue], an answer (the seat's provisioning verb answers a
// node's entries); in Requests [MaxSharedValue], an ask (the router keeps
// the seat's asks as values of that bound), and [MaxVaultRequest] for a
// party that asks only the vault's secret and consumers verbs.
func (p Party) LimitsIn(acc Account) Limits {
	switch acc {
	case Services:
		answers := 0
		for _, r := range p.Rules() {
			if r.Act == Answer {
				answers++
			}
		}
		return Limits{Subs: powerOfTwo(SubsBase + SubsPerVerb*answers), Payload: MaxValue}
	case Requests:
		subs := powerOfTwo(SubsBase + SubsPerVerb*len(Verbs()))
		if p.asksTheVaultOnly() {
			return Limits{Subs: subs, Payload: MaxVaultRequest}
		}
		return Limits{Subs: subs, Payload: MaxSharedValue}
	}
	var value int64
	var buckets []string
	for _, r := range p.Rules() {
		if r.Act != Read && r.Act != Write && r.Act != Make {
			continue
		}
		targets := []string{r.Target}
		if r.Target == AnyBucket {
			targets = p.everyBucket()
		}
		for _, b := range targets {
			if !slices.Contains(buckets, b) {
				buckets = append(buckets, b)
			}
			if r.Act == Write {
				_, maxValue := BucketLimits(b)
				value = max(value, int64(maxValue))
			}
		}
	}
	return Limits{Subs: powerOfTwo(SubsBase + SubsPerBucket*len(buckets)), Payload: PayloadRequest + value}
}

// MaxVaultRequest is the payload bound in [Requests] of a party that asks
// only the vault's secret and consumers verbs (every module, provider and
// node's client), in bytes: such a request is a key and a node, a few
// hundred bytes (a key of five names of [meshfile.MaxName] escaped fits),
// so that a flood of them makes the server hold for the vault's one
// connection a few KiB a request, not [MaxSharedValue] (60 KB requests of
// one client filled the 64 MiB the server holds for a connection, and it
// cut the vault as a slow consumer).
const MaxVaultRequest = 4 << 10

// VaultAnswerWithin is the response threshold of the vault's secret and
// consumers verbs (the [Services] account's exports of [SecretWildcard]
// and [ConsumersWild]): the server keeps the mapping of such a request's
// reply at least that long and at most twice as long (it sweeps once per
// threshold), then forgets it, so that an answer later than that reaches
// no one. Their askers wait 5 s (a node's client, the postgres
// provider's default). nats-server's default, 2 min, kept every request
// the vault drops in a flood that long: about 1.3 KB of the server's
// memory a request (scripts/vaultflood: 293 MiB after 40 s of one
// client's flood).
const VaultAnswerWithin = 10 * time.Second

// AnsweredWithin returns the response threshold of the export of verb (one
// of [Verbs]): [VaultAnswerWithin] for the vault's secret and consumers
// verbs, 0 (the server's default, 2 min) for the others, whose answers may
// wait on a disk or an operator.
func AnsweredWithin(verb string) time.Duration {
	if verb == SecretWildcard || verb == ConsumersWild {
		return VaultAnswerWithin
	}
	return 0
}

// asksTheVaultOnly reports whether every verb the party asks is the
// vault's secret or consumers verb, and it asks one.
func (p Party) asksTheVaultOnly() bool {
	asks := 0
	for _, r := range p.Rules() {
		if r.Act != Ask {
			continue
		}
		if !strings.HasPrefix(r.Target, secretPrefix) && !strings.HasPrefix(r.Target, consumersPrefix) {
			return false
		}
		asks++
	}
	return asks > 0
}

// The subjects of the vault's verbs a module or a node's client asks.
const (
	secretPrefix    = "mesh-vault.secret."
	consumersPrefix = "mesh-vault.consumers."
)

// everyBucket returns the mesh's buckets: [Buckets] and each provider's
// entries.
func (p Party) everyBucket() []string {
	out := Buckets()
	for _, m := range p.mesh.Providers {
		out = append(out, mesh.BoundBucket(m))
	}
	return out
}

// AccountLimits are what one account's users hold together, on every
// server of a cluster at once (the account JWT's limits): a connection past
// Conns is refused with "maximum account active connections exceeded", a
// leafnode link past Leafs likewise.
type AccountLimits struct {
	Conns, Leafs int64
}

// Bounds of [AccountLimitsOf].
const (
	// ConnsPerInstance is how many connections one running instance of a
	// party may hold in an account: its component's, and commands or a
	// reconnection beside it (an old connection is closed a little after
	// its new one is made).
	ConnsPerInstance = 4
	// ConnsSpare is every account's room beyond its parties' instances.
	ConnsSpare = 64
	// LeafsPerNode is how many leafnode links one node's leaf server may
	// hold in an account (one per link, and one more while it is made
	// anew).
	LeafsPerNode = 2
)

// AccountLimitsOf returns the limits of account acc for a mesh of parties
// ([Parties]): [ConnsSpare] and [ConnsPerInstance] connections per instance
// of each party with a user in acc (a module runs on every node it is
// placed on, any other party once), and [LeafsPerNode] leafnode links per
// node (each node may run a leaf server of its own, linking each account
// its client has) with [ConnsSpare] besides; each rounded up to a power of
// two, so that `node join` signs the accounts anew only when a bound
// doubles. Any one party may take the whole spare of its account: NATS has
// no bound per user (docs/trust.md).
func AccountLimitsOf(parties []Party, acc Account) AccountLimits {
	instances, nodes := 0, 0
	for _, p := range parties {
		if p.Has(Client) {
			nodes++
		}
		if !slices.Contains(p.Accounts(), acc) {
			continue
		}
		instances += p.instances()
	}
	return AccountLimits{
		Conns: powerOfTwo(ConnsSpare + ConnsPerInstance*instances),
		Leafs: powerOfTwo(ConnsSpare + LeafsPerNode*nodes),
	}
}

// SystemLimits returns the limits of the system account for a mesh of
// parties: [ConnsSpare] and [ConnsPerInstance] connections per operator
// (its system user) and for the pushing user, rounded up to a power of
// two; its leafnode links as [AccountLimitsOf] says. The servers' own
// connections to it are not counted.
func SystemLimits(parties []Party) AccountLimits {
	users, nodes := 1, 0
	for _, p := range parties {
		if p.Has(Operator) {
			users++
		}
		if p.Has(Client) {
			nodes++
		}
	}
	return AccountLimits{
		Conns: powerOfTwo(ConnsSpare + ConnsPerInstance*users),
		Leafs: powerOfTwo(ConnsSpare + LeafsPerNode*nodes),
	}
}

// instances returns how many instances of the party run at once: a
// module one per node it is placed on (at least one), any other party
// one.
func (p Party) instances() int {
	if p.Module == "" {
		return 1
	}
	n := 0
	for _, mods := range p.mesh.Placement {
		if slices.Contains(mods, p.Module) {
			n++
		}
	}
	return max(n, 1)
}

// powerOfTwo returns the least power of two at or above n (n > 0).
func powerOfTwo(n int) int64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// ConsumerInactive bounds how long a bucket's stream keeps a consumer that
// nothing subscribes to (its consumer_limits.inactive_threshold, set by
// package bus): a consumer asking a longer threshold is refused, and one
// asking none takes this. The scoped parties' watches ask 2 s, the
// library's watches (the seat's, the operators') none. See docs/trust.md
// for the consumers it bounds and what it does not.
const ConsumerInactive = 30 * time.Second
