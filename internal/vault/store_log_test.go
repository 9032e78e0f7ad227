package vault

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The store is a log: it reopens to the same values after rotations and
// removals, and a log of mostly superseded records is written anew.
func TestStoreLogReopensAndCompacts(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Ensure("a")
	for i := 0; i < 100; i++ {
		if a, err = s.Rotate("a"); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := s.Ensure("b")
	s.Ensure("c")
	if err := s.Remove("c"); err != nil {
		t.Fatal(err)
	}
	if s.records != 104 {
		t.Errorf("records in the log = %d; want 104", s.records)
	}
	again, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Get("a"); got != a || a.Generation != 101 {
		t.Errorf("a after reopening = %+v; want %+v at generation 101", got, a)
	}
	if got, _ := again.Get("b"); got != b {
		t.Errorf("b after reopening = %+v; want %+v", got, b)
	}
	if _, ok := again.Get("c"); ok {
		t.Error("c came back after its removal")
	}
	if again.records != 2 {
		t.Errorf("records after reopening = %d; want 2 (the log written anew)", again.records)
	}
	lines, _ := os.ReadFile(filepath.Join(dir, StoreFile))
	if n := bytes.Count(lines, []byte("\n")); n != 2 {
		t.Errorf("store file has %d lines; want 2", n)
	}
}
