// Command dryruncost measures what "apply --dry-run" costs as the mesh
// grows, for a change that touches one node (issue 17): for each size it
// generates a mesh ("gen --nodes N --modules M"), applies it to an
// embedded server and runs the seat in this process until it has settled
// (and the seat's verb, which apply asks which nodes' placement, wants and
// haves differ from the file; -noverb runs none, and apply reads those
// buckets whole), then runs "apply --dry-run -o json" of the same file
// with one more app module placed on node-0001, under /usr/bin/time -v,
// and prints its wall time, CPU, peak memory (RSS) and what it predicted,
// the floor's parts (the file's parse and check, the read, the diff) and
// the run past them, and each figure's ratio to the first size's; beside
// it, "apply" of the generated file as applied (which writes nothing).
//
// Run it from the repository's root:
//
//	go run ./scripts/dryruncost [-nodes 30,3000,10000] [-modules 8] [-runs 3] [-noverb]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

func main() {
	nodes := flag.String("nodes", "30,3000,10000", "sizes of the generated meshes, comma-separated")
	modules := flag.Int("modules", 8, "app modules per worker node")
	runs := flag.Int("runs", 3, "dry runs per size (the median is printed)")
	flag.BoolVar(&noVerb, "noverb", false, "run no seat verb: apply and apply --dry-run read placement, wants and haves whole")
	flag.StringVar(&profile, "profile", "", "directory for a CPU and an allocation profile of each size's last dry run (cpu-N.prof, mem-N.prof)")
	flag.Parse()
	var sizes []int
	for _, s := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			fmt.Fprintf(os.Stderr, "dryruncost: -nodes %q: want sizes of at least 2\n", *nodes)
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	if err := run(sizes, *modules, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "dryruncost:", err)
		os.Exit(1)
	}
}

// profile is the -profile directory, or "".
var profile string

// noVerb is -noverb.
var noVerb bool

// figures are one dry run's costs, and those of the apply that writes
// nothing.
type figures struct {
	wall, cpu time.Duration
	rssKB     int
	changes   int
	apply     *figures
	// The dry run's steps (apply --phases): the file's parse and check,
	// the read of the file's buckets and the diff (the floor: what apply
	// does too), and the run past them, with the keys it read and decoded.
	parse, read, diff, run             time.Duration
	parseCPU, readCPU, diffCPU, runCPU time.Duration
	phases                             string
	stderr                             string
}

func run(sizes []int, modules, runs int) error {
	tmp, err := os.MkdirTemp("", "dryruncost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "mesh-provisioner")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/mesh-provisioner").CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	fmt.Printf("load average before: %s\n", loadavg())
	var first figures
	for i, n := range sizes {
		f, err := size(tmp, bin, n, modules, runs)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		if i == 0 {
			first = f
		}
		fmt.Printf("%6d nodes x %d: dry run %7.3f s wall, %7.3f s CPU, %7.1f MiB peak RSS, %d keys predicted; x%.1f wall, x%.1f CPU, x%.1f memory of %d nodes\n",
			n, modules, f.wall.Seconds(), f.cpu.Seconds(), float64(f.rssKB)/1024, f.changes,
			f.wall.Seconds()/first.wall.Seconds(), f.cpu.Seconds()/first.cpu.Seconds(), float64(f.rssKB)/float64(first.rssKB), sizes[0])
		fmt.Printf("%6d nodes x %d: the floor: parse and check %.3f s (x%.1f), read the file's buckets %.3f s (x%.1f), diff %.3f s (x%.1f); past it, the run %.3f s wall (x%.1f), %.3f s CPU (x%.1f of %d nodes): %s\n",
			n, modules, f.parse.Seconds(), f.parse.Seconds()/first.parse.Seconds(), f.read.Seconds(), f.read.Seconds()/first.read.Seconds(),
			f.diff.Seconds(), f.diff.Seconds()/first.diff.Seconds(), f.run.Seconds(), f.run.Seconds()/first.run.Seconds(),
			f.runCPU.Seconds(), f.runCPU.Seconds()/first.runCPU.Seconds(), sizes[0], f.phases)
		ratio := func(a, b time.Duration) float64 { return a.Seconds() / max(b.Seconds(), 0.001) }
		fmt.Printf("%6d nodes x %d: the floor's CPU: parse and check %.3f s (x%.1f), read %.3f s (x%.1f), diff %.3f s (x%.1f) of %d nodes\n",
			n, modules, f.parseCPU.Seconds(), ratio(f.parseCPU, first.parseCPU), f.readCPU.Seconds(), ratio(f.readCPU, first.readCPU),
			f.diffCPU.Seconds(), ratio(f.diffCPU, first.diffCPU), sizes[0])
		a, fa := f.apply, first.apply
		fmt.Printf("%6d nodes x %d: apply   %7.3f s wall, %7.3f s CPU, %7.1f MiB peak RSS (nothing to write); x%.1f wall, x%.1f CPU, x%.1f memory of %d nodes\n",
			n, modules, a.wall.Seconds(), a.cpu.Seconds(), float64(a.rssKB)/1024,
			a.wall.Seconds()/fa.wall.Seconds(), a.cpu.Seconds()/fa.cpu.Seconds(), float64(a.rssKB)/float64(fa.rssKB), sizes[0])
	}
	fmt.Printf("load average after: %s\n", loadavg())
	return nil
}

