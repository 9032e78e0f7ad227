package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/cli"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// run runs the command line args in process and returns its output and
// error.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := cli.Root()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestAsksAndAnswer(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	rnc, rjs := bustest.Connect(t, s, "asks")
	seat, sjs := bustest.Connect(t, s, "seat")
	ctx := bustest.Context(t)
	if _, err := asks.Start(ctx, rnc, rjs, nil); err != nil {
		t.Fatal(err)
	}

	// The seat's side: vaultwarden's database key on ace is retiring, its
	// ask raised.
	k := mesh.ProvisionKey{Node: "ace", Consumer: "vaultwarden", Provision: "database"}
	p := mesh.Provision{
		Provision: "database",
		Consumer:  mesh.Ref{Module: "vaultwarden", Node: "ace"},
		Provider:  mesh.Ref{Module: "postgres", Node: "control"},
		State:     mesh.Retiring,
		Why:       "no build wanted or placed on ace requires database of postgres on control any more",
	}
	a := retire.Ask(k, p, time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), 0)
	p.Ask = a.ID
	provisions, err := bus.Bucket(ctx, sjs, mesh.ProvisionsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := json.Marshal(p)
	if _, err := provisions.Put(ctx, k.String(), pb); err != nil {
		t.Fatal(err)
	}
	ab, _ := json.Marshal(a)
	if _, err := seat.RequestWithContext(ctx, mesh.AsksSubject, ab); err != nil {
		t.Fatal(err)
	}
	url := s.URL()

	out, _, err := run(t, "asks", "-o", "wide", "--nats", url)
	if err != nil {
		t.Fatalf("asks: %v", err)
	}
	want := "ASK                                         HEADLINE                               KEY                       PROVIDER  NODE     EXPIRES               OPTIONS\n" +
		"retire-ace-vaultwarden-database-1796011200  Remove vaultwarden's database access?  ace.vaultwarden.database  postgres  control  2026-12-07T04:00:00Z  yes (Remove), no (Keep)\n"
	if out != want {
		t.Errorf("asks printed\n%s\nwant\n%s", out, want)
	}

	out, _, err = run(t, "asks", "--nats", url, "-o", "json")
	if err != nil {
		t.Fatalf("asks -o json: %v", err)
	}
	var listed struct {
		Asks []struct {
			Ask      mesh.Ask  `json:"ask"`
			Key      string    `json:"key"`
			Provider *mesh.Ref `json:"provider"`
		} `json:"asks"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("asks -o json printed %s: %v", out, err)
	}
	if len(listed.Asks) != 1 || listed.Asks[0].Ask.ID != a.ID || listed.Asks[0].Key != "ace.vaultwarden.database" ||
		listed.Asks[0].Provider == nil || *listed.Asks[0].Provider != p.Provider ||
		listed.Asks[0].Ask.Options[0].Binds != a.Options[0].Binds {
		t.Errorf("asks -o json = %s; want the ask %s about ace.vaultwarden.database from postgres on control", out, a.ID)
	}

	// An option the ask does not offer is refused, and the ask stays open.
	_, _, err = run(t, "answer", a.ID, "maybe", "--nats", url)
	if !errors.Is(err, asks.ErrUnknownOption) || err.Error() != "ask "+a.ID+` offers no option "maybe" (it offers yes, no)` {
		t.Errorf("answer maybe = %v; want the router's refusal of the option", err)
	}

	out, _, err = run(t, "answer", a.ID, "no", "--nats", url, "--user", "alice")
	if err != nil {
		t.Fatalf("answer no: %v", err)
	}
	kv, _ := sjs.KeyValue(ctx, mesh.RecordsBucket)
	e, err := kv.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rec mesh.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.State != mesh.RecordAnswered || rec.Warrant == nil || rec.Warrant.Option != "no" ||
		rec.Warrant.By != (mesh.Identity{Who: "alice", Kind: "nats-user", Identity: "alice"}) ||
		rec.Warrant.Binds != mesh.ActDigest(k.String(), a.ID, "no") {
		t.Fatalf("record after answer no = %+v", rec)
	}
	want = "ask " + a.ID + " answered no (Keep) by alice at " + rec.Warrant.At.Format(time.RFC3339) + "\n" +
		"Remove vaultwarden's database access?\n" +
		"warrant binds " + mesh.ActDigest(k.String(), a.ID, "no") + "\n"
	if out != want {
		t.Errorf("answer no printed\n%s\nwant\n%s", out, want)
	}

	out, _, err = run(t, "asks", "--nats", url)
	if err != nil || out != "no open asks\n" {
		t.Errorf("asks after the answer = %q, %v; want \"no open asks\"", out, err)
	}
	// The audit trail keeps the answered ask with its warrant.
	out, _, err = run(t, "asks", "--all", "-o", "wide", "--nats", url)
	wantTrail := "ASK                                         STATE     OPTION  BY     AT                    KEY\n" +
		a.ID + "  answered  no      alice  " + rec.Warrant.At.UTC().Format(time.RFC3339) + "  ace.vaultwarden.database\n"
	if err != nil || out != wantTrail {
		t.Errorf("asks --all = %q, %v; want\n%s", out, err, wantTrail)
	}

	// Answering again is refused, with a non-zero exit.
	_, _, err = run(t, "answer", a.ID, "yes", "--nats", url)
	if !errors.Is(err, asks.ErrNotOpen) || !strings.Contains(err.Error(), `was answered "no" by alice`) {
		t.Errorf("answer yes again = %v; want not open, answered no by alice", err)
	}
	if code := cli.Run([]string{"answer", a.ID, "yes", "--nats", url}); code != 1 {
		t.Errorf("Run(answer an answered ask) = %d; want 1", code)
	}
	if code := cli.Run([]string{"answer", "retire-unknown-1", "yes", "--nats", url}); code != 1 {
		t.Errorf("Run(answer an unknown ask) = %d; want 1", code)
	}
}

func TestAsksUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"answer", "only-an-id"},
		{"asks", "extra"},
		{"asks", "-o", "xml"},
	} {
		if code := cli.Run(args); code != 2 {
			t.Errorf("Run(%q) = %d; want 2 (usage)", args, code)
		}
	}
}

func TestAsksWithoutRouter(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	// --timeout 1s: each command tries again for its --timeout (10 s by
	// default) while nobody takes its request.
	_, _, err := run(t, "asks", "--nats", s.URL(), "--timeout", "1s")
	if !errors.Is(err, asks.ErrNoRouter) {
		t.Errorf("asks with no router = %v; want %v", err, asks.ErrNoRouter)
	}
	_, _, err = run(t, "answer", "retire-x-1", "yes", "--nats", s.URL(), "--timeout", "1s")
	if !errors.Is(err, asks.ErrNoRouter) {
		t.Errorf("answer with no router = %v; want %v", err, asks.ErrNoRouter)
	}
}
