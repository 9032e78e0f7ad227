package assemble_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/nats-io/nats.go/jetstream"
)

// startRetried is the message a component's start says when the bus does
// not answer it yet.
const startRetried = "assemble: the bus does not answer yet; trying the start again"

// TestComponentsStartBeforeTheBusAnswers starts the seat, the ask router,
// mesh-vault (and so its provider kit) and ace's client while none of the
// three servers of their cluster runs, then brings one back (JetStream
// without a quorum: its requests time out or say it is unavailable), then
// the other two. Each start says that the bus does not answer, once per
// change of why (never once per try), and comes up once the cluster has a
// quorum; the homelab applied then is composed, its credentials provided
// by the vault, ace's plans applied by its client, and the router answers.
// The seat exited at once with "context deadline exceeded" before.
func TestComponentsStartBeforeTheBusAnswers(t *testing.T) {
	bustest.Long(t, "that the seat, the router, the vault and a client started before any server of their cluster runs say so once and come up when it has a quorum")
	c := bustest.Cluster(t)
	url := c.URL()
	for i := range bustest.ClusterSize {
		c.Stop(i)
	}
	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := &assemble.Assembly{Dial: assemble.Shared(url, "", log), Log: log, Replicas: 3, AwaitMax: 500 * time.Millisecond}
	ctx := bustest.Context(t)

	starts := make(chan error, 4)
	go func() {
		_, err := a.StartSeat(ctx, assemble.SeatConfig{ID: "seat-1"})
		starts <- wrap("seat", err)
	}()
	go func() {
		_, err := a.StartRouter(ctx)
		starts <- wrap("router", err)
	}()
	go func() {
		_, err := a.StartVault(ctx, vault.Config{Node: "control", Dir: t.TempDir()})
		starts <- wrap("vault", err)
	}()
	go func() {
		_, _, err := a.StartClient(ctx, client.Config{Node: "ace", Root: t.TempDir()})
		starts <- wrap("client", err)
	}()
	components := []string{"component=seat", "component=router", "component=\"vault on control\"", "component=\"client of ace\""}
	const noServers = "no servers available"
	bustest.WaitFor(t, 20*time.Second, "every component to try twice while no server answers", func() bool {
		for _, comp := range components {
			if said.count(startRetried, comp, noServers) < 2 {
				return false
			}
		}
		return true
	})
	for _, comp := range components {
		if n := said.count("level=WARN", startRetried, comp, noServers); n != 1 {
			t.Errorf("%s said at warn level %d times that no server answers; want once", comp, n)
		}
	}
	// One server of three: JetStream has no quorum. The seat, connected,
	// says that its buckets cannot be made yet.
	c.Restart(0)
	if !waitFor(30*time.Second, func() bool {
		return said.count("trying again", `what="make the bucket`) > 0
	}) {
		t.Fatalf("after 30 s the seat has not said that JetStream does not answer; the log:\n%s", said.text())
	}
	c.Restart(1)
	c.Restart(2)
	// The bucket of mesh-vault's entries, which up's follower makes before
	// it starts the vault.
	onc, ojs, err := bus.Connect(bus.Dial{URL: url, Name: "operator", Replicas: 3, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onc.Close)
	if err := bus.Retry(ctx, 30*time.Second, log, "make the vault's bucket", func() error {
		_, err := bus.Bucket(ctx, ojs, mesh.BoundBucket(mesh.VaultModule), 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		select {
		case err := <-starts:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("after 60 s with a quorum, not every component has started; the log:\n%s", said.text())
		}
	}
	for _, comp := range components {
		if said.count("assemble: started once the bus answered", comp) != 1 {
			t.Errorf("%s did not say once that it started once the bus answered", comp)
		}
	}

	// The components do their work on the homelab, applied as an operator
	// would.
	f, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Retry(ctx, 30*time.Second, log, "apply", func() error {
		_, err := meshfile.Apply(ctx, ojs, f, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The vault provides every credential of the mesh; ace's client applies
	// each of ace's plans at its fingerprint.
	provisions, err := ojs.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	plans, err := ojs.KeyValue(ctx, mesh.PlansBucket)
	if err != nil {
		t.Fatal(err)
	}
	applied, err := ojs.KeyValue(ctx, mesh.AppliedBucket)
	if err != nil {
		t.Fatal(err)
	}
	var why string
	bustest.WaitFor(t, 60*time.Second, "every credential provided by mesh-vault and each of ace's plans applied", func() bool {
		why = settledWhy(ctx, provisions, plans, applied)
		return why == ""
	})
	rnc, _ := bustest.Connect(t, c.Server(0), "asker")
	if _, err := asks.List(ctx, rnc, ""); err != nil {
		t.Errorf("the router's list of open asks: %v", err)
	}
}

// settledWhy says what is not yet done: a credential key mesh-vault has
// not provided, one of ace's plans not applied at its fingerprint; "" once
// every one is, with at least one of each.
func settledWhy(ctx context.Context, provisions, plans, applied jetstream.KeyValue) string {
	credentials, acePlans := 0, 0
	keys, err := provisions.ListKeys(ctx)
	if err != nil {
		return err.Error()
	}
	for k := range keys.Keys() {
		e, err := provisions.Get(ctx, k)
		if err != nil {
			return err.Error()
		}
		var p mesh.Provision
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			return err.Error()
		}
		if p.Provider.Module != mesh.VaultModule {
			continue
		}
		credentials++
		if p.State != mesh.Provided {
			return fmt.Sprintf("%s is %s", k, p.State)
		}
	}
	pk, err := plans.ListKeys(ctx)
	if err != nil {
		return err.Error()
	}
	for k := range pk.Keys() {
		if !strings.HasPrefix(k, "ace.") {
			continue
		}
		acePlans++
		e, err := plans.Get(ctx, k)
		if err != nil {
			return err.Error()
		}
		var p mesh.Plan
		json.Unmarshal(e.Value(), &p)
		ae, err := applied.Get(ctx, k)
		if err != nil {
			return fmt.Sprintf("%s not applied: %v", k, err)
		}
		var ap mesh.Applied
		json.Unmarshal(ae.Value(), &ap)
		if ap.Fingerprint != p.Fingerprint {
			return fmt.Sprintf("%s applied at %s, planned at %s", k, ap.Fingerprint, p.Fingerprint)
		}
	}
	if credentials == 0 || acePlans == 0 {
		return fmt.Sprintf("%d credentials, %d plans of ace", credentials, acePlans)
	}
	return ""
}

// wrap names what failed to start.
func wrap(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
