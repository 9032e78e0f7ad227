package assemble_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestBucketsDeletedUnderARunningMesh runs the homelab as up does (the
// seat, the router, mesh-vault and a client per node on one embedded
// server) and deletes the buckets the follower and the seat read, a group
// at a time: the operator's (placement, modules, manifests, wants, builds,
// haves), the seat's (plans, provisions, refused), the clients' (applied,
// collect), and the records, the registry and mesh-vault's entries. A
// bucket deleted is unknown, not empty: no user is revoked and none issued
// without a node, no component stops, and no plan, applied record or
// provision is deleted; once each bucket is made again (and the mesh file
// applied again for the operator's) the mesh is what it was. Before, the
// placement deleted read as every node leaving: every client's user was
// revoked and every client stopped, and the seat deleted every plan.
func TestBucketsDeletedUnderARunningMesh(t *testing.T) {
	f, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, nil))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the mesh said:\n%s", said.text())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	m, err := assemble.OpenMachine(ctx, assemble.MachineConfig{Data: assemble.Data(t.TempDir()), Listen: "127.0.0.1:0",
		NoAuth: true, File: f, Given: true, Clients: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); m.Assembly.Wait(); m.Close() })
	cfg := m.MeshConfig(assemble.Decision{Clients: true}, "")
	users := &issuedUsers{}
	cfg.Follow.Users = users
	var mu sync.Mutex
	var stopped []string
	cfg.Follow.Said = func(e assemble.Event) {
		if !e.Started || e.Err != nil {
			mu.Lock()
			stopped = append(stopped, e.String())
			mu.Unlock()
		}
	}
	run, err := m.Assembly.StartMesh(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, ojs := bustest.Connect(t, m.Server, "operator")
	apply := func() {
		t.Helper()
		if _, err := meshfile.Apply(ctx, ojs, f, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// Deletes of plans, applied records and provisions, as a reader of
	// each sees them (a bucket lost is not reported to a reader).
	var deletes []string
	for _, b := range []string{mesh.PlansBucket, mesh.AppliedBucket, mesh.ProvisionsBucket} {
		bus.Follow(ctx, ojs, b, bus.Options{OnChange: func(ch bus.Change) {
			if ch.Deleted {
				mu.Lock()
				deletes = append(deletes, b+" "+ch.Key)
				mu.Unlock()
			}
		}})
	}
	apply()
	var want meshState
	bustest.WaitFor(t, 60*time.Second, "the homelab composed, each plan applied, credentials provided", func() bool {
		want = readMesh(ctx, t, ojs)
		return want.settled() && run.Seat.Seat().Settled(seat.Marks(ctx, ojs)) && len(run.Follower.Running()) == 5
	})
	running := run.Follower.Running()

	for _, group := range []struct {
		name    string
		buckets []string
		apply   bool // the operator applies the mesh file again once they are made again
	}{
		{"the operator's", []string{mesh.PlacementBucket, mesh.ModulesBucket, mesh.ManifestsBucket,
			mesh.WantsBucket, mesh.BuildsBucket, mesh.HaveBucket}, true},
		{"the seat's", []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket}, false},
		{"the clients'", []string{mesh.AppliedBucket, mesh.CollectBucket}, false},
		{"the records, registry and entries", []string{mesh.RecordsBucket, mesh.RegistryBucket, mesh.BoundBucket(mesh.VaultModule)}, false},
	} {
		for _, b := range group.buckets {
			if err := ojs.DeleteKeyValue(ctx, b); err != nil {
				t.Fatalf("%s: delete %s: %v", group.name, b, err)
			}
		}
		// The seat makes each again; it and the follower take them.
		bustest.WaitFor(t, 60*time.Second, group.name+" buckets made again, the seat settled on them", func() bool {
			for _, b := range group.buckets {
				if _, err := ojs.KeyValue(ctx, b); err != nil {
					return false
				}
			}
			return run.Seat.Seat().Settled(seat.Marks(ctx, ojs))
		})
		if got := readMesh(ctx, t, ojs); !group.apply && !slices.Equal(got.plans, want.plans) {
			t.Errorf("%s deleted: plans = %v; want %v", group.name, got.plans, want.plans)
		}
		if group.apply {
			// Until the file is applied again the seat composes on what it
			// last read: no plan is deleted.
			if got := readMesh(ctx, t, ojs); !slices.Equal(got.plans, want.plans) {
				t.Errorf("%s deleted, not applied again: plans = %v; want %v", group.name, got.plans, want.plans)
			}
			apply()
		}
		var got meshState
		bustest.WaitFor(t, 60*time.Second, "the mesh as it was after "+group.name+" buckets were deleted", func() bool {
			got = readMesh(ctx, t, ojs)
			return got.equal(want) && run.Seat.Seat().Settled(seat.Marks(ctx, ojs))
		})
		if r := run.Follower.Running(); !slices.Equal(r, running) {
			t.Errorf("%s deleted: the follower runs %v; want %v", group.name, r, running)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stopped) > 0 {
		t.Errorf("components stopped or failed while buckets were deleted: %q", stopped)
	}
	if len(deletes) > 0 {
		t.Errorf("keys deleted while buckets were deleted: %q", deletes)
	}
	if r := users.revokedOrShrunk(); len(r) > 0 {
		t.Errorf("users revoked, or issued for a smaller mesh: %q", r)
	}
}

// issuedUsers is the [assemble.Users] of a server without users that
// keeps what the follower asks of it: every mesh it issues, every user
// revoked.
type issuedUsers struct {
	mu      sync.Mutex
	full    *access.Mesh // the largest mesh issued
	shrunk  []string
	revoked []string
}

func (u *issuedUsers) Issue(m access.Mesh) (changed, revoked []string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.full == nil || len(m.Nodes) >= len(u.full.Nodes) && len(m.Providers) >= len(u.full.Providers):
		u.full = &m
	default:
		u.shrunk = append(u.shrunk, fmt.Sprintf("issued for nodes %v, providers %v after %v, %v", m.Nodes, m.Providers,
			u.full.Nodes, u.full.Providers))
	}
	return nil, nil, nil
}

func (u *issuedUsers) Revoke(user string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.revoked = append(u.revoked, "revoked "+user)
	return nil
}

// revokedOrShrunk says each revocation, and each issue of a mesh with
// fewer nodes or providers than one issued before.
func (u *issuedUsers) revokedOrShrunk() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Concat(u.revoked, u.shrunk)
}

