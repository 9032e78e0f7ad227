package seat_test

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A value not of its kind at a shared credential's key (held on its
// provider's node, needed by the compositions of its consumers' nodes) is
// written anew, not deleted: the seat composed only the key's own node,
// which does not need it, and deleted it for good.
func TestSeatRewritesJunkAtASharedCredential(t *testing.T) {
	h := start(t, homelab(t))
	const key = "ace.gitea.credential.gitea_gitea-read" // needed by shanks's woodpecker
	h.put(mesh.ProvisionsBucket, key, `{"state":"nonsense"}`)
	bustest.WaitFor(t, 0, key+" written anew by the seat", func() bool {
		e, err := h.kv(mesh.ProvisionsBucket).Get(h.ctx, key)
		return err == nil && strings.Contains(string(e.Value()), `"provision":"credential"`)
	})
	h.settle()
	if p, ok := h.provision(key); !ok || p.State != mesh.Asked || !strings.Contains(p.Why, noEntry) {
		t.Errorf("%s = %+v, %v; want asked, %s", key, p, ok, noEntry)
	}
}
