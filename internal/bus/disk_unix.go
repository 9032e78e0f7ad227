//go:build unix

package bus

import "golang.org/x/sys/unix"

// diskFree returns the bytes free for an unprivileged writer on the
// filesystem holding dir, or -1 when it cannot be read.
func diskFree(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
