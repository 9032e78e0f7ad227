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
// answers a verb and [Requests] when it asks one.
func (p Party) Accounts() []Account {
	out := []Account{Storage}
	for _, r := range p.Rules() {
		if a := accountOf(r.Act); !slices.Contains(out, a) {
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

// Bounds of the buckets' streams (see [BucketLimits]), in bytes.
const (
	// MaxBucket bounds a bucket the seat alone writes, or an operator
	// (what the mesh file says).
	MaxBucket = 1 << 30
	// MaxValue bounds one value (and its headers) of such a bucket: the
	// server's largest message.
	MaxValue = 1 << 20
	// MaxSharedBucket bounds a bucket that parties write beside others
	// (the clients' applied and collect, a provider's entries, the
	// asks' records): one party filling it is refused there, and nowhere
	// else.
	MaxSharedBucket = 256 << 20
	// MaxSharedValue bounds one value of such a bucket.
	MaxSharedValue = 256 << 10
	// MaxLeaseBucket and MaxLeaseValue bound the clients' leases.
	MaxLeaseBucket = 16 << 20
	MaxLeaseValue  = 4 << 10
	// MaxStreamBytes is the storage account's bound on any one stream's
	// size: a stream made with no bound, or a larger one, is refused.
	MaxStreamBytes = MaxBucket
)

// BucketLimits returns the bounds of bucket's stream that the maker sets
// (package bus): its size and the size of one value, both in bytes. The
// storage account refuses a stream with no size bound.
func BucketLimits(bucket string) (maxBytes int64, maxValue int32) {
	switch {
	case bucket == mesh.ClientsBucket:
		return MaxLeaseBucket, MaxLeaseValue
	case writtenBeside(bucket):
		return MaxSharedBucket, MaxSharedValue
	}
	return MaxBucket, MaxValue
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
