package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestGetOneKeyStateAndYAML reads one key (get provisions KEY), narrows by
// --state, prints yaml, and refuses a key no bucket holds and a --state
// that is no state.
func TestGetOneKeyStateAndYAML(t *testing.T) {
	clock = func() time.Time { return time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC) }
	t.Cleanup(func() { clock = time.Now })
	s := bustest.Server(t)
	seatKeys(t, s)
	out, _, err := run(t, "get", "provisions", "control.keycloak.database", "--nats", s.URL())
	if want := "NODE     KEY                        STATE   FOR  PROVIDER          WHY\n" +
		"control  control.keycloak.database  failed  3h   postgres@control  postgres said: role exists\n"; err != nil || out != want {
		t.Errorf("get provisions KEY = %q, %v; want\n%s", out, err, want)
	}
	if _, _, err := run(t, "get", "provisions", "ace.gitea.nothing", "--nats", s.URL()); err == nil || !strings.Contains(err.Error(), "no such key") {
		t.Errorf("get provisions of a key not there = %v; want it said", err)
	}
	out, _, err = run(t, "get", "provisions", "--state", "asked", "-o", "json", "--nats", s.URL())
	var got map[string]mesh.Provision
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 || got["ace.gitea.database.main"].State != mesh.Asked {
		t.Errorf("get provisions --state asked = %q, %v; want ace.gitea.database.main alone", out, err)
	}
	out, _, err = run(t, "get", "provisions", "ace.gitea.route", "-o", "yaml", "--nats", s.URL())
	if err != nil || !strings.HasPrefix(out, "ace.gitea.route:\n  provision: route\n") || !strings.Contains(out, "  state: provided\n") {
		t.Errorf("get provisions KEY -o yaml = %q, %v", out, err)
	}
	for _, args := range [][]string{{"get", "provisions", "--state", "done"}, {"get", "plans", "--state", "asked"}, {"get", "registry", "x.y"}, {"get", "provisions", "a.>"}} {
		if _, _, err := run(t, append(args, "--nats", s.URL())...); err == nil || !isUsage(err) {
			t.Errorf("%v = %v; want a usage error", args, err)
		}
	}
}

// TestGetAndWhyEscapeControlSequences puts an entry whose why holds ESC
// sequences (a colour and a cursor move) and a provision quoting it: get and
// why print them escaped, never raw.
func TestGetAndWhyEscapeControlSequences(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	st := startSeat(t, s, homelabFile)
	_, js := bustest.Connect(t, s, "mesh-vault")
	ctx := bustest.Context(t)
	kv, err := bus.Bucket(ctx, js, mesh.BoundBucket(mesh.VaultModule), 0)
	if err != nil {
		t.Fatal(err)
	}
	const cred = "g14.grafana.credential.postgres_database"
	b, _ := json.Marshal(mesh.Entry{State: mesh.Failed, Why: "sealed\x1b[31m red\x1b[2J\u202e"})
	if _, err := kv.Put(ctx, cred, b); err != nil {
		t.Fatal(err)
	}
	waitSeat(t, s, st)
	bustest.WaitFor(t, 0, cred+" failed", func() bool {
		out, _, err := run(t, "get", "provisions", cred, "-o", "json", "--nats", s.URL())
		return err == nil && strings.Contains(out, `"failed"`)
	})
	for _, args := range [][]string{{"get", "provisions", "--node", "g14", "-o", "wide"}, {"why", "g14.grafana.database"}} {
		out, _, err := run(t, append(args, "--nats", s.URL())...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(out, "\x1b\u202e") || !strings.Contains(out, `sealed\x1b[31m red\x1b[2J\u202e`) {
			t.Errorf("%v printed %q; want the ESC sequences escaped", args, out)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGetWatch runs get provisions --node ace -w: it prints the table,
// then a row for a key of ace put after it started and a line for one
// deleted, nothing for a key of another node, and ends on Ctrl-C (its
// context) without an error.
func TestGetWatch(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	seatKeys(t, s)
	ctx, cancel := context.WithCancel(bustest.Context(t))
	defer cancel()
	root := Root()
	var out syncBuffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"get", "provisions", "--node", "ace", "-w", "--nats", s.URL()})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	bustest.WaitFor(t, 0, "the table printed", func() bool { return strings.Contains(out.String(), "ace.gitea.route") })

	_, js := bustest.Connect(t, s, "seat")
	kv, err := js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(mesh.Provision{Provision: "cache", Consumer: mesh.Ref{Module: "gitea", Node: "ace"},
		Provider: mesh.Ref{Module: "redis", Node: "control"}, State: mesh.Waits, Why: "waits for redis"})
	// The watch may start after the table: put until its row is printed.
	bustest.WaitFor(t, 0, "the new key's row", func() bool {
		if _, err := kv.Put(ctx, "ace.gitea.cache", b); err != nil {
			t.Fatal(err)
		}
		_, _ = kv.Put(ctx, "shanks.immich.other", b)
		return strings.Contains(out.String(), "ace  ace.gitea.cache  waits")
	})
	if err := kv.Delete(ctx, "ace.gitea.route"); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the deleted key's line", func() bool { return strings.Contains(out.String(), "deleted  ace.gitea.route") })
	if strings.Contains(out.String(), "shanks.immich.other") {
		t.Errorf("get -w --node ace printed another node's key:\n%s", out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("get -w ended with %v; want none on Ctrl-C", err)
	}
}
