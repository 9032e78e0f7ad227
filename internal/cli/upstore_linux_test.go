package cli_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestUpOnASmallDisk runs the README's first command on a data directory
// whose disk is 512 MiB, far below what the mesh's buckets reserve
// (about 20 GiB): up makes every bucket, the seat composes the homelab
// and the vault answers. Before, the server's max store was 75% of the free
// disk and the first buckets were refused ("insufficient storage
// resources").
func TestUpOnASmallDisk(t *testing.T) {
	t.Parallel()
	data := bustest.SmallDisk(t, 512<<20)
	out, errOut, err := run(t, "up", "--once", "-o", "json", "--data", data, "--listen", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("up --once on a disk of 512 MiB: %v\n%s", err, errOut)
	}
	var kept struct {
		Plans      map[string]mesh.Plan      `json:"plans"`
		Provisions map[string]mesh.Provision `json:"provisions"`
		Refused    map[string]mesh.Refusal   `json:"refused"`
	}
	if err := json.Unmarshal([]byte(out), &kept); err != nil {
		t.Fatalf("up --once -o json printed no JSON object: %v\n%s", err, out)
	}
	if len(kept.Plans) != 18 || len(kept.Provisions) != 41 || len(kept.Refused) != 0 {
		t.Errorf("up --once kept %d plans, %d provisions, %d refused; want 18, 41, 0",
			len(kept.Plans), len(kept.Provisions), len(kept.Refused))
	}
	if p := kept.Provisions["control.redis.credential.redis_cache"]; p.State != mesh.Provided || p.Reference == nil {
		t.Errorf("redis' shared credential = %+v; want provided by the vault", p)
	}
}

// TestAuthGenServerOnASmallDisk: the server file auth gen writes (and
// each of a cluster's) sets the max store the homelab's buckets reserve;
// a server from it whose store lies on a disk of 512 MiB takes it, and
// the seat, under its generated user, makes every bucket of the setup.
// Before, the file set none and the seat's first buckets were refused.
func TestAuthGenServerOnASmallDisk(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	if _, _, err := run(t, "auth", "gen", "-f", "../../examples/homelab.yaml", "-o", dir,
		"--server", "n1=127.0.0.1", "--server", "n2=127.0.0.2", "--server", "n3=127.0.0.3"); err != nil {
		t.Fatalf("auth gen: %v", err)
	}
	f, err := meshfile.ParseFile("../../examples/homelab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := access.StoreReserved(assemble.Providers(f))
	for _, conf := range []string{filepath.Join(dir, auth.ConfigFile), filepath.Join(dir, auth.ServersDir, "n2", auth.ConfigFile)} {
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("nats-server refuses %s: %v", conf, err)
		}
		if opts.JetStreamMaxStore < want || opts.JetStreamMaxStore >= want+1<<30 {
			t.Errorf("%s: max_file_store %d; want %d, what the homelab's buckets reserve, rounded up to GiB", conf, opts.JetStreamMaxStore, want)
		}
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: bustest.SmallDisk(t, 512<<20), Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	a := &assemble.Assembly{Dial: assemble.Shared(s.URL(), auth.CredsPath(dir, "mesh-provisioner"), nil)}
	if err := a.MakeBuckets(bustest.Context(t)); err != nil {
		t.Fatalf("the seat makes the setup's buckets on the generated server, its store on 512 MiB: %v", err)
	}
}
