package assemble

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

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

// followed are the buckets the node clients, the vault and the router
// follow, made by the operator before they start, so that none of them
// waits on a bucket the seat has yet to make.
var followed = []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket, mesh.RegistryBucket,
	mesh.AppliedBucket, mesh.CollectBucket, mesh.RecordsBucket}

// StartMesh runs a whole mesh on the operator's connection js (which has
// applied the mesh): it makes the buckets the components follow and the
// clients' lease bucket, then starts the ask router, the seat and a
// [Follower] of the live mesh (the vault, the postgres provider, the node
// clients), each on its own connection, and returns once they run. They
// run until ctx is done.
func (a *Assembly) StartMesh(ctx context.Context, js jetstream.JetStream, cfg MeshConfig) (*MeshRunning, error) {
	for _, b := range followed {
		if _, err := bus.Bucket(ctx, js, b, 0); err != nil {
			return nil, err
		}
	}
	if _, err := bus.LeaseBucket(ctx, js, mesh.ClientsBucket, client.LeaseTTL); err != nil {
		return nil, err
	}
	var m MeshRunning
	var err error
	if m.Router, err = a.StartRouter(ctx); err != nil {
		return nil, err
	}
	if m.Seat, err = a.StartSeat(ctx, cfg.Seat); err != nil {
		return nil, err
	}
	if m.Follower, err = a.Follow(ctx, js, cfg.Follow); err != nil {
		return nil, err
	}
	return &m, nil
}
