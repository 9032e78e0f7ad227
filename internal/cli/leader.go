package cli

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// leader returns js when the command's user may read from the leader of a
// bucket's stream ($JS.API.STREAM.MSG.GET.KV_<bucket>: the operator and
// the seat may), so that a read is never older than what was written
// before (a replica catching up after its server restarted answers direct
// gets and watches with older values; see lookup.Read); nil when the server
// refuses it (a node's client, allowed some keys only, then reads what a
// replica holds). It costs one request.
func (f *busFlags) leader(ctx context.Context, js jetstream.JetStream) jetstream.JetStream {
	var err error
	refused := f.tolerate(ctx, func(ctx context.Context) {
		_, err = bus.LeaderGet(ctx, js, mesh.ProvisionsBucket, leaderProbe)
	})
	if refused != nil || errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	return js
}

// leaderProbe is the key leader reads: any key will do, whether it is
// there or not, since what it asks is whether the user may.
const leaderProbe = "mesh-provisioner-leader-probe"
