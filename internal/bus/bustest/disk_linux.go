package bustest

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// SmallDisk mounts a tmpfs of size bytes (mode 0700) on a new directory
// and returns its path; it is unmounted when the test ends. Mounting needs
// root: a test not run as root is skipped, saying so; run as root (as CI
// does), a mount that fails fails the test.
func SmallDisk(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Skipf("a tmpfs of %d bytes needs root to mount: run as root, as CI does", size)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a tmpfs of %d bytes on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}
