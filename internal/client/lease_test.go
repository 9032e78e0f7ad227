package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// said collects a component's log.
type said struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *said) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *said) has(text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.b.String(), text)
}

// TestSecondClientOfANodeWaits starts a second client for a node whose
// client runs: it waits, saying so, and writes nothing (the records keep
// the first client's folders); when the first stops it takes over.
func TestSecondClientOfANodeWaits(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, seat := bustest.Connect(t, s, "seat")
	plans := plansBucket(t, ctx, seat)
	for _, p := range homelabPlans() {
		if p.Node == "ace" {
			putPlan(t, ctx, plans, p)
		}
	}
	top := t.TempDir()
	first := start(t, s, "ace", filepath.Join(top, "first"))
	app := reader(t, ctx, s, mesh.AppliedBucket)
	gitea := func() string {
		it, ok := app.Get("ace.gitea")
		if !ok {
			return ""
		}
		return string(it.Value)
	}
	bustest.WaitFor(t, 0, "the first client's record of gitea", func() bool {
		return strings.Contains(gitea(), filepath.Join(top, "first", "gitea", "state"))
	})

	log := &said{}
	nc, js := bustest.Connect(t, s, "client-ace-2")
	second, err := client.New(client.Config{Node: "ace", Root: filepath.Join(top, "second"), JS: js, NC: nc,
		Log: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- second.Run(sctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("second client Run = %v; want context.Canceled", err)
		}
	})
	bustest.WaitFor(t, 0, "the second client to say it waits", func() bool {
		return log.has("another client holds this node's lease; this one waits")
	})
	// A change of the plan reaches only the first.
	for _, p := range homelabPlans() {
		if p.Module == "gitea" {
			p.Fingerprint = "b7c101"
			putPlan(t, ctx, plans, p)
		}
	}
	bustest.WaitFor(t, 0, "the first client to apply gitea's new build", func() bool {
		return strings.Contains(gitea(), `"fp":"b7c101"`)
	})
	if g := gitea(); !strings.Contains(g, filepath.Join(top, "first", "gitea", "state")) {
		t.Errorf("applied ace.gitea = %s; want the first client's folders", g)
	}
	if _, err := os.Lstat(filepath.Join(top, "second", "gitea")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the waiting client made folders (Lstat: %v)", err)
	}
	select {
	case <-second.Ready():
		t.Error("the second client is ready while the first holds the node's lease")
	default:
	}

	// The first stops and gives the lease back: the second takes over.
	first.stop()
	select {
	case <-second.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("the second client is not ready 20s after the first stopped")
	}
	bustest.WaitFor(t, 0, "the second client's record of gitea", func() bool {
		return strings.Contains(gitea(), filepath.Join(top, "second", "gitea", "state"))
	})
	if !log.has("taken over from another client") {
		t.Error("the second client did not say it took the lease over")
	}
}

// TestClientTakesOverTheLeaseOfAKilledClient leaves the node's lease held
// by a client of this machine and root whose process is gone (killed
// without giving it back): the next client takes it over at once, said,
// instead of waiting for it to lapse.
func TestClientTakesOverTheLeaseOfAKilledClient(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	root := filepath.Join(t.TempDir(), "ace")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	holder := fmt.Sprintf("client-ace@%s pid=%d at=1 root=%s", host, dead.Process.Pid, root)
	_, js := bustest.Connect(t, s, "old-client")
	kv, err := bus.LeaseBucket(ctx, js, mesh.ClientsBucket, client.LeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(mesh.Lease{Holder: holder, Since: time.Now().UTC()})
	if _, err := kv.Create(ctx, "ace", b); err != nil {
		t.Fatal(err)
	}
	log := &said{}
	start(t, s, "ace", root, func(c *client.Config) { c.Log = slog.New(slog.NewTextHandler(log, nil)) })
	if !log.has("taking over the lease of this node's client that is no longer running") {
		t.Errorf("the client did not say it took over the lease of %s", holder)
	}
	e, err := kv.Get(ctx, "ace")
	if err != nil {
		t.Fatal(err)
	}
	var l mesh.Lease
	if err := json.Unmarshal(e.Value(), &l); err != nil || l.Holder == holder || !strings.Contains(l.Holder, "root="+root) {
		t.Errorf("lease holder = %q, %v; want the new client", l.Holder, err)
	}
}