// meshState is what a running mesh holds of the keys a deleted bucket
// must not change: every plan with its value, every applied record's key,
// every provision's key with its state.
type meshState struct {
	plans      []string // key=value
	applied    []string
	provisions []string // key=state
}

func (s meshState) equal(o meshState) bool {
	return slices.Equal(s.plans, o.plans) && slices.Equal(s.applied, o.applied) && slices.Equal(s.provisions, o.provisions)
}

// settled reports whether each plan is applied (a record per plan key) and
// mesh-vault provided some credential.
func (s meshState) settled() bool {
	if len(s.plans) == 0 || len(s.applied) != len(s.plans) {
		return false
	}
	for _, p := range s.provisions {
		if strings.HasSuffix(p, "="+string(mesh.Provided)) {
			return true
		}
	}
	return false
}

func readMesh(ctx context.Context, t *testing.T, js jetstream.JetStream) meshState {
	t.Helper()
	var s meshState
	read := func(bucket string, f func(key string, value []byte) string) []string {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			return nil
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return nil
		}
		out := map[string]string{}
		for k := range lister.Keys() {
			e, err := kv.Get(ctx, k)
			if err != nil {
				continue
			}
			out[k] = f(k, e.Value())
		}
		return slices.Sorted(maps.Values(out))
	}
	s.plans = read(mesh.PlansBucket, func(k string, v []byte) string { return k + "=" + string(v) })
	s.applied = read(mesh.AppliedBucket, func(k string, _ []byte) string { return k })
	s.provisions = read(mesh.ProvisionsBucket, func(k string, v []byte) string {
		var p mesh.Provision
		if err := json.Unmarshal(v, &p); err != nil {
			return k + "=undecodable"
		}
		return k + "=" + string(p.State)
	})
	return s
}
