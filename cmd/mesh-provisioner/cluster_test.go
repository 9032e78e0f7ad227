package main

import (
	"context"
	"fmt"
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
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestClusterFromGeneratedFiles runs the three servers auth gen writes
// with --server, each nats-server's own binary: they form a cluster with
// authenticated routes, a bucket of three replicas is made, every server
// accepts the generated users, and a node removed with node leave is
// refused at once on every server.
func TestClusterFromGeneratedFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	work := t.TempDir()
	mesh2 := filepath.Join(work, "two.yaml")
	mesh1 := filepath.Join(work, "one.yaml")
	if err := os.WriteFile(mesh2, []byte(strings.Replace(strings.Replace(joinMesh, "%s", ", ace", 1), "%s", "  ace: [app]\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mesh1, []byte(strings.Replace(strings.Replace(joinMesh, "%s", "", 1), "%s", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var urls []string
	args := []string{"auth", "gen", "-f", mesh2, "-o", dir, "--cluster", "lab"}
	for i := 1; i <= 3; i++ {
		client, route, http, leaf := freePort(t), freePort(t), freePort(t), freePort(t)
		args = append(args, "--server", fmt.Sprintf("nats-%d=127.0.0.1:%d:%d:%d:%d", i, client, route, http, leaf))
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(client))
	}
	out := runMain(t, args...)
	var procs []*process
	for i := 1; i <= 3; i++ {
		conf := filepath.Join(dir, auth.ServersDir, "nats-"+strconv.Itoa(i), auth.ConfigFile)
		if !strings.Contains(out, "server: nats-server -c "+conf) {
			t.Fatalf("auth gen printed\n%s\nwant it to name %s", out, conf)
		}
		procs = append(procs, startNATS(t, conf))
	}
	all := strings.Join(urls, ",")
	op := auth.CredsPath(dir, access.DefaultOperator)

	// The cluster forms: a bucket of three replicas is made.
	waitFor(t, 30*time.Second, "a bucket of three replicas", procs, func() bool {
		// As the seat, which alone makes buckets.
		nc, js, err := bus.Connect(bus.Dial{URL: all, Name: "seat", Creds: auth.CredsPath(dir, mesh.Module), Replicas: 3})
		if err != nil {
			return false
		}
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = bus.Bucket(ctx, js, "mesh-controller_placement", 0)
		return err == nil
	})
	ace := auth.CredsPath(dir, access.ClientUser("ace"))
	old := filepath.Join(t.TempDir(), "client-ace.creds")
	if b, err := os.ReadFile(ace); err != nil || os.WriteFile(old, b, 0o600) != nil {
		t.Fatal(err)
	}
	connects := func(url, creds string) bool {
		nc, err := nats.Connect(url, nats.UserCredentials(creds), nats.NoReconnect())
		if err == nil {
			nc.Close()
		}
		return err == nil
	}
	for _, url := range urls {
		if !connects(url, old) || !connects(url, op) {
			t.Errorf("%s refuses the generated users", url)
		}
	}
	out = runMain(t, "node", "leave", "ace", "-f", mesh1, "-o", dir, "--nats", all, "--servers", "3")
	if !strings.Contains(out, "(3 servers took each)") {
		t.Errorf("node leave printed\n%s\nwant 3 servers to have taken each account", out)
	}
	for _, url := range urls {
		if connects(url, old) {
			t.Errorf("%s accepts ace's credentials after node leave", url)
		}
		if !connects(url, auth.CredsPath(dir, access.ClientUser("control"))) {
			t.Errorf("%s refuses control's client after ace left", url)
		}
	}
}
