package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestUnkeep keeps a retiring key with no, then unkeeps it: the seat
// clears the warrant and asks again.
func TestUnkeep(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	startRouter(t, s)
	startSeat(t, s, homelabFile)
	path := withoutVaultwarden(t)
	if _, _, err := run(t, "apply", "-f", path, "--nats", s.URL()); err != nil {
		t.Fatal(err)
	}
	const key = "ace.vaultwarden.database"
	_, js := bustest.Connect(t, s, "test")
	kv, err := js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	get := func() mesh.Provision {
		var p mesh.Provision
		if e, err := kv.Get(ctx, key); err == nil {
			_ = json.Unmarshal(e.Value(), &p)
		}
		return p
	}
	bustest.WaitFor(t, 0, key+" retiring with an ask", func() bool { p := get(); return p.State == mesh.Retiring && p.Ask != "" })
	first := get().Ask
	// The router records the ask a moment after the seat writes its id.
	bustest.WaitFor(t, 0, "the ask "+first+" listed by asks", func() bool {
		out, _, err := run(t, "asks", "-o", "json", "--nats", s.URL())
		return err == nil && strings.Contains(out, first)
	})
	if _, _, err := run(t, "answer", first, "no", "--user", "alice", "--nats", s.URL()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, key+" kept", func() bool { p := get(); return p.Warrant != nil && p.Warrant.Option == "no" })

	if _, _, err := run(t, "unkeep", "ace.gitea.database.main", "--nats", s.URL()); err == nil || !strings.Contains(err.Error(), "the key is not kept") {
		t.Errorf("unkeep of a provided key = %v; want the seat's refusal", err)
	}
	out, _, err := run(t, "unkeep", key, "--nats", s.URL())
	if err != nil || !strings.HasPrefix(out, key+" unkept: the no of alice at ") {
		t.Fatalf("unkeep = %q, %v", out, err)
	}
	bustest.WaitFor(t, 0, key+" asked again", func() bool {
		p := get()
		return p.State == mesh.Retiring && p.Warrant == nil && p.Ask != "" && p.Ask != first
	})
	// The router records the new ask a moment after the seat writes its id.
	next := get().Ask
	bustest.WaitFor(t, 0, "the new ask "+next+" listed by asks", func() bool {
		out, _, err = run(t, "asks", "-o", "json", "--nats", s.URL())
		return err == nil && strings.Contains(out, next)
	})
}
