//go:build unix

package kit_test

import (
	"syscall"
	"time"
)

// processCPU returns the user and system CPU time this process has used
// so far (the embedded server's too).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
