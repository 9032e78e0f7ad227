package vault

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
)

// lines returns how many records the store file in dir holds.
func lines(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// Superseded records are compacted while the store runs, not only at the
// next start: 300 rotations of one value among 10 leave a log bounded by
// the values it keeps, and the log reopens to the last generation of each.
func TestStoreCompactsWhileRunning(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]Value{}
	for i := range 10 {
		v, err := s.Ensure(fmt.Sprintf("ace.m%d.credential.postgres_database", i))
		if err != nil {
			t.Fatal(err)
		}
		kept[v.Name] = v
	}
	const name = "ace.m0.credential.postgres_database"
	most := 0
	for range 300 {
		v, err := s.Rotate(name)
		if err != nil {
			t.Fatal(err)
		}
		kept[name] = v
		most = max(most, lines(t, dir))
	}
	if kept[name].Generation != 301 {
		t.Fatalf("generation after 300 rotations = %d; want 301", kept[name].Generation)
	}
	// The bound: 2 a value kept and 64, then one compaction.
	if bound := 2*10 + 64 + 1; most > bound || s.compactions == 0 {
		t.Errorf("300 rotations: the log held up to %d records, %d compactions; want at most %d and some", most, s.compactions, bound)
	}
	again, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for n, v := range kept {
		if got, ok := again.Get(n); !ok || got != v {
			t.Errorf("%s after reopening = %+v, %v; want %+v", n, got, ok, v)
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, StoreFile+".*")); len(entries) != 0 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// A compaction that cannot be written (a full disk) keeps the old log
// whole and the store running, and says it; a crash in the middle of one
// (its temporary file written, not renamed) leaves the old log, and the
// temporary file is removed at the next open.
func TestStoreCompactionFailsSafely(t *testing.T) {
	disk := bustest.SmallDisk(t, 64<<10)
	dir := filepath.Join(disk, "vault")
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	log, said := kittest.Log()
	s.said = log
	a, _ := s.Ensure("a")
	// Rotations until the log is one record short of compacting, the disk
	// then filled but for the log's last page.
	for s.records <= 2*1+64-1 {
		if a, err = s.Rotate("a"); err != nil {
			t.Fatal(err)
		}
	}
	free := fill(t, filepath.Join(disk, "filler"))
	// The next rotations still fit in the log's last page; the
	// compaction's new file does not.
	var handed []Value
	for range 3 {
		v, err := s.Rotate("a")
		if err != nil {
			break
		}
		handed = append(handed, v)
	}
	if len(handed) == 0 {
		t.Fatal("no rotation fit in the log's last page")
	}
	a = handed[len(handed)-1]
	if s.compactions != 0 || !said.Has("could not be compacted", "no space left on device") {
		t.Errorf("compactions on a full disk = %d, said:\n%s\nwant none, and the failure said", s.compactions, said.Lines())
	}
	if got, ok := s.Get("a"); !ok || got != a {
		t.Errorf("a after a failed compaction = %+v, %v; want %+v", got, ok, a)
	}
	free()
	// A crash after the temporary file was written.
	os.WriteFile(filepath.Join(dir, StoreFile+".123456"), []byte(`{"name":"a","generation":1,"sealed":"AAAA"}`+"\n"), 0o600)
	again, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Get("a"); !ok || got != a {
		t.Errorf("a after reopening = %+v, %v; want %+v", got, ok, a)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, StoreFile+".*")); len(entries) != 0 || strings.Contains(fmt.Sprint(entries), "123456") {
		t.Errorf("temporary files left after open: %v", entries)
	}
}
