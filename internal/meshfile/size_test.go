package meshfile_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// bigMesh is a valid mesh whose module big has a manifest holding an item
// of n bytes (its manifest starts at line 11), and whose node ace has a have with
// a detail of d bytes (line 13).
func bigMesh(n, d int) string {
	return fmt.Sprintf(`nodes: [ace]
modules:
  small:
    builds:
      - fp: a1
        manifest: {module: small}
  big:
    builds:
      - fp: b1
        manifest:
          module: big
          contributes: [{collection: "shell:zsh:normal", item: "%s"}]
placement: {ace: [small, big]}
haves:
  ace:
    big: {phase: running, health: ok, detail: "%s"}
`, strings.Repeat("x", n), strings.Repeat("y", d))
}

func TestParseRefusesValuesOverMaxPayload(t *testing.T) {
	// A 1.07 MB manifest: its record in mesh-indexer_manifests is larger
	// than NATS's default max payload.
	_, err := meshfile.Parse("big.yaml", []byte(bigMesh(1_070_000, 10)))
	errs, ok := errors.AsType[*meshfile.Errors](err)
	if !ok {
		t.Fatalf("Parse of a 1.07 MB manifest = %v; want *meshfile.Errors", err)
	}
	if len(errs.List) != 1 {
		t.Fatalf("errors = %v; want exactly one (the manifest)", errs.List)
	}
	e := errs.List[0]
	if e.Line != 11 || !strings.Contains(e.Msg, mesh.ManifestsBucket) ||
		!strings.Contains(e.Msg, "over the bus's max payload of 1048576 bytes") {
		t.Errorf("error = %q at line %d; want line 11 naming %s and the limit 1048576", e.Msg, e.Line, mesh.ManifestsBucket)
	}

	// A have's detail too large is said at its line as well.
	_, err = meshfile.Parse("big.yaml", []byte(bigMesh(10, 1_100_000)))
	errs, ok = errors.AsType[*meshfile.Errors](err)
	if !ok || len(errs.List) != 1 || errs.List[0].Line != 16 || !strings.Contains(errs.List[0].Msg, mesh.HaveBucket) {
		t.Fatalf("Parse of a 1.1 MB have detail = %v; want one error at line 16 naming %s", err, mesh.HaveBucket)
	}

	// Just under the limit is fine.
	if _, err := meshfile.Parse("big.yaml", []byte(bigMesh(1_000_000, 10))); err != nil {
		t.Errorf("Parse of a 1.0 MB manifest: %v; want it taken", err)
	}
}

func TestParseRefusesLongNames(t *testing.T) {
	long := strings.Repeat("n", meshfile.MaxName+1)
	text := "nodes: [" + long + "]\nmodules: {}\n"
	_, err := meshfile.Parse("long.yaml", []byte(text))
	errs, ok := errors.AsType[*meshfile.Errors](err)
	if !ok || len(errs.List) == 0 || errs.List[0].Line != 1 || !strings.Contains(errs.List[0].Msg, "longer than a name may be (128 bytes)") {
		t.Fatalf("Parse of a %d-byte node name = %v; want an error at line 1 saying the 128-byte limit", len(long), err)
	}
}

func TestApplyChecksSizesAgainstTheServer(t *testing.T) {
	// A server whose max payload is 64 KiB: a 100 kB manifest passes Parse
	// (1 MiB) but not Apply, which writes nothing at all.
	s := bustest.Server(t, "max_payload: 65536")
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "operator")
	f := parse(t, "big.yaml", bigMesh(100_000, 10))
	st, err := meshfile.Apply(ctx, js, f, time.Now())
	errs, ok := errors.AsType[*meshfile.Errors](err)
	if !ok {
		t.Fatalf("Apply = %v; want *meshfile.Errors", err)
	}
	if len(errs.List) != 1 || errs.List[0].Line != 11 || !strings.Contains(errs.List[0].Msg, "max payload of 65536 bytes") {
		t.Errorf("errors = %v; want one at line 11 naming the server's 65536 bytes", errs.List)
	}
	if st.Written != 0 || st.Removed != 0 {
		t.Errorf("Apply wrote %d and removed %d; want nothing", st.Written, st.Removed)
	}
	for _, b := range meshfile.Buckets {
		kv, err := js.KeyValue(ctx, b)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if keys := keysOf(t, ctx, js, b); len(keys) > 0 {
			t.Errorf("%s holds %d keys after a refused apply; want none", kv.Bucket(), len(keys))
		}
	}
}
