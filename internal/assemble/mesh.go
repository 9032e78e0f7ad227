package assemble

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// MeshConfig configures [Assembly.StartMesh]: the seat, and what follows
// the live mesh beside it.
type MeshConfig struct {
	Seat   SeatConfig
	Follow FollowConfig
}

// MeshRunning is a whole mesh started by [Assembly.StartMesh].
type MeshRunning struct {
	Router   *Running
	Seat     *SeatRunning
	Follower *Follower
}

// MakeBuckets makes every bucket a mesh's setup makes ([access.Buckets]:
// the seat's states and lease, the operators' buckets of the mesh file,
// the router's records, the clients' applied, collect and leases), on a
// connection of the seat's user of its own, which it closes: the seat
// alone may make buckets. up runs it before it applies the mesh file. A
// bucket that exists is kept as it is.
func (a *Assembly) MakeBuckets(ctx context.Context) error {
	nc, js, err := a.Connect(Component{Role: Seat})
	if err != nil {
		return err
	}
	defer nc.Close()
	return makeBuckets(ctx, js)
}

// makeBuckets makes every bucket of [access.Buckets] on js (the seat's)
// that is missing, but the seat's lease bucket.
func makeBuckets(ctx context.Context, js jetstream.JetStream) error {
	var err error
	for _, b := range access.Buckets() {
		if b == mesh.SeatBucket {
			// The seat's lease bucket is made by the seat itself with
			// its lease's TTL (seat.Config.LeaseTTL): made here without
			// one, a holder's key would never lapse and no standby would
			// take over from a seat that died.
			continue
		}
		if b == mesh.ClientsBucket {
			_, err = bus.LeaseBucket(ctx, js, b, client.LeaseTTL)
		} else {
			_, err = bus.Bucket(ctx, js, b, 0)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// StartMesh runs a whole mesh: it makes the buckets ([Assembly.MakeBuckets]),
// then starts the ask router, the seat and a [Follower] of the live mesh
// (the vault, the postgres provider, the node clients), each on its own
// connection, and returns once they run. The follower reads the mesh, and
// makes each provider's bucket of entries before it starts the provider,
// on a connection of the seat's user (which alone may make buckets). They
// run until ctx is done.
func (a *Assembly) StartMesh(ctx context.Context, cfg MeshConfig) (*MeshRunning, error) {
	if err := a.MakeBuckets(ctx); err != nil {
		return nil, err
	}
	mnc, mjs, err := a.Connect(Component{Role: Seat})
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, mnc.Close)
	var m MeshRunning
	if m.Router, err = a.StartRouter(ctx); err != nil {
		return nil, err
	}
	if m.Seat, err = a.StartSeat(ctx, cfg.Seat); err != nil {
		return nil, err
	}
	if m.Follower, err = a.Follow(ctx, mjs, cfg.Follow); err != nil {
		return nil, err
	}
	return &m, nil
}
