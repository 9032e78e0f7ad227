package provisioning_test

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The verb answers a provision whose names are the spec's in another case
// (spec 2: names are exact) as odd, never as an entry: encoding/json
// folded the names and answered it as a provided key of gitea on ace.
func TestVerbSaysValuesWithNamesInAnotherCase(t *testing.T) {
	f := serve(t)
	const key = bustest.FoldedKey
	f.put(mesh.ProvisionsBucket, key, []byte(bustest.Folded))
	const want = `value is not a provision as the spec names its fields: the name "Provision" is not the spec's "provision"`
	bustest.WaitFor(t, 0, key+" odd in the verb's answer", func() bool {
		r := f.ask(t, `{"what":"provisions","node":"ace"}`)
		for _, e := range r.Entries {
			if e.Key == key {
				t.Fatalf("the verb answers %s as an entry: %s", key, e.Value)
			}
		}
		for _, o := range r.Odd {
			if o.Key == key && strings.Contains(o.Why, want) {
				return true
			}
		}
		return false
	})
}
