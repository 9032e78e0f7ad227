package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestCaptureAndBench captures the homelab as the seat left it and times
// composing its nodes over the capture.
func TestCaptureAndBench(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	startSeat(t, s, homelabFile)
	path := filepath.Join(t.TempDir(), "homelab.capture.json")
	out, _, err := run(t, "capture", path, "--nats", s.URL())
	if err != nil || !strings.HasPrefix(out, "captured ") {
		t.Fatalf("capture = %q, %v", out, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c Capture
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Buckets[mesh.PlacementBucket]["ace"]; !ok {
		t.Errorf("capture holds no placement of ace: %v", c.Buckets[mesh.PlacementBucket])
	}
	if _, ok := c.Buckets[mesh.ProvisionsBucket]["g14.grafana.database"]; !ok {
		t.Errorf("capture holds no provision g14.grafana.database")
	}
	if _, ok := c.Buckets["mesh-vault_bound"]; !ok {
		t.Errorf("capture holds no bucket of the vault's entries: %d buckets", len(c.Buckets))
	}
	// The capture, read along with the mesh, holds each bucket as a read of
	// it alone does (the seat has settled: nothing changes meanwhile).
	_, js := bustest.Connect(t, s, "test")
	keys := 0
	for bucket, kv := range c.Buckets {
		ans, err := readBucket(bustest.Context(t), js, bucket, func(string, []byte) (bool, string) { return true, "" })
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, it := range ans.Items {
			want[it.Key] = string(it.Value)
		}
		if !maps.Equal(kv, want) {
			t.Errorf("capture of %s holds %d keys; a read of it %d, or other values", bucket, len(kv), len(want))
		}
		keys += len(kv)
	}
	if !strings.HasPrefix(out, fmt.Sprintf("captured %d keys of %d buckets", keys, len(c.Buckets))) {
		t.Errorf("capture said %q; it holds %d keys of %d buckets", out, keys, len(c.Buckets))
	}
	// Composing the captured mesh changes nothing: it is as the seat left it.
	m, odd := loadCapture(c)
	if len(odd) > 0 {
		t.Errorf("loading the capture said %v", odd)
	}
	for _, n := range m.Nodes() {
		if res := compose.Node(m, n, c.At); res.Changed() {
			t.Errorf("composing %s over the capture changes %d plans, %d provisions; want nothing", n, len(res.Plans), len(res.Provisions))
		}
	}
	out, _, err = run(t, "bench", path, "--rounds", "3")
	if err != nil || !strings.HasPrefix(out, "4 nodes x 3 rounds = 12 compositions of "+path) || !strings.Contains(out, "\np50 ") ||
		!strings.Contains(out, "  p99 ") || !strings.Contains(out, "  max ") {
		t.Errorf("bench = %q, %v", out, err)
	}
}

// TestReadMeshReadsTheMeshFilesBuckets holds what apply --dry-run relies
// on: readMesh reads every bucket a mesh file writes, so that the dry run
// takes them from its one read of the mesh.
func TestReadMeshReadsTheMeshFilesBuckets(t *testing.T) {
	t.Parallel()
	for _, b := range meshfile.Buckets {
		if !slices.Contains(meshBuckets, b) {
			t.Errorf("readMesh does not read %s, a bucket a mesh file writes", b)
		}
	}
}
