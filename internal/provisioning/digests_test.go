package provisioning_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/digest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// askDigests asks the verb for the digests of the groups whose sums in
// file differ, the buckets seen at their last revisions now.
func (f fixture) askDigests(t *testing.T, file *digest.Set, seen map[string]uint64) provisioning.Reply {
	t.Helper()
	body, _ := json.Marshal(provisioning.Request{What: provisioning.WhatDigests, Sums: file.Sums(), Seen: seen})
	return f.ask(t, string(body))
}

// lastSeq is the last revision of each of digest.Buckets.
func (f fixture) lastSeq(t *testing.T) map[string]uint64 {
	t.Helper()
	seen := map[string]uint64{}
	for _, b := range digest.Buckets {
		st, err := f.js.Stream(bustest.Context(t), "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		seen[b] = st.CachedInfo().State.LastSeq
	}
	return seen
}

// TestVerbSaysWhichNodesDiffer asks the verb's digests of placement,
// wants and haves: asked with the sums of exactly what the buckets hold,
// it answers no group; with one node's want changed in the asker's copy,
// the one group of that node, with the sums the verb holds of its nodes;
// an odd key of wants is listed under odd; and a write made just before
// the request, named by its revision in seen, is in the answer (the verb
// waits for its copies to take it), while a revision no copy reaches is
// answered with an error once the wait is over.
func TestVerbSaysWhichNodesDiffer(t *testing.T) {
	f := serveWith(t, provisioning.Options{Wait: 300 * time.Millisecond})
	keys := map[string]map[string][]byte{mesh.PlacementBucket: {}, mesh.WantsBucket: {}, mesh.HaveBucket: {}}
	for i := 0; i < 40; i++ {
		n := fmt.Sprintf("node-%02d", i)
		keys[mesh.PlacementBucket][n] = []byte(`{"modules":[{"module":"gitea"}]}`)
		keys[mesh.WantsBucket]["want."+n+".gitea"] = []byte(`{"fp":"b7c100"}`)
		keys[mesh.HaveBucket][n+".gitea"] = []byte(`{"phase":"running","health":"ok"}`)
	}
	for b, held := range keys {
		for k, v := range held {
			f.put(b, k, v)
		}
	}
	file := digest.Of(keys)
	if r := f.askDigests(t, file, f.lastSeq(t)); r.Error != "" || len(r.Entries)+len(r.Odd) != 0 {
		t.Fatalf("digests of what the buckets hold = %+v; want no group, nothing odd", r)
	}

	file.Put(mesh.WantsBucket, "want.node-07.gitea", []byte(`{"fp":"c0ffee"}`))
	r := f.askDigests(t, file, f.lastSeq(t))
	g := digest.GroupOf("node-07")
	if r.Error != "" || len(r.Entries) != 1 || r.Entries[0].Key != provisioning.GroupKey(g) {
		t.Fatalf("digests with node-07's want changed = %+v; want group %s alone", r, provisioning.GroupKey(g))
	}
	var held map[string]string
	if err := json.Unmarshal(r.Entries[0].Value, &held); err != nil {
		t.Fatal(err)
	}
	if got := file.Differ(map[int]map[string]string{g: held}); !slices.Equal(got, []string{"node-07"}) {
		t.Errorf("nodes differing = %v (answer %s); want node-07", got, r.Entries[0].Value)
	}

	f.put(mesh.WantsBucket, "want.node-07.gitea", []byte(`{"fp":"c0ffee"}`))
	f.put(mesh.WantsBucket, "odd", []byte(`{}`))
	r = f.askDigests(t, file, f.lastSeq(t))
	if r.Error != "" || len(r.Entries) != 0 {
		t.Errorf("digests once the bus holds node-07's new want = %+v; want no group", r)
	}
	if len(r.Odd) != 1 || r.Odd[0].Key != "odd" || !strings.Contains(r.Odd[0].Why, mesh.WantsBucket) {
		t.Errorf("odd = %+v; want the key odd of %s", r.Odd, mesh.WantsBucket)
	}

	seen := f.lastSeq(t)
	seen[mesh.HaveBucket] += 1000
	r = f.askDigests(t, file, seen)
	if !strings.Contains(r.Error, "the verb's copy of "+mesh.HaveBucket+" had taken revision ") || len(r.Entries) != 0 {
		t.Errorf("digests seen past the bucket = %+v; want an error saying the copy is behind", r)
	}
}
