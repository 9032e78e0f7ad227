package vault

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// fill writes a file at path until the disk is full, and returns a func
// that removes it.
func fill(t *testing.T, path string) func() {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 512)
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// A full disk takes nothing down: a write that hits ENOSPC fails its
// callers and leaves no torn record in the log (cut back to its last whole
// record), values already handed out are kept, the failed value is kept
// pending and written once space returns (tried again with backoff), and
// the store opens again with every value it handed out.
func TestStoreOnAFullDisk(t *testing.T) {
	disk := bustest.SmallDisk(t, 64<<10)
	dir := filepath.Join(disk, "vault")
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	handed := map[string]Value{}
	for i := range 3 {
		v, err := s.Ensure(fmt.Sprintf("ace.m%d.credential.postgres_database", i))
		if err != nil {
			t.Fatal(err)
		}
		handed[v.Name] = v
	}
	free := fill(t, filepath.Join(disk, "filler"))
	// Records fit in the log's last page until it is full: the first
	// record that needs a new page hits ENOSPC.
	var failed string
	for i := 3; i < 200 && failed == ""; i++ {
		name := fmt.Sprintf("ace.m%d.credential.postgres_database", i)
		v, err := s.Ensure(name)
		switch {
		case err == nil:
			handed[name] = v
		case errors.Is(err, syscall.ENOSPC):
			failed = name
		default:
			t.Fatalf("Ensure(%s) on a full disk = %v; want ENOSPC", name, err)
		}
	}
	if failed == "" {
		t.Fatal("200 values fit on a full disk; want ENOSPC")
	}
	if v, ok := s.Get(failed); ok {
		t.Errorf("Get(%s) whose record is not on disk = %+v; want none", failed, v)
	}
	// A rotation that cannot be written leaves the value as the disk has it.
	var some Value
	for _, v := range handed {
		some = v
		break
	}
	if _, err := s.Rotate(some.Name); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Rotate(%s) on a full disk = %v; want ENOSPC", some.Name, err)
	}
	if got, ok := s.Get(some.Name); !ok || got != some {
		t.Errorf("Get(%s) after a rotation that could not be written = %+v, %v; want %+v (what the disk holds)", some.Name, got, ok, some)
	}
	// No torn record: every line of the log is whole.
	log, err := os.ReadFile(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(log, []byte("\n")); len(log) == 0 || log[len(log)-1] != '\n' || n != len(handed) {
		t.Errorf("the log after ENOSPC: %d bytes, %d lines, ends %q; want %d whole lines", len(log), n, log[max(0, len(log)-8):], len(handed))
	}

	free()
	var got Value
	bustest.WaitFor(t, 10*time.Second, failed+" written once space returns", func() bool {
		v, err := s.Ensure(failed)
		got = v
		return err == nil
	})
	handed[failed] = got
	rotated, err := s.Rotate(some.Name)
	if err != nil || rotated.Generation != some.Generation+2 {
		// The rotation that failed is kept and written too: this one is
		// the next after it.
		t.Errorf("Rotate(%s) once space returned = %+v, %v; want generation %d", some.Name, rotated, err, some.Generation+2)
	}
	handed[some.Name] = rotated
	for i := 0; i < 5; i++ {
		v, err := s.Ensure(fmt.Sprintf("ace.more%d.credential.postgres_database", i))
		if err != nil {
			t.Fatalf("Ensure once space returned = %v; want the store to take writes again", err)
		}
		handed[v.Name] = v
	}
	again, err := OpenStore(dir)
	if err != nil {
		t.Fatalf("OpenStore after a full disk = %v", err)
	}
	if torn, ok := again.Torn(); ok {
		t.Errorf("OpenStore after a full disk: Torn = %+v; want none", torn)
	}
	for name, v := range handed {
		if got, ok := again.Get(name); !ok || got != v {
			t.Errorf("%s after reopening = %+v, %v; want %+v", name, got, ok, v)
		}
	}
}
