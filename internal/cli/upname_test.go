package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestApplyMeshKeepsTheNameOnceTheDataHoldsIt checks, on a real server
// whose max payload is 64 KiB, when up keeps a new mesh's name in
// DATA/mesh-name: not when Apply refuses the whole file before it writes a
// key (a 100 kB manifest; the data still holds the mesh "prod"), but when it
// fails having written part of the new mesh (its placement bucket is full:
// the manifests, modules, builds and wants are written, the placement not),
// and when it applies the file whole. The name used to be written before
// Apply, so that a refused file left the data's mesh under the new name.
func TestApplyMeshKeepsTheNameOnceTheDataHoldsIt(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t, "max_payload: 65536")
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "operator")
	data := t.TempDir()
	if err := writeMeshName(data, "prod"); err != nil {
		t.Fatal(err)
	}
	kept := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(data, MeshNameFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	parse := func(text string) *meshfile.File {
		t.Helper()
		f, err := meshfile.Parse("other.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	big := parse("mesh: other\n" + strings.Replace(smallMesh, "placement:\n  control: [mesh-vault]\n",
		"  big:\n    builds:\n      - fp: 0b0b01\n        manifest: {module: big, contributes: [{collection: c, item: \""+
			strings.Repeat("x", 100_000)+"\"}]}\nplacement:\n  control: [mesh-vault, big]\n", 1))
	var progress bytes.Buffer
	err := applyMesh(ctx, js, big, "other.yaml", data, "prod", "other", &progress, &progress)
	if _, ok := errors.AsType[*meshfile.Errors](err); !ok {
		t.Fatalf("applyMesh of a 100 kB manifest over a 64 KiB max payload = %v; want *meshfile.Errors", err)
	}
	if k := kept(); k != "prod\n" {
		t.Errorf("after an apply refused whole, the kept name is %q; want prod (the data holds no key of other)", k)
	}
	if strings.Contains(progress.String(), "was named") {
		t.Errorf("an apply refused whole said %q; want no rename", progress.String())
	}

	// A full placement bucket: the placement, written last, fails.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: mesh.PlacementBucket, MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	small := parse("mesh: other\n" + smallMesh)
	progress.Reset()
	if err := applyMesh(ctx, js, small, "other.yaml", data, "prod", "other", &progress, &progress); err == nil {
		t.Fatal("applyMesh with a full placement bucket succeeded; want the placement's write to fail")
	}
	if k := kept(); k != "other\n" {
		t.Errorf("after an apply that wrote part of other, the kept name is %q; want other", k)
	}
	if want := `was named "prod" and is now named "other"`; !strings.Contains(progress.String(), want) {
		t.Errorf("an apply that wrote part of other said %q; want %q", progress.String(), want)
	}

	// Whole: the same file once the placement bucket takes it.
	if err := js.DeleteKeyValue(ctx, mesh.PlacementBucket); err != nil {
		t.Fatal(err)
	}
	progress.Reset()
	if err := applyMesh(ctx, js, small, "other.yaml", data, "other", "other", &progress, &progress); err != nil {
		t.Fatal(err)
	}
	if k := kept(); k != "other\n" {
		t.Errorf("after other applied whole, the kept name is %q; want other", k)
	}
	if got := progress.String(); strings.Contains(got, "was named") || !strings.Contains(got, "applied other.yaml: ") {
		t.Errorf("other applied whole again said %q; want only what it applied", got)
	}
}