// size measures one mesh size: the median of runs dry runs by wall time.
func size(tmp, bin string, nodes, modules, runs int) (figures, error) {
	dir := filepath.Join(tmp, fmt.Sprintf("bus-%d", nodes))
	srv, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		return figures{}, err
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, js, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "dryruncost"})
	if err != nil {
		return figures{}, err
	}
	defer nc.Close()
	text := gen.Generate(nodes, modules, 1)
	f, err := meshfile.Parse("gen.yaml", text)
	if err != nil {
		return figures{}, err
	}
	began := time.Now()
	if _, err := meshfile.Apply(ctx, js, f, time.Now()); err != nil {
		return figures{}, err
	}
	snc, sjs, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "seat"})
	if err != nil {
		return figures{}, err
	}
	defer snc.Close()
	st := seat.New(sjs, seat.Config{Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	go st.Run(ctx)
	marks := seat.Marks(ctx, js)
	for !st.Settled(marks) {
		time.Sleep(50 * time.Millisecond) // a script, not a test: polled until the seat is quiet
	}
	fmt.Printf("%6d nodes: applied and settled in %.1f s\n", nodes, time.Since(began).Seconds())
	// The seat's verb, which says which nodes' placement, wants and haves
	// differ from a file (what apply and apply --dry-run ask it), on its
	// own connection as the seat's process runs it; with -noverb none
	// runs, and both read those buckets whole.
	if !noVerb {
		vnc, vjs, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "verb"})
		if err != nil {
			return figures{}, err
		}
		defer vnc.Close()
		if err := provisioning.Start(ctx, vnc, vjs, provisioning.Options{Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}); err != nil {
			return figures{}, err
		}
	}

	changed, err := placeOne(text)
	if err != nil {
		return figures{}, err
	}
	path := filepath.Join(tmp, fmt.Sprintf("change-%d.yaml", nodes))
	if err := os.WriteFile(path, changed, 0o644); err != nil {
		return figures{}, err
	}
	// Dry runs first, not counted, until one is answered by the verb (its
	// first answer waits for its copies to hold every key; on a loaded
	// machine a request may time out and the dry run read whole).
	for try := 1; ; try++ {
		_, err := dryRun(bin, path, srv.URL())
		if err == nil {
			break
		}
		if try == 5 {
			return figures{}, err
		}
		fmt.Fprintf(os.Stderr, "dryruncost: %d nodes: warm-up dry run %d: %v\n", nodes, try, err)
	}
	var all []figures
	for i := range runs {
		var prof []string
		if profile != "" && i == runs-1 {
			if err := os.MkdirAll(profile, 0o755); err != nil {
				return figures{}, err
			}
			prof = []string{"--cpuprofile", filepath.Join(profile, fmt.Sprintf("cpu-%d.prof", nodes)), "--memprofile", filepath.Join(profile, fmt.Sprintf("mem-%d.prof", nodes))}
		}
		fg, err := dryRun(bin, path, srv.URL(), prof...)
		if err != nil {
			return figures{}, err
		}
		all = append(all, fg)
	}
	slices.SortFunc(all, func(a, b figures) int { return int(a.wall - b.wall) })
	orig := filepath.Join(tmp, fmt.Sprintf("gen-%d.yaml", nodes))
	if err := os.WriteFile(orig, text, 0o644); err != nil {
		return figures{}, err
	}
	var applies []figures
	for range runs {
		fa, err := timed(bin, "apply", "--yes", "-f", orig, "--nats", srv.URL())
		if err != nil {
			return figures{}, err
		}
		applies = append(applies, fa)
	}
	slices.SortFunc(applies, func(a, b figures) int { return int(a.wall - b.wall) })
	med := all[len(all)/2]
	med.apply = &applies[len(applies)/2]
	return med, nil
}

