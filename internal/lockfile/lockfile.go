// Package lockfile holds an exclusive lock on a file (flock(2), Linux) for
// the life of a process, with the holder's pid written in the file, so
// that a second process sharing a directory fails at once and can say who
// holds it.
package lockfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Lock is an exclusive lock held on a file. Release it with [Lock.Release];
// the kernel releases it too when the process ends.
type Lock struct {
	f *os.File
}

// HeldError is returned by [Take] when another open of the file (another
// process, or another Take in this one) holds the lock. PID is the pid the
// holder wrote in the file, 0 when it wrote none (yet).
type HeldError struct {
	Path string
	PID  int
}

// Error says the path and the holder's pid.
func (e *HeldError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("lockfile: %s is held by another process", e.Path)
	}
	return fmt.Sprintf("lockfile: %s is held by pid %d", e.Path, e.PID)
}

// Take opens (creating, mode 0600) the file at path, takes an exclusive
// lock on it without waiting (LOCK_EX|LOCK_NB) and writes this process'
// pid into it (decimal, one line). It returns a *[HeldError] when the lock
// is held, or an error wrapping the system's when the file cannot be
// opened, locked or written.
func Take(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lockfile: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &HeldError{Path: path, PID: readPID(f)}
		}
		return nil, fmt.Errorf("lockfile: lock %s: %w", path, err)
	}
	if err := writePID(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lockfile: write pid to %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return err
	}
	return f.Sync()
}

// Release gives the lock back and closes the file; the file stays, with
// the last holder's pid in it. Releasing twice does nothing.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	if err := f.Close(); err != nil {
		return fmt.Errorf("lockfile: release %s: %w", f.Name(), err)
	}
	return nil
}
