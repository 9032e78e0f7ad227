// Command dryruncost measures what "apply --dry-run" costs as the mesh
// grows, for a change that touches one node (issue 17): for each size it
// generates a mesh ("gen --nodes N --modules M"), applies it to an
// embedded server and runs the seat in this process until it has settled,
// then runs "apply --dry-run -o json" of the same file with one more app
// module placed on node-0001, under /usr/bin/time -v, and prints its wall
// time, CPU, peak memory (RSS) and what it predicted, and each figure's
// ratio to the first size's; beside it, "apply" of the generated file as
// applied (which reads the same buckets and writes nothing): what reading
// and parsing the file and the buckets it writes costs at that size.
//
// Run it from the repository's root:
//
//	go run ./scripts/dryruncost [-nodes 30,3000,10000] [-modules 8] [-runs 3]
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
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

func main() {
	nodes := flag.String("nodes", "30,3000,10000", "sizes of the generated meshes, comma-separated")
	modules := flag.Int("modules", 8, "app modules per worker node")
	runs := flag.Int("runs", 3, "dry runs per size (the median is printed)")
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

// figures are one dry run's costs, and those of the apply that writes
// nothing.
type figures struct {
	wall, cpu time.Duration
	rssKB     int
	changes   int
	apply     *figures
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

	changed, err := placeOne(text)
	if err != nil {
		return figures{}, err
	}
	path := filepath.Join(tmp, fmt.Sprintf("change-%d.yaml", nodes))
	if err := os.WriteFile(path, changed, 0o644); err != nil {
		return figures{}, err
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
	wallRe = regexp.MustCompile(`Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)`)
	userRe = regexp.MustCompile(`User time \(seconds\): ([\d.]+)`)
	sysRe  = regexp.MustCompile(`System time \(seconds\): ([\d.]+)`)
	rssRe  = regexp.MustCompile(`Maximum resident set size \(kbytes\): (\d+)`)
)

// dryRun runs apply --dry-run of path against url under /usr/bin/time -v.
func dryRun(bin, path, url string, extra ...string) (figures, error) {
	args := append([]string{"apply", "--dry-run", "-o", "json", "-f", path, "--nats", url}, extra...)
	var out []byte
	f, err := timedOut(bin, &out, args...)
	if err != nil {
		return figures{}, err
	}
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
	var f figures
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
