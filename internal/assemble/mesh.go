package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
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
// bucket that exists is brought to the current configuration
// ([bus.Conform]). The bus's transient errors are tried again as a
// component's start is ([Assembly.StartSeat]).
func (a *Assembly) MakeBuckets(ctx context.Context) error {
	return a.retry(ctx, Component{Role: Seat}, func() error {
		nc, js, err := a.Connect(Component{Role: Seat})
		if err != nil {
			return err
		}
		defer nc.Close()
		return makeBuckets(ctx, js, a.log())
	})
}

// bucketRetry bounds how long the seat keeps trying to make a bucket
// while the bus gives transient errors (a cluster electing its leaders, a
// server restarting): long enough that a seat started meanwhile waits for
// the bus rather than exit.
const bucketRetry = 24 * time.Hour

// makeBuckets makes every bucket of [access.Buckets] on js (the seat's)
// that is missing, but the seat's lease bucket, and conforms every one
// that exists, the providers' entries among them ([bus.Conform]: a bucket
// made before the current bounds gets them, said once in log). A
// provider's bucket that cannot be conformed is said, and the others are
// still made. A transient error of the bus ([bus.Transient]: a request
// timed out, no leader yet) is tried again with backoff (250 ms growing
// to 2 s, each change of why said once in log: [bus.Retry]) until ctx
// ends; any other is returned. Then it removes every stream that is none
// of the mesh's buckets, and narrows a bucket's stream that captures more
// than its keys (removeForeign).
func makeBuckets(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	for _, b := range access.Buckets() {
		err := bus.Retry(ctx, bucketRetry, log, "make the bucket "+b, func() error {
			var err error
			switch b {
			case mesh.SeatBucket:
				// The seat's lease bucket is made by the seat itself
				// with its lease's TTL (seat.Config.LeaseTTL): made
				// here without one, a holder's key would never lapse
				// and no standby would take over from a seat that
				// died. One that exists is conformed.
				if _, err := js.Stream(ctx, "KV_"+b); errors.Is(err, jetstream.ErrStreamNotFound) {
					return nil
				} else if err != nil {
					return err
				}
			case mesh.ClientsBucket:
				_, err = bus.LeaseBucket(ctx, js, b, client.LeaseTTL)
			default:
				_, err = bus.Bucket(ctx, js, b, 0)
			}
			if err != nil {
				return err
			}
			_, err = bus.Conform(ctx, js, b, log)
			return err
		})
		if err != nil {
			return err
		}
	}
	// The providers' buckets that exist ("<provider>_bound").
	names := js.StreamNames(ctx)
	var bound []string
	for n := range names.Name() {
		if b, ok := strings.CutPrefix(n, "KV_"); ok && strings.HasSuffix(b, mesh.BoundBucket("")) {
			bound = append(bound, b)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("assemble: list the providers' buckets: %w", err)
	}
	for _, b := range bound {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := bus.Conform(cctx, js, b, log)
		cancel()
		if err != nil {
			log.Error("assemble: a provider's bucket keeps its configuration", "bucket", b, "err", err)
		}
	}
	// A stream none of the mesh's (made before only the seat made streams)
	// goes.
	_, err := removeForeign(ctx, js, log)
	return err
}

// StartMesh runs a whole mesh: it makes the buckets ([Assembly.MakeBuckets]),
// then starts the seat, the ask router and a [Follower] of the live mesh
// (the vault, the postgres provider, the node clients), each on its own
// connection, and returns once they run. The follower reads the mesh, and
// makes each provider's bucket of entries before it starts the provider,
// on a connection of the seat's user (which alone may make buckets). They
// run until ctx is done.
func (a *Assembly) StartMesh(ctx context.Context, cfg MeshConfig) (*MeshRunning, error) {
	if err := a.MakeBuckets(ctx); err != nil {
		return nil, err
	}
	var mnc *nats.Conn
	var mjs jetstream.JetStream
	err := a.retry(ctx, Component{Role: Seat}, func() (err error) {
		mnc, mjs, err = a.Connect(Component{Role: Seat})
		return err
	})
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, mnc.Close)
	var m MeshRunning
	// The seat first: it makes the watches of every scoped party, the
	// router's of its records among them.
	if m.Seat, err = a.StartSeat(ctx, cfg.Seat); err != nil {
		return nil, err
	}
	if m.Router, err = a.StartRouter(ctx); err != nil {
		return nil, err
	}
	if m.Follower, err = a.Follow(ctx, mjs, cfg.Follow); err != nil {
		return nil, err
	}
	return &m, nil
}
