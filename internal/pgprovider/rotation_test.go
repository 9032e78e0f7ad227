package pgprovider_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider/pgtest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/registry"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// startClient runs the node's client of f's mesh on root until the
// returned func stops it.
func (f *fixture) startClient(root string) (*client.Client, func()) {
	f.t.Helper()
	nc, js := kittest.Connect(f.t, f.url, "client-"+f.node)
	log, said := kittest.Log()
	c, err := client.New(client.Config{Node: f.node, Root: root, JS: js, NC: nc, Log: log, Reload: true})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	stop := func() { cancel(); <-done }
	f.t.Cleanup(stop)
	f.t.Cleanup(func() {
		if f.t.Failed() {
			f.t.Logf("the client said:\n%s", said.Lines())
		}
	})
	return c, stop
}

// A rotation reaches the consumer: the old password stays valid while the
// consumer's node has not applied the new one; its client renders the
// module's template again with the new value, the vault puts it in force
// once the client's applied record says so, PostgreSQL sets it, and the
// client runs the module's reload once the provider holds what it
// rendered; the old password is refused from then on.
func TestRotationReachesTheConsumer(t *testing.T) {
	f := start(t, pgtest.DSN(t))
	ctx := context.Background()
	js := mustJSOf(t, f.url)
	// The registry and gitea's plan, as the seat writes them: a template
	// with its database password, and a reload that copies what it
	// rendered to running.conf (what the running module holds).
	reg, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: mesh.RegistryBucket})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range registry.Compiled() {
		b, _ := json.Marshal(a)
		if _, err := reg.Put(ctx, a.Kind, b); err != nil {
			t.Fatal(err)
		}
	}
	plans, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: mesh.PlansBucket})
	if err != nil {
		t.Fatal(err)
	}
	plan := mesh.Plan{Node: f.node, Module: "gitea", Fingerprint: "f1", Dirs: []mesh.Dir{{Name: "config", Unknown: mesh.UnknownProgram}},
		Templates: []mesh.Template{{Dir: "config", File: "db.conf", Text: "password=${secret:postgres_database}\n"}},
		Reload:    []string{"sh", "-c", "cp config/db.conf running.conf"}}
	b, _ := json.Marshal(plan)
	if _, err := plans.Put(ctx, f.node+".gitea", b); err != nil {
		t.Fatal(err)
	}
	db, cred := f.need("gitea", "")
	role := pgprovider.RoleName(f.mesh, db)
	root := t.TempDir()
	running := filepath.Join(root, "gitea", "running.conf")
	holds := func(what string, value string) {
		t.Helper()
		bustest.WaitFor(t, 20*time.Second, "running.conf holding "+what, func() bool {
			b, _ := os.ReadFile(running)
			return string(b) == "password="+value+"\n"
		})
	}
	_, stop := f.startClient(root)
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 1})
	first := f.password("gitea", cred)
	holds("generation 1", first.Value)
	if fi, err := os.Stat(filepath.Join(root, "gitea", "config", "db.conf")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the rendered file: %v, %v; want mode 0600", fi, err)
	}
	f.mustLogin(role, first.Value, role)

	// The consumer's node is down when the rotation comes: the old
	// password stays valid.
	stop()
	if _, err := f.vault.Rotate(cred.String()); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 10*time.Second, "the vault's entry naming generation 2 next", func() bool {
		e, ok := kittest.Entry(t, js, mesh.VaultModule, cred)
		return ok && e.Generation == 1 && e.Next == 2
	})
	second := f.password("gitea", cred)
	if second.Generation != 2 || second.Value == first.Value {
		t.Fatalf("the consumer is answered %+v; want a new value at generation 2", second)
	}
	f.mustLogin(role, first.Value, role)
	if p, _ := f.seat.Get(db); p.Reference == nil || p.Reference.Generation != 1 {
		t.Errorf("the database key while gitea's node has not applied generation 2: %+v; want postgres holding generation 1", p.Reference)
	}

	// The node comes back: it renders generation 2, the vault puts it in
	// force, postgres sets it, and the module is reloaded.
	_, _ = f.startClient(root)
	f.waitProvided(db, mesh.Reference{ID: cred.String(), Generation: 2})
	holds("generation 2", second.Value)
	applied, _ := js.KeyValue(ctx, mesh.AppliedBucket)
	bustest.WaitFor(t, 10*time.Second, "gitea's applied record saying generation 2, reloaded", func() bool {
		e, err := applied.Get(ctx, f.node+".gitea")
		if err != nil {
			return false
		}
		var a mesh.Applied
		json.Unmarshal(e.Value(), &a)
		return a.Credentials[cred.String()] == 2 && a.Reloaded && len(a.Problems) == 0
	})
	f.mustLogin(role, second.Value, role)
	f.refuseLogin(role, first.Value, role, "the password of generation 1")
	if b, _ := os.ReadFile(running); !strings.Contains(string(b), second.Value) {
		t.Errorf("running.conf = %q; want generation 2", b)
	}
}

func mustJSOf(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	_, js := kittest.Connect(t, url, "admin-"+t.Name())
	return js
}
