package cli

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// profileFlags are the hidden flags every subcommand takes to write a Go
// profile of its run (for "go tool pprof"): the CPU profile of the whole
// run, and the heap profile (allocations since start, and what is live)
// taken at its end.
type profileFlags struct {
	cpu, mem string
	cpuFile  *os.File
}

// addProfileFlags adds the hidden --cpuprofile and --memprofile flags to
// root and starts and stops the profiles around any subcommand.
func addProfileFlags(root *cobra.Command) {
	var f profileFlags
	pf := root.PersistentFlags()
	pf.StringVar(&f.cpu, "cpuprofile", "", "write a CPU profile of the run to this file")
	pf.StringVar(&f.mem, "memprofile", "", "write a heap profile (allocations and live memory) at the end of the run to this file")
	_ = pf.MarkHidden("cpuprofile")
	_ = pf.MarkHidden("memprofile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return f.start() }
	root.PersistentPostRunE = func(*cobra.Command, []string) error { return f.stop() }
}

func (f *profileFlags) start() error {
	if f.cpu == "" {
		return nil
	}
	out, err := os.Create(f.cpu)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	f.cpuFile = out
	return nil
}

func (f *profileFlags) stop() error {
	if f.cpuFile != nil {
		pprof.StopCPUProfile()
		if err := f.cpuFile.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		f.cpuFile = nil
	}
	if f.mem == "" {
		return nil
	}
	out, err := os.Create(f.mem)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	defer out.Close()
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(out, 0); err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	return out.Close()
}
