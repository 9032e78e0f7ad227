package provisioning

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/digest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestDigestsArePagedByGroup answers a digests request of an asker that
// holds nothing over 10,000 nodes: whole groups per page, each page past
// DigestPage nodes by less than one group, Next naming the last group
// given, and every node given once over the pages.
func TestDigestsArePagedByGroup(t *testing.T) {
	set := digest.New()
	for i := 0; i < 10000; i++ {
		set.Put(mesh.PlacementBucket, fmt.Sprintf("node-%05d", i), []byte(`{"modules":[]}`))
	}
	req := Request{What: WhatDigests, Sums: make([]string, digest.Groups)}
	seen := map[string]bool{}
	pages := 0
	for {
		r := digestsOf(set, req)
		if r.Error != "" {
			t.Fatal(r.Error)
		}
		pages++
		n := 0
		for _, e := range r.Entries {
			var held map[string]string
			if err := json.Unmarshal(e.Value, &held); err != nil {
				t.Fatal(err)
			}
			for node := range held {
				if seen[node] {
					t.Errorf("node %s given twice", node)
				}
				seen[node] = true
			}
			n += len(held)
		}
		if r.Next == "" {
			break
		}
		if last := r.Entries[len(r.Entries)-1].Key; r.Next != last || n < DigestPage {
			t.Fatalf("page %d: next %q, last group %q, %d nodes; want the last group and at least %d nodes", pages, r.Next, last, n, DigestPage)
		}
		req.After = r.Next
	}
	if len(seen) != 10000 || pages != 3 {
		t.Errorf("%d nodes in %d pages; want 10000 in 3", len(seen), pages)
	}
	if r := digestsOf(set, Request{What: WhatDigests, Sums: []string{""}}); r.Error == "" {
		t.Error("a request with one sum was answered; want an error naming the groups")
	}
}
