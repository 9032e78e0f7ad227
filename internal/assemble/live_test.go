package assemble

import (
	"reflect"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestWanted checks what runs for a live mesh: mesh-vault and postgres
// where they are placed (postgres only when told), then a client per node
// (only when told), nodes sorted.
func TestWanted(t *testing.T) {
	m := access.Mesh{Nodes: []string{"dell", "control"}, Placement: map[string][]string{
		"control": {"redis", "postgres", "mesh-vault"}, "dell": {"app"}}}
	for _, tc := range []struct {
		name string
		runs Runs
		want []Component
	}{
		{"nothing told", Runs{}, []Component{{Role: Vault, Node: "control"}}},
		{"postgres", Runs{Postgres: true}, []Component{{Role: Postgres, Node: "control"}, {Role: Vault, Node: "control"}}},
		{"clients", Runs{Clients: true}, []Component{{Role: Vault, Node: "control"},
			{Role: Client, Node: "control"}, {Role: Client, Node: "dell"}}},
	} {
		if got := Wanted(m, tc.runs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Wanted = %v; want %v", tc.name, got, tc.want)
		}
	}
}

// TestLiveTakesTheMesh checks that the live mesh folds placement, modules
// and manifests into the parties' mesh (providers: the modules whose
// manifest keeps entries), and that a value that does not decode is an
// error naming its bucket and key, taken as placing nothing.
func TestLiveTakesTheMesh(t *testing.T) {
	l := newLive()
	for _, ch := range []struct {
		bucket, key, value string
	}{
		{mesh.PlacementBucket, "control", `{"modules":[{"module":"mesh-vault"},{"module":"app"}]}`},
		{mesh.ModulesBucket, "mesh-vault", `{"manifest":"d1"}`},
		{mesh.ModulesBucket, "app", `{"manifest":"d2"}`},
		{mesh.ManifestsBucket, mesh.ManifestKey("d1"), `{"json":"{\"module\":\"mesh-vault\",\"state\":[\"bound\"]}"}`},
		{mesh.ManifestsBucket, mesh.ManifestKey("d2"), `{"json":"{\"module\":\"app\"}"}`},
	} {
		if err := l.take(ch.bucket, ch.key, []byte(ch.value), false); err != nil {
			t.Fatalf("take %s %s: %v", ch.bucket, ch.key, err)
		}
	}
	want := access.Mesh{Nodes: []string{"control"}, Modules: []string{"app", "mesh-vault"}, Providers: []string{"mesh-vault"},
		Placement: map[string][]string{"control": {"mesh-vault", "app"}}}
	if got := l.mesh(); !reflect.DeepEqual(got, want) {
		t.Errorf("mesh = %+v; want %+v", got, want)
	}
	err := l.take(mesh.PlacementBucket, "dell", []byte(`{"modules":`), false)
	if err == nil || err.Error()[:len(mesh.PlacementBucket+" dell")] != mesh.PlacementBucket+" dell" {
		t.Errorf("take of a placement that does not decode = %v; want an error naming %s dell", err, mesh.PlacementBucket)
	}
	if got := l.mesh(); len(got.Nodes) != 2 || len(got.Placement["dell"]) != 0 {
		t.Errorf("after an undecodable placement of dell, mesh = %+v; want dell with nothing placed", got)
	}
	l.take(mesh.PlacementBucket, "dell", nil, true)
	if got := l.mesh(); !reflect.DeepEqual(got.Nodes, []string{"control"}) {
		t.Errorf("after dell's placement deleted, nodes = %v; want control", got.Nodes)
	}
}

// TestLiveContributionsAndHeldKeys checks that the live mesh names the
// collections each module's manifests contribute to (of modules in the
// mesh only), and the keys of applied and collect a node holds that its
// placement no longer gives it (a module moved away): its client may
// still delete them; the keys placement gives are not held.
func TestLiveContributionsAndHeldKeys(t *testing.T) {
	l := newLive()
	for _, ch := range []struct {
		bucket, key, value string
	}{
		{mesh.PlacementBucket, "control", `{"modules":[{"module":"app"}]}`},
		{mesh.PlacementBucket, "dell", `{"modules":[]}`},
		{mesh.ModulesBucket, "app", `{"manifest":"d2"}`},
		{mesh.ManifestsBucket, mesh.ManifestKey("d2"), `{"json":"{\"module\":\"app\",\"contributes\":[{\"collection\":\"shell:zsh\",\"item\":\"x\"}]}"}`},
		{mesh.ManifestsBucket, mesh.ManifestKey("d3"), `{"json":"{\"module\":\"app\",\"contributes\":[{\"collection\":\"environment\",\"item\":\"y\"}]}"}`},
		{mesh.ManifestsBucket, mesh.ManifestKey("d4"), `{"json":"{\"module\":\"gone\",\"contributes\":[{\"collection\":\"environment\",\"item\":\"y\"}]}"}`},
		{mesh.AppliedBucket, "control.app", `{}`},
		{mesh.AppliedBucket, "dell.app", `{}`},
		{mesh.CollectBucket, "control.shell=3Azsh.app", `{}`},
		{mesh.CollectBucket, "control.old.app", `{}`},
		{mesh.CollectBucket, "dell.environment.app", `{}`},
	} {
		if err := l.take(ch.bucket, ch.key, []byte(ch.value), false); err != nil {
			t.Fatalf("take %s %s: %v", ch.bucket, ch.key, err)
		}
	}
	m := l.mesh()
	if want := map[string][]string{"app": {"environment", "shell:zsh"}}; !reflect.DeepEqual(m.Contributes, want) {
		t.Errorf("Contributes = %v; want %v", m.Contributes, want)
	}
	want := map[string]access.HeldKeys{
		"control": {Collect: []string{"control.old.app"}},
		"dell":    {Applied: []string{"dell.app"}, Collect: []string{"dell.environment.app"}},
	}
	if !reflect.DeepEqual(m.Held, want) {
		t.Errorf("Held = %+v; want %+v", m.Held, want)
	}
	// Deleted, the keys are held no more.
	for _, k := range []string{"dell.app"} {
		if err := l.take(mesh.AppliedBucket, k, nil, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"dell.environment.app", "control.old.app"} {
		if err := l.take(mesh.CollectBucket, k, nil, true); err != nil {
			t.Fatal(err)
		}
	}
	if m := l.mesh(); m.Held != nil {
		t.Errorf("Held once the records are deleted = %+v; want none", m.Held)
	}
}