// placeOne returns the generated mesh with one more app module placed on
// node-0001 (the first module of node-0002 that node-0001 has not), with no
// want: composed at its newest build.
func placeOne(text []byte) ([]byte, error) {
	lines := strings.Split(string(text), "\n")
	placed := func(node string) (int, []string) {
		prefix := "  " + node + ": ["
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return i, strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, prefix), "]"), ", ")
			}
		}
		return -1, nil
	}
	i, mine := placed("node-0001")
	_, theirs := placed("node-0002")
	if i < 0 {
		return nil, fmt.Errorf("the generated mesh has no placement of node-0001")
	}
	for _, m := range theirs {
		if !slices.Contains(mine, m) {
			lines[i] = "  node-0001: [" + strings.Join(append(mine, m), ", ") + "]"
			return []byte(strings.Join(lines, "\n")), nil
		}
	}
	return nil, fmt.Errorf("node-0002 places nothing node-0001 has not")
}

var (
	wallRe   = regexp.MustCompile(`Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)`)
	userRe   = regexp.MustCompile(`User time \(seconds\): ([\d.]+)`)
	sysRe    = regexp.MustCompile(`System time \(seconds\): ([\d.]+)`)
	rssRe    = regexp.MustCompile(`Maximum resident set size \(kbytes\): (\d+)`)
	runCPURe = regexp.MustCompile(`^([\d.]+) s CPU`)
	// phasesRe reads apply --dry-run --phases's line.
	cpuRe    = regexp.MustCompile(`apply --dry-run CPU: parse and check ([\d.]+) s, read ([\d.]+) s, diff ([\d.]+) s`)
	phasesRe = regexp.MustCompile(`parse and check ([\d.]+) s, read ([\d.]+) s \(([^)]*)\), diff ([\d.]+) s, run ([\d.]+) s \(([^)]*)\)`)
)

// dryRun runs apply --dry-run of path against url under /usr/bin/time -v.
func dryRun(bin, path, url string, extra ...string) (figures, error) {
	args := append([]string{"apply", "--dry-run", "--phases", "-o", "json", "-f", path, "--nats", url}, extra...)
	var out []byte
	f, err := timedOut(bin, &out, args...)
	if err != nil {
		return figures{}, err
	}
	if !noVerb && strings.Contains(f.stderr, " whole (") {
		return figures{}, fmt.Errorf("apply --dry-run read the file's buckets whole with the seat's verb running:\n%s", f.stderr)
	}
	m := phasesRe.FindStringSubmatch(f.stderr)
	if m == nil {
		return figures{}, fmt.Errorf("apply --dry-run --phases said no phases:\n%s", f.stderr)
	}
	for i, d := range []*time.Duration{&f.parse, &f.read, nil, &f.diff} {
		if d != nil {
			*d, _ = time.ParseDuration(m[i+1] + "s")
		}
	}
	f.run, _ = time.ParseDuration(m[5] + "s")
	if c := cpuRe.FindStringSubmatch(f.stderr); c != nil {
		f.parseCPU, _ = time.ParseDuration(c[1] + "s")
		f.readCPU, _ = time.ParseDuration(c[2] + "s")
		f.diffCPU, _ = time.ParseDuration(c[3] + "s")
	}
	if c := runCPURe.FindStringSubmatch(m[6]); c != nil {
		f.runCPU, _ = time.ParseDuration(c[1] + "s")
	}
	f.phases = m[3] + "; " + m[6]
	var rep struct {
		Changes []json.RawMessage `json:"changes"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return figures{}, fmt.Errorf("apply --dry-run printed no report: %v", err)
	}
	f.changes = len(rep.Changes)
	return f, nil
}

// timed runs bin with args under /usr/bin/time -v and returns its figures.
func timed(bin string, args ...string) (figures, error) {
	var out []byte
	return timedOut(bin, &out, args...)
}

func timedOut(bin string, out *[]byte, args ...string) (figures, error) {
	cmd := exec.Command("/usr/bin/time", append([]string{"-v", bin}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return figures{}, fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	*out = stdout.Bytes()
	e := stderr.String()
	f := figures{stderr: e}
	if m := wallRe.FindStringSubmatch(e); m != nil {
		h, _ := strconv.Atoi(m[1])
		mi, _ := strconv.Atoi(m[2])
		s, _ := strconv.ParseFloat(m[3], 64)
		f.wall = time.Duration((float64(h*3600+mi*60) + s) * float64(time.Second))
	}
	var cpu float64
	for _, re := range []*regexp.Regexp{userRe, sysRe} {
		if m := re.FindStringSubmatch(e); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			cpu += v
		}
	}
	f.cpu = time.Duration(cpu * float64(time.Second))
	if m := rssRe.FindStringSubmatch(e); m != nil {
		f.rssKB, _ = strconv.Atoi(m[1])
	}
	return f, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
