package meshfile_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

// docBlock is one fenced block of a markdown file: its info string
// ("yaml", or "" for a plain block) and its lines.
type docBlock struct {
	info string
	text string
	line int // the line of its opening fence
}

func docBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	var cur *docBlock
	for i, l := range strings.Split(string(data), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &docBlock{info: strings.TrimPrefix(l, "```"), line: i + 1}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s: the block at line %d is not closed", path, cur.line)
	}
	return out
}

// TestMeshfileDocExamples checks every YAML block of docs/meshfile.md, the
// reference of the mesh file: a block that starts "# refused" must be
// refused with exactly the errors the plain block after it prints (as
// broken.yaml); every other must parse with no error or warning and apply
// to a real server, and applying it again must write nothing.
func TestMeshfileDocExamples(t *testing.T) {
	const doc = "../../docs/meshfile.md"
	blocks := docBlocks(t, doc)
	checked := 0
	for i, b := range blocks {
		if b.info != "yaml" {
			continue
		}
		checked++
		if strings.HasPrefix(b.text, "# refused") {
			_, err := meshfile.Parse("broken.yaml", []byte(b.text))
			errs, ok := errors.AsType[*meshfile.Errors](err)
			if !ok {
				t.Errorf("%s:%d: Parse = %v; want it refused", doc, b.line, err)
				continue
			}
			if i+1 >= len(blocks) || blocks[i+1].info != "" {
				t.Errorf("%s:%d: a refused example is followed by no plain block of its errors", doc, b.line)
				continue
			}
			var said []string
			for _, l := range strings.Split(blocks[i+1].text, "\n") {
				if strings.HasPrefix(l, "broken.yaml:") {
					said = append(said, l)
				}
			}
			if got := errs.Error(); got != strings.Join(said, "\n") {
				t.Errorf("%s:%d: the doc says the errors\n%s\nParse says\n%s", doc, blocks[i+1].line, strings.Join(said, "\n"), got)
			}
			if want := "refused with " + errs.Count() + "; nothing written"; !strings.Contains(blocks[i+1].text, want) {
				t.Errorf("%s:%d: the doc does not say %q", doc, blocks[i+1].line, want)
			}
			continue
		}
		f, err := meshfile.Parse("doc.yaml", []byte(b.text))
		if err != nil {
			t.Errorf("%s:%d: the example does not parse: %v", doc, b.line, err)
			continue
		}
		if len(f.Warnings) > 0 {
			t.Errorf("%s:%d: the example parses with warnings %v", doc, b.line, f.Warnings)
		}
		s := bustest.Server(t)
		_, js := bustest.Connect(t, s, "apply")
		ctx := bustest.Context(t)
		st, err := meshfile.Apply(ctx, js, f, time.Now())
		if err != nil || st.Written == 0 {
			t.Errorf("%s:%d: Apply = %+v, %v; want keys written", doc, b.line, st, err)
			continue
		}
		if st, err := meshfile.Apply(ctx, js, f, time.Now()); err != nil || st.Written+st.Removed != 0 {
			t.Errorf("%s:%d: Apply again = %+v, %v; want nothing written", doc, b.line, st, err)
		}
	}
	if checked < 3 {
		t.Errorf("%s has %d YAML blocks; the test expects the smallest file, the two-node mesh and the refused one", doc, checked)
	}
}
