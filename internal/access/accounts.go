package access

import (
	"slices"
	"sort"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Account is one of the mesh's NATS accounts. A party has a user in each
// account where it has rules ([Party.Accounts]): what one account's user
// may do reaches nothing of another account but the verbs the services
// account exports.
type Account string

// The mesh's accounts.
const (
	// Storage holds JetStream and every bucket of the mesh: a party's
	// writes, reads and makes ([Write], [Read], [Make]). It imports and
	// exports nothing, and no user of it may reply to requests: nothing
	// in it answers verbs.
	Storage Account = "mesh"
	// Services holds the responders of the verbs ([Answer]): it exports
	// each verb subject as a service, answered once. It has no JetStream.
	// Its users subscribe to their verbs and reply only to the requests
	// delivered to them, whose reply subjects the server has rewritten
	// ("_R_..."): a responder publishes nowhere else.
	Services Account = "mesh-services"
	// Requests holds the askers of the verbs ([Ask]): it imports every
	// verb the services account exports, sharing the asker's identity
	// with the responder (the header Nats-Request-Info: account and user,
	// set by the server). It has no JetStream and no bucket, so that an
	// answer sent to a reply subject the asker chose (a "$KV." or
	// "$JS.API." subject) lands where nothing acts on it: the answer of a
	// service import is delivered in the importing account.
	Requests Account = "mesh-requests"
)

// Accounts lists the mesh's accounts, storage first.
var Accounts = []Account{Storage, Services, Requests}

// accountOf returns the account of a rule's act: [Requests] for [Ask],
// [Services] for [Answer], [Storage] for the others.
func accountOf(a Act) Account {
	switch a {
	case Ask:
		return Requests
	case Answer:
		return Services
	}
	return Storage
}

// Accounts returns the accounts the party has a user in: [Storage]
// always (its buckets, or at least its inbox), then [Services] when it
// answers a verb and [Requests] when it asks one, the seat's watches
// among them ([Party.ScopedReader]). A node's client and a module always
// have a user in Requests, since their components dial it whenever they
// start: a client of a node where nothing is placed yet (and a module
// that asks nothing) is denied every subject there but its watches, and
// its user is signed anew with its asks once it has some.
func (p Party) Accounts() []Account {
	out := []Account{Storage}
	if p.Has(Client) || p.Has(Module) || p.ScopedReader() {
		out = append(out, Requests)
	}
	// An account is the party's once one of its rows there fills to a rule
	// (as [Party.Rules] has it): each row is filled only while its account
	// is not yet found, not every rule of the party (the cost of Rules,
	// paid per party of a mesh of 10,000 nodes by [AccountLimitsOf]).
	var simple *strings.Replacer
	for _, r := range Table {
		a := accountOf(r.Act)
		if !p.Has(r.Role) || slices.Contains(out, a) {
			continue
		}
		if simple == nil {
			simple = strings.NewReplacer(Self, p.Module, Node, p.Node, User, p.User)
		}
		if len(p.fill(r, simple)) > 0 {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return slices.Index(Accounts, out[i]) < slices.Index(Accounts, out[j]) })
	return out
}

// Verbs returns the subjects of every verb of [Table] (the targets of its
// [Answer] rules), sorted: what the services account exports and the
// requests account imports.
func Verbs() []string {
	var out []string
	for _, r := range Table {
		if r.Act == Answer && !slices.Contains(out, r.Target) {
			out = append(out, r.Target)
		}
	}
	sort.Strings(out)
	return out
}

// Bounds of the buckets' streams (see [BucketLimits]), in bytes. Every
// bucket keeps one value per key (history 1), so a party that may write
// some keys holds at most that many values of the bucket's value bound.
const (
	// MaxBucket bounds a bucket the seat alone writes, or an operator
	// (what the mesh file says).
	MaxBucket = 1 << 30
	// MaxValue bounds one value (and its headers) of such a bucket: the
	// server's largest message.
	MaxValue = 1 << 20
	// MaxSharedBucket bounds the buckets where every node's client writes
	// its keys beside the others' (applied and collect). A client may write
	// only its node's exact keys ([Table]), each holding one value of at
	// most MaxSharedValue: the bucket holds every client's keys at their
	// bound up to SharedKeys keys (node × module placements in applied,
	// node × contributions in collect).
	MaxSharedBucket = 1 << 30
	// MaxSharedValue bounds one value of such a bucket, or of a bucket
	// one party writes whole ([MaxPartyBucket]).
	MaxSharedValue = 256 << 10
	// MaxPartyBucket bounds a bucket one party other than the seat and the
	// operators writes whole: a provider's entries, the router's asks'
	// records. A party filling it is refused there, and nowhere else.
	MaxPartyBucket = 256 << 20
	// MaxLeaseBucket and MaxLeaseValue bound the clients' leases (one key
	// per node): they hold every node's lease at the bound up to
	// LeaseKeys nodes.
	MaxLeaseBucket = 64 << 20
	MaxLeaseValue  = 4 << 10
	// MaxStreamBytes is the storage account's bound on any one stream's
	// size: a stream made with no bound, or a larger one, is refused.
	MaxStreamBytes = MaxBucket
	// MaxKeyOverhead is what the store adds to a value and its headers
	// (at most the value bound) for one key: its subject (at most 512
	// bytes for the keys the mesh writes) and the record's own 30 bytes.
	MaxKeyOverhead = 512 + 30
	// SharedKeys and LeaseKeys are how many keys applied or collect, and
	// the clients' leases, hold each at its value bound.
	SharedKeys = MaxSharedBucket / (MaxSharedValue + MaxKeyOverhead)
	LeaseKeys  = MaxLeaseBucket / (MaxLeaseValue + MaxKeyOverhead)
)

// BucketLimits returns the bounds of bucket's stream that the maker sets
// (package bus): its size and the size of one value, both in bytes. The
// storage account refuses a stream with no size bound.
func BucketLimits(bucket string) (maxBytes int64, maxValue int32) {
	switch {
	case bucket == mesh.ClientsBucket:
		return MaxLeaseBucket, MaxLeaseValue
	case bucket == mesh.AppliedBucket || bucket == mesh.CollectBucket:
		return MaxSharedBucket, MaxSharedValue
	case writtenBeside(bucket):
		return MaxPartyBucket, MaxSharedValue
	}
	return MaxBucket, MaxValue
}

// SpareProviders is how many providers' buckets ([MaxPartyBucket] each)
// [StoreReserved] leaves room for beyond those it is told of: providers
// placed later, while the server runs with the max store it started with.
const SpareProviders = 16

// StoreReserved returns what the mesh's buckets reserve of a server's
// JetStream store, in bytes: the bound of every bucket the seat makes
// ([Buckets], [BucketLimits]) and of providers + [SpareProviders]
// providers' buckets. A server reserves a stream's whole bound when the
// stream is made and refuses a stream whose bound does not fit beside the
// others' ("insufficient storage resources"), so that one full bucket
// never refuses another's write; its max store (max_file_store) must be
// at least this. A replicated bucket reserves its bound on each server
// holding a replica.
func StoreReserved(providers int) int64 {
	var sum int64
	for _, b := range Buckets() {
		maxBytes, _ := BucketLimits(b)
		sum += maxBytes
	}
	return sum + int64(max(providers, 0)+SpareProviders)*MaxPartyBucket
}

// writtenBeside reports whether a party other than the seat and the
// operators writes bucket ([Table]).
func writtenBeside(bucket string) bool {
	for _, r := range Table {
		if r.Act == Write && r.Role != Seat && r.Role != Operator &&
			(r.Target == bucket || r.Target == BoundOf(Self) && strings.HasSuffix(bucket, mesh.BoundBucket(""))) {
			return true
		}
	}
	return false
}
