package state

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// takeValues are one value of each kind the seat decodes on its hot path,
// as their writers write them (the seat's provision with a reference, a
// vault's entry, an engine's have, the assigner's want, the controller's
// placement, the builder's build).
var takeValues = []struct{ name, bucket, key, value string }{
	{"provision", mesh.ProvisionsBucket, "ace.gitea.credential.gitea_gitea-read",
		`{"provision":"credential","local":"gitea_gitea-read","consumer":{"module":"gitea","node":"ace"},` +
			`"provider":{"module":"mesh-vault","node":"control"},"state":"provided",` +
			`"reference":{"id":"ace.gitea.credential.gitea_gitea-read","generation":1},"at":"2026-12-01T09:41:36Z"}`},
	{"entry", "mesh-vault_bound", "ace.gitea.credential.gitea_gitea-read",
		`{"state":"provided","vault-name":"ace.gitea.credential.gitea_gitea-read","generation":1}`},
	{"have", mesh.HaveBucket, "ace.gitea", `{"phase":"running","health":"ok","fp":"f00d4e11a2b3"}`},
	{"want", mesh.WantsBucket, "want.ace.gitea", `{"fp":"f00d4e11a2b3","removed":false}`},
	{"placement", mesh.PlacementBucket, "ace", `{"modules":[{"module":"gitea"},{"module":"postgres"},{"module":"mesh-vault"}]}`},
	{"build", mesh.BuildsBucket, "gitea.f00d4e11a2b3",
		`{"module":"gitea","fp":"f00d4e11a2b3","manifest":"sha256:00ff","at":"2026-12-01T09:41:36Z"}`},
}

// BenchmarkTake times Mesh.Take of one change of each kind the seat
// decodes (the same key again, a new revision each time), after checking
// that each takes as it should (no odd).
func BenchmarkTake(b *testing.B) {
	for _, v := range takeValues {
		b.Run(v.name, func(b *testing.B) {
			m := New()
			ch := bus.Change{Bucket: v.bucket, Key: v.key, Value: []byte(v.value), Revision: 1}
			if t := m.Take(ch); t.Odd != nil {
				b.Fatalf("Take(%s) is odd: %v", v.value, t.Odd)
			}
			b.ReportAllocs()
			for b.Loop() {
				ch.Revision++
				m.Take(ch)
			}
		})
	}
}

// TestTakeReadsNamesExactly takes values whose names are the spec's in
// another case (spec 2: names are exact; encoding/json folded them): each
// change is odd, saying the name; a value of a bucket the seat alone
// writes is junk (taken as absent); one of another writer is read without
// that name: an entry saying "STATE" says no state.
func TestTakeReadsNamesExactly(t *testing.T) {
	const key = bustest.FoldedKey
	m := New()
	for i, c := range []struct{ bucket, key, value, name string }{
		{mesh.ProvisionsBucket, key, bustest.Folded, "Provision"},
		{mesh.ProvisionsBucket, "ace.gitea.database", `{"provision":"database","local":"","consumer":{"module":"gitea","node":"ace"},` +
			`"provider":{"Module":"postgres","node":"control"},"state":"asked","why":"w","at":"2026-12-01T09:41:36Z"}`, "Module"},
		{mesh.RefusedBucket, "ace.gitea", `{"node":"ace","module":"gitea","Why":"w","since":"2026-12-01T09:41:36Z"}`, "Why"},
		{mesh.PlansBucket, "ace.gitea", `{"NODE":"ace","module":"gitea"}`, "NODE"},
		{"mesh-vault_bound", key, `{"STATE":"provided","Vault-Name":"x","Generation":3}`, "STATE"},
		{mesh.HaveBucket, "control.mesh-vault", `{"phase":"running","Health":"ok","fp":"f"}`, "Health"},
		{mesh.WantsBucket, "want.ace.gitea", `{"FP":"f"}`, "FP"},
		{mesh.PlacementBucket, "ace", `{"modules":[{"Module":"gitea"}]}`, "Module"},
	} {
		tc := m.Take(bus.Change{Bucket: c.bucket, Key: c.key, Value: []byte(c.value), Revision: uint64(i + 1)})
		if tc.Odd == nil || !errors.Is(tc.Odd, ErrOdd) || !strings.Contains(tc.Odd.Error(), `"`+c.name+`"`) {
			t.Errorf("Take(%s %s %s) odd = %v; want it odd, naming %q", c.bucket, c.key, c.value, tc.Odd, c.name)
		}
		own := c.bucket == mesh.ProvisionsBucket || c.bucket == mesh.PlansBucket || c.bucket == mesh.RefusedBucket
		if tc.Junk != own {
			t.Errorf("Take(%s %s %s) junk = %v; want %v", c.bucket, c.key, c.value, tc.Junk, own)
		}
	}
	if p, ok := m.Provision(key); ok {
		t.Errorf("Provision(%s) = %+v; want none (junk)", key, p)
	}
	if _, ok := m.Refusal("ace.gitea"); ok {
		t.Errorf("Refusal(ace.gitea) is kept; want none (junk)")
	}
	if _, ok := m.Plan("ace.gitea"); ok {
		t.Errorf("Plan(ace.gitea) is kept; want none (junk)")
	}
	if e, ok, err := m.Entry("mesh-vault", key); !ok || err != nil || e.State != "" || e.VaultName != "" || e.Generation != 0 {
		t.Errorf("Entry(mesh-vault, %s) = %+v, %v, %v; want one with no state, no error", key, e, ok, err)
	}
	if h, ok, err := m.Have("control", "mesh-vault"); !ok || err != nil || h.Phase != "running" || h.Health != "" {
		t.Errorf("Have(control, mesh-vault) = %+v, %v, %v; want running with no health", h, ok, err)
	}
	if fp, ok, err := m.Want("ace", "gitea"); !ok || err != nil || fp != "" {
		t.Errorf("Want(ace, gitea) = %q, %v, %v; want no fingerprint", fp, ok, err)
	}
	if mods, err := m.Placed("ace"); err != nil || len(mods) != 0 {
		t.Errorf("Placed(ace) = %q, %v; want no module (its item has no name)", mods, err)
	}
}

