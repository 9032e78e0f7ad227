package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The lab of TestUpFollowsTheLiveMesh: mesh-vault, redis (a shared
// credential its consumers get from the vault) and app (redis' consumer).
// labModules are its modules; each step places them differently.
const labModules = `modules:
  mesh-vault:
    builds:
      - fp: 9c0d51
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound, store],
                   reads: [mesh-provisioner.plans, mesh-provisioner.provisions], dirs: [{name: state, unknown: program}]}
  redis:
    builds:
      - fp: 71be02
        manifest: {module: redis, provides: [{name: cache, credential: shared}], dirs: [{name: state}], ports: [{name: resp}]}
  app:
    builds:
      - fp: a9a9a9
        manifest: {module: app, requires: [{provision: cache, from: redis}], dirs: [{name: state}]}
`

// upURL is the line up prints with its server's URL.
var upURL = regexp.MustCompile(`NATS with JetStream on (nats://[0-9.:]+) `)

// TestUpFollowsTheLiveMesh runs up as a process of its own on a lab with
// no mesh-vault placed, and changes the mesh with "apply -f" (a process
// too), never restarting up:
//   - mesh-vault and app (which needs redis' credential) placed on
//     control: up starts the vault (says so), and
//     control.redis.credential.redis_cache is provided;
//   - a node dell added with app: up issues client-dell (its credentials
//     file appears), starts dell's client, which applies dell.app at its
//     plan's fingerprint;
//   - redis moved from control to dell: dell's client applies
//     dell.redis, control's deletes control.redis; and back;
//   - dell removed: dell's client removes its applied records, then up
//     stops it (says so) and client-dell's credentials are revoked (moved
//     to auth/revoked, and refused by the running server);
//   - mesh-vault (and app, its consumer) unplaced: up stops the vault
//     (says so), and mesh-vault's old credentials are refused; placed
//     again, it runs as a new user of the same name and provides.
func TestUpFollowsTheLiveMesh(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	dir := t.TempDir()
	lab := func(name, nodes, placement string) string {
		path := filepath.Join(dir, name)
		text := "nodes: [" + nodes + "]\n" + labModules + "placement:\n" + placement
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	first := lab("lab.yaml", "control", "  control: [redis]\n")
	up := start(t, "up", "up", first, "--data", data, "--listen", "127.0.0.1:0", "--web", "", "--log-level", "warn")
	procs := []*process{up}
	var url string
	waitFor(t, 60*time.Second, "up to run", procs, func() bool {
		m := upURL.FindStringSubmatch(up.output())
		if m != nil {
			url = m[1]
		}
		return m != nil && strings.Contains(up.output(), "up: running")
	})
	authDir := filepath.Join(data, "auth")
	opCreds := auth.CredsPath(authDir, access.DefaultOperator)
	nc, js, err := bus.Connect(bus.Dial{URL: url, Name: "test-operator", Creds: opCreds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx := bustest.Context(t)
	provisions := bus.Follow(ctx, js, mesh.ProvisionsBucket, bus.Options{})
	plans := bus.Follow(ctx, js, mesh.PlansBucket, bus.Options{})
	applied := bus.Follow(ctx, js, mesh.AppliedBucket, bus.Options{})
	provision := func(key string) mesh.Provision {
		it, ok := provisions.Get(key)
		var p mesh.Provision
		if !ok || json.Unmarshal(it.Value, &p) != nil {
			return mesh.Provision{}
		}
		return p
	}
	state := func(key string) mesh.State { return provision(key).State }
	apply := func(path string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "apply", "-f", path, "--yes", "--nats", url, "--creds", opCreds)
		cmd.Env = append(os.Environ(), asMain+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apply -f %s: %v\n%s", path, err, out)
		}
	}
	const controlCred = "control.redis.credential.redis_cache"
	// No vault runs while none is placed (a file whose consumers need a
	// credential with none placed is refused: lab.yaml places no consumer).
	waitFor(t, 0, "control's client to apply control.redis", procs, func() bool {
		_, ok := applied.Get("control.redis")
		return ok
	})
	if strings.Contains(up.output(), "vault on control") {
		t.Errorf("up said:\n%s\nwant no vault with mesh-vault not placed", up.output())
	}

	// mesh-vault placed after start.
	apply(lab("lab2.yaml", "control", "  control: [mesh-vault, redis, app]\n"))
	waitFor(t, 20*time.Second, controlCred+" provided once mesh-vault is placed", procs, func() bool {
		return state(controlCred) == mesh.Provided
	})
	if want := "started vault on control (mesh-vault placed on control)"; !strings.Contains(up.output(), want) {
		t.Errorf("up said:\n%s\nwant a line %q", up.output(), want)
	}

	// A node added.
	dellCreds := auth.CredsPath(authDir, access.ClientUser("dell"))
	if _, err := os.Stat(dellCreds); err == nil {
		t.Fatalf("%s exists before dell is in the mesh", dellCreds)
	}
	apply(lab("lab3.yaml", "control, dell", "  control: [mesh-vault, redis, app]\n  dell: [app]\n"))
	waitFor(t, 20*time.Second, "dell's client to apply dell.app", procs, func() bool {
		pi, ok := plans.Get("dell.app")
		ai, ok2 := applied.Get("dell.app")
		var p mesh.Plan
		var a mesh.Applied
		return ok && ok2 && json.Unmarshal(pi.Value, &p) == nil && json.Unmarshal(ai.Value, &a) == nil &&
			a.Fingerprint == p.Fingerprint
	})
	if _, err := os.Stat(dellCreds); err != nil {
		t.Errorf("dell's client applies its plans, but %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "nodes", "dell", "app", "state")); err != nil {
		t.Errorf("dell's client made no folder app/state under its root: %v", err)
	}
	if want := "started client of dell (dell is in the mesh)"; !strings.Contains(up.output(), want) {
		t.Errorf("up said:\n%s\nwant a line %q", up.output(), want)
	}

	// redis moved from control to dell: dell's client, its user issued
	// anew, writes dell.redis (a key its old user could not write), and
	// control's client deletes control.redis (its user keeps the key
	// while control holds it).
	apply(lab("lab3m.yaml", "control, dell", "  control: [mesh-vault, app]\n  dell: [app, redis]\n"))
	waitFor(t, 30*time.Second, "dell's client to apply dell.redis and control's to delete control.redis", procs, func() bool {
		pi, ok := plans.Get("dell.redis")
		ai, ok2 := applied.Get("dell.redis")
		_, stale := applied.Get("control.redis")
		var p mesh.Plan
		var a mesh.Applied
		return ok && ok2 && !stale && json.Unmarshal(pi.Value, &p) == nil && json.Unmarshal(ai.Value, &a) == nil &&
			a.Fingerprint == p.Fingerprint
	})

	// And back: control's client writes control.redis again, dell's
	// deletes dell.redis.
	apply(lab("lab3n.yaml", "control, dell", "  control: [mesh-vault, redis, app]\n  dell: [app]\n"))
	waitFor(t, 30*time.Second, "control's client to apply control.redis and dell's to delete dell.redis", procs, func() bool {
		_, ok := applied.Get("control.redis")
		_, stale := applied.Get("dell.redis")
		return ok && !stale
	})

	// The node removed: its client hands over, stops, and its user is
	// revoked.
	before := len(up.output())
	apply(lab("lab4.yaml", "control", "  control: [mesh-vault, redis, app]\n"))
	stopped := "stopped client of dell (dell left the mesh)"
	waitFor(t, 20*time.Second, "up to say "+stopped, procs, func() bool { return strings.Contains(up.output(), stopped) })
	if _, ok := applied.Get("dell.app"); ok {
		t.Errorf("dell's client stopped with its record dell.app still in %s", mesh.AppliedBucket)
	}
	revoked := filepath.Join(authDir, auth.RevokedDir, access.ClientUser("dell")+auth.CredsExt)
	waitFor(t, 10*time.Second, "client-dell revoked ("+revoked+")", procs, func() bool {
		_, err := os.Stat(revoked)
		return err == nil
	})

	// Its old credentials are refused (the accounts were pushed), while
	// the operator's still connect.
	waitFor(t, 10*time.Second, "client-dell's old credentials refused", procs, refused(url, revoked))
	for _, line := range strings.Split(up.output()[before:], "\n") {
		if strings.Contains(line, "component=client-dell") && strings.Contains(line, "authentication revoked") {
			t.Errorf("dell's client was revoked while it ran, before it handed over: %s", line)
		}
		// A leaving node's client stops once, on the user it ran as.
		if strings.Contains(line, "client of dell (its credentials changed)") || strings.Contains(line, "started client of dell") {
			t.Errorf("dell's client, its node leaving, was started again before it stopped: %s", line)
		}
	}
	if nc, _, err := bus.Connect(bus.Dial{URL: url, Name: "operator-again", Creds: opCreds}); err != nil {
		t.Errorf("the operator's credentials after client-dell's revocation: %v", err)
	} else {
		nc.Close()
	}

	// mesh-vault unplaced.
	apply(lab("lab5.yaml", "control", "  control: [redis]\n"))
	stopped = "stopped vault on control (mesh-vault is no longer placed on control; its work handed on)"
	waitFor(t, 20*time.Second, "up to say "+stopped, procs, func() bool { return strings.Contains(up.output(), stopped) })
	// Its user is revoked: the vault's old credentials are refused.
	vaultRevoked := filepath.Join(authDir, auth.RevokedDir, mesh.VaultModule+auth.CredsExt)
	waitFor(t, 10*time.Second, "mesh-vault revoked ("+vaultRevoked+")", procs, func() bool {
		_, err := os.Stat(vaultRevoked)
		return err == nil
	})
	waitFor(t, 10*time.Second, "mesh-vault's old credentials refused", procs, refused(url, vaultRevoked))

	// Placed again: a new user, the vault runs again and provides.
	apply(lab("lab6.yaml", "control", "  control: [mesh-vault, redis, app]\n"))
	waitFor(t, 20*time.Second, "the vault started again and "+controlCred+" provided", procs, func() bool {
		return strings.Count(up.output(), "started vault on control") == 2 && state(controlCred) == mesh.Provided
	})
	// Every change above is routine: nothing is said at error level.
	for _, line := range strings.Split(up.output(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("up said at error level in a routine change: %s", line)
		}
	}
}

// refused returns a check that the server at url refuses the credentials
// file at path (an authorization violation; the file is pushed as revoked
// a moment after it is moved aside).
func refused(url, path string) func() bool {
	return func() bool {
		nc, _, err := bus.Connect(bus.Dial{URL: url, Name: "old-creds", Creds: path})
		if err == nil {
			nc.Close()
			return false
		}
		return strings.Contains(err.Error(), "Authorization Violation")
	}
}
