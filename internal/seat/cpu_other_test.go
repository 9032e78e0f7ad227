//go:build !linux

package seat_test

import "time"

// threadCPU is not measured outside Linux: the cpu-ns/op figure is left out.
func threadCPU() (time.Duration, bool) { return 0, false }

// procCPU returns 0: the process's CPU time is read on Linux only.
func procCPU() time.Duration { return 0 }
