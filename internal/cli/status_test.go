package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestStatus runs the homelab with vaultwarden removed from ace (its keys
// retiring and asked): status counts each node's plans and provisions per
// state as get reads them, names ace's open asks, and says the seat's
// lease; --node ace is that one row; -o yaml says the same as -o json.
func TestStatus(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	startRouter(t, s)
	st := startSeat(t, s, homelabFile)
	if _, errOut, err := run(t, "apply", "-f", withoutVaultwarden(t), "--yes", "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	waitSeat(t, s, st)
	bustest.WaitFor(t, 0, "vaultwarden's keys asked", func() bool {
		out, _, err := run(t, "asks", "-o", "json", "--nats", s.URL())
		return err == nil && strings.Contains(out, "retire-ace-vaultwarden-database")
	})

	// What get reads, counted per node and state.
	out, _, err := run(t, "get", "provisions", "-o", "json", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	var provs map[string]mesh.Provision
	if err := json.Unmarshal([]byte(out), &provs); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int{}
	for key, p := range provs {
		n, _, _ := strings.Cut(key, ".")
		if want[n] == nil {
			want[n] = map[string]int{}
		}
		want[n][string(p.State)]++
	}
	if want["ace"][string(mesh.Retiring)] == 0 {
		t.Fatalf("ace has no retiring key: %v", want["ace"])
	}
	out, _, err = run(t, "get", "plans", "-o", "json", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	var plans map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &plans); err != nil {
		t.Fatal(err)
	}
	wantPlans := map[string]int{}
	for key := range plans {
		n, _, _ := strings.Cut(key, ".")
		wantPlans[n]++
	}

	out, errOut, err := run(t, "status", "-o", "json", "--nats", s.URL())
	if err != nil {
		t.Fatalf("status: %v (%s)", err, errOut)
	}
	var got meshStatus
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status -o json = %s: %v", out, err)
	}
	if !got.Seat.Held || got.Seat.Holder == "" {
		t.Errorf("status: seat %+v; want held, with its holder", got.Seat)
	}
	var names []string
	for _, ns := range got.Nodes {
		names = append(names, ns.Node)
		if ns.Plans != wantPlans[ns.Node] {
			t.Errorf("status: %s has %d plans; get plans has %d", ns.Node, ns.Plans, wantPlans[ns.Node])
		}
		for _, state := range statusStates {
			if ns.States[string(state)] != want[ns.Node][string(state)] {
				t.Errorf("status: %s has %d %s; get provisions has %d", ns.Node, ns.States[string(state)], state, want[ns.Node][string(state)])
			}
		}
		open := strings.Join(ns.OpenAsks, " ")
		if ns.Node == "ace" != strings.Contains(open, "retire-ace-vaultwarden-database") {
			t.Errorf("status: %s's open asks %v", ns.Node, ns.OpenAsks)
		}
	}
	if strings.Join(names, " ") != "ace control g14 shanks" {
		t.Errorf("status: nodes %v; want ace control g14 shanks", names)
	}

	out, _, err = run(t, "status", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "seat: "+got.Seat.Holder+" holds the lease since ") || !strings.HasPrefix(lines[1], "mesh: 4 nodes, ") ||
		!strings.HasPrefix(lines[3], "NODE") || !strings.Contains(lines[3], "PROVIDED") || !strings.Contains(out, "retire-ace-vaultwarden-database") {
		t.Errorf("status printed:\n%s", out)
	}

	out, _, err = run(t, "asks", "-o", "yaml", "--nats", s.URL())
	if err != nil || !strings.HasPrefix(out, "asks:\n  - ask:\n      id: retire-ace-vaultwarden-") {
		t.Errorf("asks -o yaml = %q, %v", out, err)
	}
	out, _, err = run(t, "why", "ace.vaultwarden.database", "-o", "yaml", "--nats", s.URL())
	if err != nil || !strings.HasPrefix(out, "key: ace.vaultwarden.database\nsteps:\n  - depth: 0\n") {
		t.Errorf("why -o yaml = %q, %v", out, err)
	}
	out, _, err = run(t, "status", "--node", "ace", "-o", "yaml", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nnodes:\n  - node: ace\n") || strings.Contains(out, "node: g14") || !strings.Contains(out, "held: true") {
		t.Errorf("status --node ace -o yaml:\n%s", out)
	}

	// A misspelt node is said, not shown as an empty row.
	out, _, err = run(t, "status", "--node", "acee", "--nats", s.URL())
	if err == nil || !strings.Contains(err.Error(), `node "acee" not found: `+mesh.PlacementBucket+` has no key acee`) || strings.Contains(out, "acee") {
		t.Errorf("status --node acee = %q, %v; want node \"acee\" not found, no row", out, err)
	}
	// One key asked in a state it is not in says the state it is in.
	for key, p := range provs {
		if p.State != mesh.Provided {
			continue
		}
		_, _, err = run(t, "get", "provisions", key, "--state", "asked", "--nats", s.URL())
		if want := key + " is provided, not asked"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("get provisions %s --state asked: %v; want %q", key, err, want)
		}
		break
	}
}

// TestStatusAsksTheSeat runs the homelab with vaultwarden removed from ace
// and the seat's verb answering: status's counts equal those it counts
// from the buckets, with js on a second, empty server (so that no count
// can come from a bucket) and no note; with the verb not answered, status
// counts from the buckets and says that no seat answers.
func TestStatusAsksTheSeat(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	startRouter(t, s)
	startSeat(t, s, homelabFile)
	ctx := bustest.Context(t)
	verbNC, verbJS := bustest.Connect(t, s, "mesh-provisioner-seat")
	if err := provisioning.Start(ctx, verbNC, verbJS, provisioning.Options{Log: testLog(t)}); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := run(t, "apply", "-f", withoutVaultwarden(t), "--yes", "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	nc, js := bustest.Connect(t, s, "cli-status")
	empty := bustest.Server(t)
	_, emptyJS := bustest.Connect(t, empty, "cli-status")

	counts := func(st meshStatus) string {
		var b strings.Builder
		for _, ns := range st.Nodes {
			fmt.Fprintf(&b, "%s plans %d states %v odd %d held %v asks %v\n", ns.Node, ns.Plans, ns.States, ns.Odd, ns.Held, ns.OpenAsks)
		}
		return b.String()
	}
	var fromBuckets, fromSeat meshStatus
	bustest.WaitFor(t, 0, "status from the seat to equal the buckets' counts, with vaultwarden retiring", func() bool {
		var err error
		if fromBuckets, err = readStatus(ctx, nc, js, ""); err != nil {
			t.Fatal(err)
		}
		var b map[string]*nodeStatus
		if b, err = countStatus(ctx, js, "", &fromBuckets); err != nil {
			t.Fatal(err)
		}
		for _, ns := range fromBuckets.Nodes {
			ns.Plans, ns.States, ns.Odd, ns.Held = b[ns.Node].Plans, b[ns.Node].States, b[ns.Node].Odd, b[ns.Node].Held
		}
		if fromSeat, err = readStatus(ctx, nc, emptyJS, ""); err != nil {
			t.Fatal(err)
		}
		return counts(fromSeat) == counts(fromBuckets) && strings.Contains(counts(fromSeat), "retiring")
	})
	if len(fromSeat.Nodes) != 4 || len(fromSeat.Notes) != 0 {
		t.Errorf("status from the seat: %d nodes, notes %q; want the homelab's 4 and no note\n%s", len(fromSeat.Nodes), fromSeat.Notes, counts(fromSeat))
	}
	ace, err := readStatus(ctx, nc, emptyJS, "ace")
	if err != nil || len(ace.Nodes) != 1 || ace.Nodes[0].Node != "ace" || ace.Nodes[0].States["retiring"] == 0 {
		t.Errorf("status --node ace from the seat = %s, %v", counts(ace), err)
	}

	emptyNC, _ := bustest.Connect(t, empty, "cli-status")
	alone, err := readStatus(ctx, emptyNC, emptyJS, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(alone.Notes) == 0 || alone.Notes[0] != "no seat holds the lease: no seat answers mesh-provisioner.provisioning: counted from the buckets" {
		t.Errorf("status with no seat: notes %q", alone.Notes)
	}
}
