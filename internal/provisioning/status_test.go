package provisioning_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// statusOf decodes a status answer's entries by node.
func statusOf(t *testing.T, r provisioning.Reply) map[string]provisioning.NodeStatus {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("status answered %q", r.Error)
	}
	out := map[string]provisioning.NodeStatus{}
	for _, e := range r.Entries {
		var ns provisioning.NodeStatus
		if err := json.Unmarshal(e.Value, &ns); err != nil {
			t.Fatalf("status entry %s = %s: %v", e.Key, e.Value, err)
		}
		out[e.Key] = ns
	}
	return out
}

// TestVerbCountsStatusAsKeysChange asks status of the fixture: ace's four
// plan keys (two odd among them), its asked and provided provisions and
// its provision whose value names no state, its held vaultwarden;
// control's failed provision; bare, placed with nothing else. Then keys
// change (a provision asked → provided, a plan deleted, a refusal added,
// a provision deleted) and the answer follows them; --node narrows it to
// one entry.
func TestVerbCountsStatusAsKeysChange(t *testing.T) {
	f := serve(t)
	f.put(mesh.PlacementBucket, "bare", []byte(`{}`))
	want := map[string]provisioning.NodeStatus{
		"ace": {Plans: 4, States: map[string]int{"asked": 1, "provided": 1}, Odd: 1,
			Held: []string{"vaultwarden"}},
		"control": {Plans: 2, States: map[string]int{"failed": 1}, Held: []string{}},
		"bare":    {Plans: 0, States: map[string]int{}, Held: []string{}},
	}
	// The tally is counted from the verb's start, before the fixture made
	// the placement bucket: its copy finds the bucket on its next try.
	bustest.WaitFor(t, 0, "status to count bare's placement", func() bool {
		return reflect.DeepEqual(statusOf(t, f.ask(t, `{"what":"status"}`)), want)
	})

	ctx := bustest.Context(t)
	k := mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "database", Local: "main"}
	f.put(mesh.ProvisionsBucket, k.String(), mesh.Provision{Provision: "database", Local: "main",
		Consumer: mesh.Ref{Module: "gitea", Node: "ace"}, Provider: mesh.Ref{Module: "postgres", Node: "control"},
		State: mesh.Provided})
	f.put(mesh.RefusedBucket, "control.redis", mesh.Refusal{Node: "control", Module: "redis", Why: "no build is known for redis"})
	for bucket, key := range map[string]string{mesh.PlansBucket: "ace.ghost", mesh.ProvisionsBucket: "control.keycloak.database"} {
		kv, err := bus.Bucket(ctx, f.js, bucket, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	want["ace"] = provisioning.NodeStatus{Plans: 3, States: map[string]int{"provided": 2}, Odd: 1, Held: []string{"vaultwarden"}}
	want["control"] = provisioning.NodeStatus{Plans: 2, States: map[string]int{}, Held: []string{"redis"}}
	var got map[string]provisioning.NodeStatus
	bustest.WaitFor(t, 0, "status to follow the changes", func() bool {
		got = statusOf(t, f.ask(t, `{"what":"status"}`))
		return reflect.DeepEqual(got, want)
	})
	if got := statusOf(t, f.ask(t, `{"what":"status","node":"control"}`)); !reflect.DeepEqual(got, map[string]provisioning.NodeStatus{"control": want["control"]}) {
		t.Errorf("status of control = %+v; want %+v", got, want["control"])
	}
}

// items is a bucket's keys and values for [provisioning.Answer].
type items map[string][]byte

func (s items) Range(f func(string, bus.Item) bool) {
	for k, v := range s {
		if !f(k, bus.Item{Value: v}) {
			return
		}
	}
}

// TestStatusPages counts 2,500 placed nodes, one plan each: the answer
// comes in pages of provisioning.StatusPage nodes, each naming the next
// page's start, and the pages hold every node once, in order.
func TestStatusPages(t *testing.T) {
	placed, plans := items{}, items{}
	for i := range 2500 {
		n := fmt.Sprintf("n%05d", i)
		placed[n] = []byte(`{}`)
		plans[n+".tools"] = []byte(`{}`)
	}
	src := provisioning.Sources{mesh.PlacementBucket: placed, mesh.PlansBucket: plans}
	var pages []int
	seen := 0
	req := provisioning.Request{What: provisioning.WhatStatus}
	for {
		r := provisioning.Answer(req, src)
		if r.Error != "" {
			t.Fatal(r.Error)
		}
		pages = append(pages, len(r.Entries))
		for _, e := range r.Entries {
			if want := fmt.Sprintf("n%05d", seen); e.Key != want {
				t.Fatalf("entry %d is %s; want %s", seen, e.Key, want)
			}
			if string(e.Value) != `{"plans":1,"states":{},"held":[]}` {
				t.Fatalf("entry %s = %s; want one plan", e.Key, e.Value)
			}
			seen++
		}
		if r.Next == "" {
			break
		}
		if r.Next != r.Entries[len(r.Entries)-1].Key {
			t.Fatalf("next = %q; want the page's last node", r.Next)
		}
		req.After = r.Next
	}
	if fmt.Sprint(pages) != "[1000 1000 500]" || seen != 2500 {
		t.Errorf("pages %v (%d nodes); want [1000 1000 500]", pages, seen)
	}
}
