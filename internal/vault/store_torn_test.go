package vault

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A record cut at any byte (a write never acknowledged: a crash or a full
// disk in the middle of it) is dropped when the store opens, said by Torn,
// and loses no record before it: the store opens, holds every value handed
// out, issues the dropped value again, and the next record starts a line.
func TestStoreDropsARecordCutAtAnyByte(t *testing.T) {
	for _, last := range []string{"new", "rotation", "removal"} {
		t.Run(last, func(t *testing.T) {
			src := t.TempDir()
			s, err := OpenStore(src)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := s.Ensure("ace.gitea.credential.postgres_database")
			b, _ := s.Ensure("ace.wiki.credential.postgres_database")
			whole, err := os.ReadFile(filepath.Join(src, StoreFile))
			if err != nil {
				t.Fatal(err)
			}
			// The record to cut, written last.
			const c = "ace.forge.credential.postgres_database"
			var kept Value // what the store holds of its name after the cut
			switch last {
			case "new":
				if _, err := s.Ensure(c); err != nil {
					t.Fatal(err)
				}
			case "rotation":
				if _, err := s.Rotate(a.Name); err != nil {
					t.Fatal(err)
				}
				kept = a
			case "removal":
				if err := s.Remove(b.Name); err != nil {
					t.Fatal(err)
				}
				kept = b
			}
			all, _ := os.ReadFile(filepath.Join(src, StoreFile))
			record := all[len(whole):]
			key, _ := os.ReadFile(filepath.Join(src, KeyFile))
			for cut := 1; cut < len(record); cut++ {
				dir := t.TempDir()
				os.WriteFile(filepath.Join(dir, KeyFile), key, 0o600)
				os.WriteFile(filepath.Join(dir, StoreFile), append(bytes.Clone(whole), record[:cut]...), 0o600)
				s, err := OpenStore(dir)
				if err != nil {
					t.Fatalf("cut at byte %d of %d: OpenStore = %v; want the torn record dropped", cut, len(record), err)
				}
				torn, ok := s.Torn()
				if !ok || torn.Line != 3 || torn.Bytes != cut {
					t.Fatalf("cut at byte %d: Torn = %+v, %v; want line 3, %d bytes", cut, torn, ok, cut)
				}
				name := map[string]string{"new": c, "rotation": a.Name, "removal": b.Name}[last]
				if want := len(`{"name":"`) + len(name) + 1; cut >= want && (torn.Name != name || torn.Generation != kept.Generation) {
					t.Errorf("cut at byte %d: Torn = %+v; want name %s, generation %d kept", cut, torn, name, kept.Generation)
				}
				for _, v := range []Value{a, b} {
					if got, ok := s.Get(v.Name); !ok || got != v {
						t.Errorf("cut at byte %d: %s = %+v, %v; want %+v (acknowledged)", cut, v.Name, got, ok, v)
					}
				}
				if last == "new" {
					if _, ok := s.Get(c); ok {
						t.Errorf("cut at byte %d: %s is held; want it dropped", cut, c)
					}
				}
				// Issued again, on a line of its own.
				again, err := s.Ensure(c)
				if err != nil || again.Generation != 1 {
					t.Errorf("cut at byte %d: Ensure(%s) = %+v, %v; want generation 1", cut, c, again, err)
				}
				s2, err := OpenStore(dir)
				if err != nil {
					t.Fatalf("cut at byte %d, reopened after a new record: %v", cut, err)
				}
				if torn, ok := s2.Torn(); ok {
					t.Errorf("cut at byte %d, reopened: Torn = %+v; want none (dropped at the first open)", cut, torn)
				}
				if got, ok := s2.Get(c); !ok || got != again {
					t.Errorf("cut at byte %d, reopened: %s = %+v, %v; want %+v", cut, c, got, ok, again)
				}
			}
		})
	}
}

// A line that does not decode before the last one is no torn write: the
// store does not open, and says which line.
func TestStoreRefusesALineThatDoesNotDecodeInTheMiddle(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Ensure("a")
	s.Ensure("b")
	path := filepath.Join(dir, StoreFile)
	all, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(all, []byte("\n"))
	os.WriteFile(path, append(append([]byte(`{"name":"a","sea`+"\n"), lines[0]...), lines[1]...), 0o600)
	_, err = OpenStore(dir)
	if want := fmt.Sprintf("vault: store %s line 1 does not decode", path); err == nil || !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("OpenStore over a bad first line = %v; want %q", err, want)
	}
}
