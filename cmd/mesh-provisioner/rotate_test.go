package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestRotateKeepsTheRunningClient runs a standalone deployment (the
// server's own binary, the seat and ace's client as processes) and rotates
// client-ace's key with "auth rotate --push" while its client runs on the
// credentials file rotate writes anew: the server drops the old key's
// connection, the client reconnects with the file's new key and keeps
// running (it says no removal of its access and no ERROR line), and
// applies a module placed on ace after the rotation. Its old key is
// refused.
func TestRotateKeepsTheRunningClient(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	work := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(work, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	one := write("one.yaml", strings.Replace(strings.Replace(joinMesh, "%s", ", ace", 1), "%s", "  ace: [app]\n", 1))
	web := "  web:\n    builds:\n      - fp: 0b0b0b\n        manifest: {module: web, dirs: [{name: state}]}\nplacement:"
	two := write("two.yaml", strings.Replace(strings.Replace(strings.Replace(joinMesh, "%s", ", ace", 1), "%s", "  ace: [app, web]\n", 1), "placement:", web, 1))

	runMain(t, "auth", "gen", "-f", two, "-o", dir)
	conf := filepath.Join(dir, auth.ConfigFile)
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	mine := append(mustReadFile(t, conf), []byte("\nlisten: 127.0.0.1:"+strconv.Itoa(port)+"\n")...)
	if err := os.WriteFile(conf, mine, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startNATS(t, conf)
	op := auth.CredsPath(dir, access.DefaultOperator)
	waitFor(t, 0, "nats-server to accept the operator", []*process{srv}, func() bool {
		nc, err := nats.Connect(url, nats.UserCredentials(op))
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	seat := start(t, "seat", "serve", "--nats", url, "--creds", auth.CredsPath(dir, mesh.Module))
	runMain(t, "apply", "-f", one, "--nats", url, "--creds", op)
	aceCreds := auth.CredsPath(dir, access.ClientUser("ace"))
	root := filepath.Join(t.TempDir(), "ace")
	client := start(t, "client-ace", "client", "--node", "ace", "--root", root, "--nats", url, "--creds", aceCreds)
	procs := []*process{srv, seat, client}

	nc, js, err := bus.Connect(bus.Dial{URL: url, Name: "operator", Creds: op})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := bustest.Context(t)
	plans := bus.Follow(ctx, js, mesh.PlansBucket, bus.Options{Create: true})
	applied := bus.Follow(ctx, js, mesh.AppliedBucket, bus.Options{Create: true})
	appliedPlan := func(key string) bool {
		pi, ok := plans.Get(key)
		ai, ok2 := applied.Get(key)
		var p mesh.Plan
		var a mesh.Applied
		return ok && ok2 && json.Unmarshal(pi.Value, &p) == nil && json.Unmarshal(ai.Value, &a) == nil && a.Fingerprint == p.Fingerprint
	}
	waitFor(t, 20*time.Second, "ace's client to apply ace.app", procs, func() bool { return appliedPlan("ace.app") })

	old := filepath.Join(t.TempDir(), "client-ace.creds")
	if err := os.WriteFile(old, mustReadFile(t, aceCreds), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runMain(t, "auth", "rotate", "-f", two, "-o", dir, access.ClientUser("ace"), "--push", url)
	if !strings.Contains(out, "rotated client-ace") {
		t.Errorf("auth rotate printed\n%s\nwant client-ace rotated", out)
	}
	waitFor(t, 20*time.Second, "ace's client to reconnect after the rotation", procs, func() bool {
		return strings.Contains(client.output(), "bus: reconnected")
	})
	if c, err := nats.Connect(url, nats.UserCredentials(old), nats.NoReconnect()); err == nil {
		c.Close()
		t.Error("client-ace's old key connects after its rotation was pushed")
	}
	runMain(t, "apply", "-f", two, "--nats", url, "--creds", op)
	waitFor(t, 30*time.Second, "ace's client to apply ace.web, placed after the rotation", procs, func() bool { return appliedPlan("ace.web") })
	if o := client.output(); strings.Contains(o, "access to the mesh was removed") || strings.Contains(o, "level=ERROR") {
		t.Errorf("ace's client, rotated, said:\n%s\nwant no removal of its access and no ERROR", o)
	}
}
