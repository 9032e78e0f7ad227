package cli

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// profileFlags are the hidden flags every subcommand takes to write a Go
// profile of its run (for "go tool pprof"): the CPU profile of the whole
// run, the heap profile (allocations since start, and what is live) taken
// at its end, and the heap profile taken at the peak of the live heap.
type profileFlags struct {
	cpu, mem, peak string
	cpuFile        *os.File
	sampler        *peakSampler
}

// addProfileFlags adds the hidden --cpuprofile, --memprofile and
// --peakprofile flags to root and starts and stops the profiles around any
// subcommand.
func addProfileFlags(root *cobra.Command) {
	var f profileFlags
	pf := root.PersistentFlags()
	pf.StringVar(&f.cpu, "cpuprofile", "", "write a CPU profile of the run to this file")
	pf.StringVar(&f.mem, "memprofile", "", "write a heap profile (allocations and live memory) at the end of the run to this file")
	pf.StringVar(&f.peak, "peakprofile", "", "write a heap profile to this file each time the live heap grows past its peak by a tenth, and say the peak at the end")
	_ = pf.MarkHidden("cpuprofile")
	_ = pf.MarkHidden("memprofile")
	_ = pf.MarkHidden("peakprofile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return f.start() }
	root.PersistentPostRunE = func(*cobra.Command, []string) error { return f.stop() }
}

func (f *profileFlags) start() error {
	if f.peak != "" {
		f.sampler = startPeakSampler(f.peak)
	}
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
	if f.sampler != nil {
		if err := f.sampler.stop(); err != nil {
			return fmt.Errorf("--peakprofile: %w", err)
		}
		f.sampler = nil
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

// peakSampler reads the live heap (bytes of heap objects, as of the last
// garbage collection's mark) every 100 ms and writes a heap profile to its
// file whenever it grew a tenth past the largest seen, so that the file
// ends holding the profile at (or within a tenth of) the run's peak.
type peakSampler struct {
	path string
	done chan struct{}
	wg   sync.WaitGroup

	peak   uint64 // largest live heap seen, bytes
	wrote  uint64 // live heap when the file was last written
	at     time.Duration
	start  time.Time
	gcs    uint64
	err    error
	sample []metrics.Sample
}

// liveHeap is the runtime metric of the heap's live bytes at the end of
// the last GC cycle's mark phase.
const liveHeap = "/gc/heap/live:bytes"

func startPeakSampler(path string) *peakSampler {
	p := &peakSampler{path: path, done: make(chan struct{}), start: time.Now(),
		sample: []metrics.Sample{{Name: liveHeap}, {Name: "/gc/cycles/total:gc-cycles"}}}
	p.wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
				p.check()
			}
		}
	})
	return p
}

func (p *peakSampler) check() {
	metrics.Read(p.sample)
	live := p.sample[0].Value.Uint64()
	p.gcs = p.sample[1].Value.Uint64()
	if live <= p.peak {
		return
	}
	p.peak, p.at = live, time.Since(p.start)
	if p.err != nil || live < p.wrote+p.wrote/10 {
		return
	}
	p.wrote = live
	out, err := os.Create(p.path)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(out, 0)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	p.err = err
}

// stop ends the sampling and says the peak on stderr.
func (p *peakSampler) stop() error {
	close(p.done)
	p.wg.Wait()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(os.Stderr, "peak live heap: %.1f MiB at %.1f s (profile of %.1f MiB in %s); %d GC cycles; heap from the OS at the end %.1f MiB\n",
		float64(p.peak)/(1<<20), p.at.Seconds(), float64(p.wrote)/(1<<20), p.path, p.gcs, float64(ms.HeapSys)/(1<<20))
	return p.err
}
