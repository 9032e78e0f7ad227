package assemble_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestALeavingClientStopsBeforeItsUserIsRevoked runs a mesh of two nodes,
// control and dell, as up does with its users, and removes dell: its
// client hands over (deletes dell.web from the applied bucket), then the
// follower stops it. While the follower stops it (held there: a stop takes
// a moment, the lease given back and the connections closed), the mesh
// changes again (a module added, placed nowhere) and the follower steps
// on it. That step keeps client-dell's user: the user is revoked (its
// credentials file moved to auth/revoked) only after the client has
// stopped, and the client never says its access to the mesh was removed.
// Before, the follower took the client off its running components before
// it had stopped, and a step then revoked it under the running client
// (TestUpFollowsTheLiveMesh: ERROR "access to the mesh was removed" from
// client-dell).
func TestALeavingClientStopsBeforeItsUserIsRevoked(t *testing.T) {
	file := func(nodes, placement, extra string) *meshfile.File {
		t.Helper()
		text := "nodes: [" + nodes + "]\nmodules:\n" +
			"  web:\n    builds:\n      - fp: a1b2c3\n        manifest: {module: web, dirs: [{name: state}]}\n" + extra +
			"placement:\n" + placement
		f, err := meshfile.Parse("leave.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	both := file("control, dell", "  control: [web]\n  dell: [web]\n", "")
	left := file("control", "  control: [web]\n", "")
	again := file("control", "  control: [web]\n",
		"  extra:\n    builds:\n      - fp: e1e2e3\n        manifest: {module: extra, dirs: [{name: state}]}\n")

	said := &lines{}
	log := slog.New(slog.NewTextHandler(said, nil))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the mesh said:\n%s", said.text())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	data := assemble.Data(t.TempDir())
	m, err := assemble.OpenMachine(ctx, assemble.MachineConfig{Data: data, Listen: "127.0.0.1:0",
		File: both, Source: "leave.yaml", Given: true, Clients: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); m.Assembly.Wait(); m.Close() })
	cfg := m.MeshConfig(assemble.Decision{Clients: true}, "")
	dell := assemble.Component{Role: assemble.Client, Node: "dell"}
	users := &leaveUsers{Users: cfg.Follow.Users, node: dell.Node, issuedExtra: make(chan struct{})}
	cfg.Follow.Users = users
	cfg.Follow.Said = func(e assemble.Event) {
		if e.Component == dell && e.Err == nil {
			users.said(e.Started)
		}
	}
	run, err := m.Assembly.StartMesh(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	onc, ojs, err := m.Assembly.Connect(assemble.Component{Role: assemble.Operator})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onc.Close)
	applied, err := ojs.KeyValue(ctx, mesh.AppliedBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meshfile.Apply(ctx, ojs, both, time.Now()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 60*time.Second, "both clients to apply web", func() bool {
		_, err1 := applied.Get(ctx, "control.web")
		_, err2 := applied.Get(ctx, "dell.web")
		return err1 == nil && err2 == nil
	})
	dellCreds := data.Creds(access.ClientUser(dell.Node))
	if _, err := os.Stat(dellCreds); err != nil {
		t.Fatalf("dell's client applied web, but %v", err)
	}

	// While the follower stops dell's client, the mesh changes and the
	// follower steps on it: the hook returns once that step has issued
	// the users of the mesh with extra.
	run.Follower.OnHalting(func(c assemble.Component) {
		if c != dell {
			return
		}
		if _, err := meshfile.Apply(ctx, ojs, again, time.Now()); err != nil {
			t.Errorf("apply the mesh with extra while dell's client stops: %v", err)
			return
		}
		select {
		case <-users.issuedExtra:
		case <-time.After(60 * time.Second):
			t.Errorf("after 60s the follower has not issued the users of the mesh with extra")
		}
	})
	if _, err := meshfile.Apply(ctx, ojs, left, time.Now()); err != nil {
		t.Fatal(err)
	}
	revoked := filepath.Join(data.Auth(), auth.RevokedDir, access.ClientUser(dell.Node)+auth.CredsExt)
	bustest.WaitFor(t, 60*time.Second, "dell's client stopped and client-dell revoked ("+revoked+")", func() bool {
		_, err := os.Stat(revoked)
		return users.stoppedOnce() && err == nil
	})
	if !users.issued() {
		t.Errorf("the follower did not step on the mesh with extra while dell's client stopped")
	}
	if early := users.revokedEarly(); len(early) > 0 {
		t.Errorf("client-dell's user was revoked while its client ran: %q", early)
	}
	if _, err := applied.Get(ctx, "dell.web"); err == nil {
		t.Errorf("dell's client stopped with dell.web still in %s", mesh.AppliedBucket)
	}
	if n := said.count("access to the mesh was removed"); n > 0 {
		t.Errorf("%d lines say a component's access to the mesh was removed; want none (a leaving client is revoked once it has stopped)", n)
	}
	if r := run.Follower.Running(); slices.Contains(r, dell) {
		t.Errorf("the follower runs %v after dell left; want no client of dell", r)
	}
}

// leaveUsers are up's users, noting each mesh issued without node while
// node's client runs (said started, not yet said stopped): a revocation
// of its user under it.
type leaveUsers struct {
	assemble.Users
	node string

	// issuedExtra is closed once a mesh naming the module extra was
	// issued.
	issuedExtra chan struct{}

	mu      sync.Mutex
	runs    bool // node's client was said started and not yet stopped
	stopped int  // how many times it was said stopped
	extra   bool
	early   []string
}

// said takes an event of node's client: started, or stopped.
func (u *leaveUsers) said(started bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.runs = started
	if !started {
		u.stopped++
	}
}

func (u *leaveUsers) Issue(m access.Mesh) (changed, revoked []string, err error) {
	u.mu.Lock()
	if u.runs && !slices.Contains(m.Nodes, u.node) {
		u.early = append(u.early, fmt.Sprintf("issued nodes %v, modules %v", m.Nodes, m.Modules))
	}
	u.mu.Unlock()
	changed, revoked, err = u.Users.Issue(m)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err == nil && !u.extra && slices.Contains(m.Modules, "extra") {
		u.extra = true
		close(u.issuedExtra)
	}
	return changed, revoked, err
}

func (u *leaveUsers) Revoke(user string) error {
	u.mu.Lock()
	if u.runs && user == access.ClientUser(u.node) {
		u.early = append(u.early, "revoked "+user)
	}
	u.mu.Unlock()
	return u.Users.Revoke(user)
}

// issued reports whether a mesh naming the module extra was issued.
func (u *leaveUsers) issued() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.extra
}

// stoppedOnce reports whether node's client was said stopped exactly once.
func (u *leaveUsers) stoppedOnce() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stopped == 1 && !u.runs
}

// revokedEarly returns the issues and revocations made while node's
// client ran without node in the mesh issued.
func (u *leaveUsers) revokedEarly() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.early)
}