// A placement item with no module name (its name in another case, or
// "module":"") is odd and left out: no key token is empty, and the
// refusal composition made for it ("<node>.") was no key the bus stores,
// so the seat's write failed and it composed the node again without end.
// An item whose name is not valid is odd too but placed (composition holds
// it, its refusal key escaped); the others are placed as before.
func TestPlacementItemWithNoNameIsLeftOut(t *testing.T) {
	m := New()
	tc := m.Take(bus.Change{Bucket: mesh.PlacementBucket, Key: "control", Revision: 1,
		Value: []byte(`{"modules":[{"MODULE":"x"},{"module":"gitea"},{"module":""},{"module":"Bad_Name"},{"module":"mesh-vault"}]}`)})
	if !errors.Is(tc.Odd, ErrOdd) {
		t.Fatalf("Take(placement) odd = %v; want ErrOdd", tc.Odd)
	}
	for _, said := range []string{`"MODULE"`, "item 0 has no module name: left out", "item 2 has no module name: left out",
		`item 3: module "Bad_Name" is not a valid name: held`} {
		if !strings.Contains(tc.Odd.Error(), said) {
			t.Errorf("Take(placement) odd = %v; want it saying %s", tc.Odd, said)
		}
	}
	if strings.Contains(tc.Odd.Error(), "item 1") || strings.Contains(tc.Odd.Error(), "item 4") {
		t.Errorf("Take(placement) odd = %v; want nothing said of items 1 and 4", tc.Odd)
	}
	want := []string{"gitea", "Bad_Name", "mesh-vault"}
	if mods, err := m.Placed("control"); err != nil || !slices.Equal(mods, want) {
		t.Errorf("Placed(control) = %q, %v; want %q", mods, err, want)
	}
	if nodes := m.NodesOf(""); len(nodes) != 0 {
		t.Errorf("NodesOf(\"\") = %q; want none", nodes)
	}
	// The same placement with the spec's names is not odd.
	tc = m.Take(bus.Change{Bucket: mesh.PlacementBucket, Key: "control", Revision: 2,
		Value: []byte(`{"modules":[{"module":"gitea"},{"module":"mesh-vault"}]}`)})
	if tc.Odd != nil {
		t.Errorf("Take(placement) odd = %v; want none", tc.Odd)
	}
}

// TestManifestNamesAreExact: a manifest text whose names are the spec's in
// another case ({"Module":..}, a requirement's "FROM") is not a manifest,
// as one with an unknown name is not; encoding/json took them.
func TestManifestNamesAreExact(t *testing.T) {
	for text, bad := range map[string]bool{
		`{"module":"gitea","provides":[{"name":"gitea-read","credential":"shared"}]}`: false,
		`{"Module":"gitea","provides":[{"name":"gitea-read","credential":"shared"}]}`: true,
		`{"module":"gitea","requires":[{"provision":"database","FROM":"postgres"}]}`:  true,
	} {
		m := New()
		digest := mesh.Digest([]byte(text))
		record, _ := json.Marshal(mesh.ManifestRecord{JSON: text})
		tc := m.Take(bus.Change{Bucket: mesh.ManifestsBucket, Key: token.Escape(digest), Value: record, Revision: 1})
		_, err := m.Manifest(digest)
		if bad && (err == nil || !strings.Contains(err.Error(), "names are exact") || tc.Odd == nil) {
			t.Errorf("Manifest(%s) = %v, odd %v; want an error, names are exact", text, err, tc.Odd)
		}
		if !bad && (err != nil || tc.Odd != nil) {
			t.Errorf("Manifest(%s) = %v, odd %v; want a manifest", text, err, tc.Odd)
		}
	}
}
