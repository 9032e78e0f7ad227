// Command dryruncost measures what "apply --dry-run" costs as the mesh
// grows, for a change that touches one node (issue 17): for each size it
// generates a mesh ("gen --nodes N --modules M"), applies it to an
// embedded server and runs the seat in this process until it has settled,
// then runs "apply --dry-run -o json" of the same file with the last app
// module of node-0001 unplaced, under /usr/bin/time -v, and prints its wall
// time, CPU, peak memory (RSS) and what it predicted, and each figure's
// ratio to the first size's.
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

// figures are one dry run's costs.
type figures struct {
	wall, cpu time.Duration
	rssKB     int
	changes   int
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

	changed, err := unplaceOne(text)
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
	return all[len(all)/2], nil
}

// unplaceOne returns the generated mesh with the last app module of
// node-0001 unplaced: its placement, want and have taken out.
func unplaceOne(text []byte) ([]byte, error) {
	var module, section, node string
	var out []string
	for _, l := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(l, " ") && strings.HasSuffix(l, ":") {
			section = strings.TrimSuffix(l, ":")
		}
		if strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "   ") {
			node, _, _ = strings.Cut(strings.TrimSpace(l), ":")
		}
		switch {
		case section == "placement" && node == "node-0001":
			items := strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "  node-0001: ["), "]"), ", ")
			module = items[len(items)-1]
			l = "  node-0001: [" + strings.Join(items[:len(items)-1], ", ") + "]"
		case section == "wants" && node == "node-0001":
			items := strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "  node-0001: {"), "}"), ", ")
			items = slices.DeleteFunc(items, func(s string) bool { return strings.HasPrefix(s, module+":") })
			l = "  node-0001: {" + strings.Join(items, ", ") + "}"
		case section == "haves" && node == "node-0001" && strings.HasPrefix(l, "    "+module+": {"):
			continue
		}
		out = append(out, l)
	}
	if module == "" {
		return nil, fmt.Errorf("the generated mesh places nothing on node-0001")
	}
	return []byte(strings.Join(out, "\n")), nil
}

var (
	wallRe = regexp.MustCompile(`Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)`)
	userRe = regexp.MustCompile(`User time \(seconds\): ([\d.]+)`)
	sysRe  = regexp.MustCompile(`System time \(seconds\): ([\d.]+)`)
	rssRe  = regexp.MustCompile(`Maximum resident set size \(kbytes\): (\d+)`)
)

// dryRun runs apply --dry-run of path against url under /usr/bin/time -v.
func dryRun(bin, path, url string, extra ...string) (figures, error) {
	args := append([]string{"-v", bin, "apply", "--dry-run", "-o", "json", "-f", path, "--nats", url}, extra...)
	cmd := exec.Command("/usr/bin/time", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return figures{}, fmt.Errorf("apply --dry-run: %v\n%s", err, stderr.String())
	}
	var rep struct {
		Changes []json.RawMessage `json:"changes"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return figures{}, fmt.Errorf("apply --dry-run printed no report: %v", err)
	}
	e := stderr.String()
	var f figures
	f.changes = len(rep.Changes)
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
