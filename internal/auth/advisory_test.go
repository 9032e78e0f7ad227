package auth_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestScopedCopiesMayHearTheirStreams follows, as n1's client under its
// generated permissions, the buckets a client follows: each copy subscribes
// to its stream's advisories (to hear at once that the bucket was deleted
// or made anew), and the server refuses none of it.
func TestScopedCopiesMayHearTheirStreams(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := f.conns[access.ClientUser("n1")]
	from := len(client.errors())
	for _, b := range []string{mesh.PlansBucket, mesh.AppliedBucket, mesh.CollectBucket} {
		c := bus.Follow(ctx, client.js, b, bus.Options{Filter: "n1.>"})
		<-c.Ready()
	}
	c := bus.Follow(ctx, client.js, mesh.RegistryBucket, bus.Options{})
	<-c.Ready()
	// The server answers a ping only after every refusal of what came
	// before it.
	if err := client.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, err := range client.errors()[from:] {
		if strings.Contains(err.Error(), "Permissions Violation") {
			t.Errorf("the client's connection was refused: %v", err)
		}
	}
}
