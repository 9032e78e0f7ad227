package cli

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// get lists a provision whose names are the spec's in another case (spec
// 2: names are exact) as an odd key, not as a provided key: encoding/json
// folded the names and listed it provided.
func TestGetSaysValuesWithNamesInAnotherCase(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "seat")
	ctx := bustest.Context(t)
	kv, err := bus.Bucket(ctx, js, mesh.ProvisionsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	const key = bustest.FoldedKey
	if _, err := kv.Put(ctx, key, []byte(bustest.Folded)); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "get", "provisions", "-o", "wide", "--nats", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	want := key + `  value not as written: the name "Provision" is not the spec's "provision" (names are exact)`
	if !strings.Contains(out, want) || strings.Contains(out, "provided") {
		t.Errorf("get provisions:\n%s\nwant the odd key %q, and no key provided", out, want)
	}
}
