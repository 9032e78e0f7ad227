// Command opcost measures what the operator's questions about one key or
// one node cost as the mesh grows (issue 17): for each mesh size it builds
// the binary, generates a mesh ("gen --nodes N --modules M"), runs "up" on
// it under a real embedded NATS server (no node clients, no web page),
// waits until the seat has written every key and is quiet, then runs each
// command several times as its own process against that server and prints
// the median wall time, the fastest and the first run's, and the largest
// peak RSS of each, and each size's ratio to the smallest size's.
//
// The commands: why of one provision key of node-0001 (one that is not
// provided when there is one), get provisions --node node-0001, get plans
// --node node-0001, asks, and status.
//
// Run it from the repository's root:
//
//	go run ./scripts/opcost [-sizes 30,3000,10000] [-modules 8] [-runs 5] [-only status] [-idle]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// only, when set, is the name of the only command measured, or its first
// words (-only).
var only string

// idle says to ask status once more after the verb's idle time (-idle).
var idle bool

// node is the node every command asks about: gen's first worker, the same
// node (same modules, same keys) in every size with gen's default seed.
const node = "node-0001"

func main() {
	sizes := flag.String("sizes", "30,3000,10000", "mesh sizes (nodes), comma-separated; the first is the base of the ratios")
	modules := flag.Int("modules", 8, "app modules per worker node")
	runs := flag.Int("runs", 5, "runs of each command per size (the median is printed)")
	flag.BoolVar(&idle, "idle", false, "ask status once more after the seat's verb has been idle for a minute (and 5 s), and print that run's time")
	flag.StringVar(&only, "only", "", "measure only the commands whose name is this or starts with it and a space (status, get, why)")
	flag.Parse()
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			fmt.Fprintf(os.Stderr, "opcost: -sizes: %q is not a mesh size of at least 2 nodes\n", s)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	if err := run(ns, *modules, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "opcost:", err)
		os.Exit(1)
	}
}

// cost is one command's figures at one size.
type cost struct {
	wall time.Duration // median
	min  time.Duration // fastest run: the least disturbed by other load
	// first is the first run's: the first question the seat's verb is
	// asked (for status, its first after the seat started).
	first time.Duration
	rss   int64 // largest peak RSS, KiB
}

func run(sizes []int, modules, runs int) error {
	tmp, err := os.MkdirTemp("", "opcost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "mesh-provisioner")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/mesh-provisioner").CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if dirty, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(dirty) > 0 {
		commit = append(bytes.TrimSpace(commit), "+changes"...)
	}
	fmt.Printf("opcost at commit %s on %s, load average %s\n", strings.TrimSpace(string(commit)), time.Now().UTC().Format("2006-01-02 15:04Z"), loadavg())
	var names []string
	costs := map[string]map[int]cost{}
	for _, n := range sizes {
		got, order, err := measure(bin, filepath.Join(tmp, strconv.Itoa(n)), n, modules, runs)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		if names == nil {
			names = order
		}
		for name, c := range got {
			if costs[name] == nil {
				costs[name] = map[int]cost{}
			}
			costs[name][n] = c
		}
	}
	fmt.Printf("\n| command |")
	for _, n := range sizes {
		fmt.Printf(" %d nodes |", n)
	}
	for _, n := range sizes[1:] {
		fmt.Printf(" %d / %d (median, min) |", n, sizes[0])
	}
	fmt.Printf("\n|---|")
	for range 2*len(sizes) - 1 {
		fmt.Printf("---:|")
	}
	fmt.Println()
	for _, name := range names {
		fmt.Printf("| `%s` |", name)
		for _, n := range sizes {
			c := costs[name][n]
			fmt.Printf(" %.3f s (min %.3f, first %.3f), %d MiB |", c.wall.Seconds(), c.min.Seconds(), c.first.Seconds(), c.rss/1024)
		}
		base := costs[name][sizes[0]]
		for _, n := range sizes[1:] {
			c := costs[name][n]
			fmt.Printf(" %.2fx, %.2fx |", float64(c.wall)/float64(base.wall), float64(c.min)/float64(base.min))
		}
		fmt.Println()
	}
	fmt.Printf("load average after: %s\n", loadavg())
	return nil
}

// measure runs up on a generated mesh of n nodes in dir and times each
// command runs times; it returns each command's cost by its line and the
// lines in order.
func measure(bin, dir string, n, modules, runs int) (map[string]cost, []string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	file := filepath.Join(dir, "mesh.yaml")
	if out, err := exec.Command(bin, "gen", "--nodes", strconv.Itoa(n), "--modules", strconv.Itoa(modules), "-o", file).CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("gen: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	up := exec.Command(bin, "up", file, "--data", data, "--listen", "127.0.0.1:0", "--web", "", "--clients=false")
	stdout, err := up.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	upLog, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return nil, nil, err
	}
	defer upLog.Close()
	up.Stderr = upLog
	start := time.Now()
	if err := up.Start(); err != nil {
		return nil, nil, err
	}
	defer func() {
		up.Process.Signal(syscall.SIGTERM)
		up.Wait()
	}()
	url, err := urlOf(stdout)
	if err != nil {
		return nil, nil, fmt.Errorf("up: %w", err)
	}
	creds := filepath.Join(data, "auth", "operator.creds")
	key, err := settle(url, creds, n, up.Process.Pid)
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("%d nodes: up settled in %.1f s; why asks of %s\n", n, time.Since(start).Seconds(), key)
	cmds := [][]string{
		{"why", key},
		{"get", "provisions", "--node", node},
		{"get", "plans", "--node", node},
		{"asks"},
		{"status"},
	}
	got := map[string]cost{}
	var order []string
	for _, args := range cmds {
		if exec.Command(bin, args[0], "--help").Run() != nil {
			continue // a command this commit does not have
		}
		name := strings.Join(args, " ")
		if only != "" && name != only && !strings.HasPrefix(name, only+" ") {
			continue
		}
		order = append(order, name)
		var walls []time.Duration
		var rss int64
		for range runs {
			c := exec.Command(bin, append(args, "--nats", url, "--creds", creds)...)
			c.Stdout = io.Discard
			var errb strings.Builder
			c.Stderr = &errb
			t0 := time.Now()
			if err := c.Run(); err != nil {
				return nil, nil, fmt.Errorf("%s: %v: %s", name, err, errb.String())
			}
			walls = append(walls, time.Since(t0))
			if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
				rss = max(rss, ru.Maxrss)
			}
		}
		if idle && args[0] == "status" {
			time.Sleep(provisioning.DefaultIdle + 5*time.Second) // a script: the verb's idle time, let pass
			c := exec.Command(bin, append(args, "--nats", url, "--creds", creds)...)
			c.Stdout = io.Discard
			t0 := time.Now()
			if err := c.Run(); err != nil {
				return nil, nil, fmt.Errorf("%s after an idle minute: %v", name, err)
			}
			fmt.Printf("%d nodes: %-40s after the verb was idle %s: %.3f s\n", n, name, provisioning.DefaultIdle+5*time.Second, time.Since(t0).Seconds())
		}
		first := walls[0]
		slices.Sort(walls)
		got[name] = cost{wall: walls[len(walls)/2], min: walls[0], first: first, rss: rss}
		fmt.Printf("%d nodes: %-40s median %.3f s (min %.3f, max %.3f, first %.3f), peak RSS %d MiB\n", n, name,
			walls[len(walls)/2].Seconds(), walls[0].Seconds(), walls[len(walls)-1].Seconds(), first.Seconds(), rss/1024)
	}
	return got, order, nil
}

// urlOf reads up's stdout until it says the NATS URL it listens on, and
// drains the rest in the background.
func urlOf(r io.Reader) (string, error) {
	re := regexp.MustCompile(`NATS with JetStream on (\S+)`)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, r)
			return m[1], nil
		}
	}
	return "", fmt.Errorf("exited before it said its NATS URL")
}

// settle waits until the seat has written plans for every node and is
// quiet: the last sequence of plans, provisions and refused has not moved
// for 5 s and up (pid) used under 2% of a core over the last 5 s. It
// returns the key why asks about: node's first provision that is not
// provided, else its first.
func settle(url, creds string, n, pid int) (string, error) {
	nc, js, err := bus.Connect(bus.Dial{URL: url, Creds: creds, Name: "opcost"})
	if err != nil {
		return "", err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var last [3]uint64
	var plans uint64
	stable := time.Now()
	cpu := []time.Duration{cpuOf(pid)}
	for {
		var now [3]uint64
		for i, b := range []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket} {
			if st, err := js.Stream(ctx, "KV_"+b); err == nil {
				now[i] = st.CachedInfo().State.LastSeq
				if i == 0 {
					plans = st.CachedInfo().State.Msgs
				}
			}
		}
		if now != last {
			last, stable = now, time.Now()
		}
		cpu = append(cpu, cpuOf(pid))
		quiet := len(cpu) > 10 && cpu[len(cpu)-1]-cpu[len(cpu)-11] < 100*time.Millisecond
		if plans >= uint64(n) && time.Since(stable) > 5*time.Second && quiet {
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the seat did not settle: %d plans", plans)
		case <-time.After(500 * time.Millisecond):
		}
	}
	kv, err := js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		return "", err
	}
	w, err := kv.Watch(ctx, node+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return "", err
	}
	defer w.Stop()
	first := ""
	for e := range w.Updates() {
		if e == nil {
			break
		}
		if first == "" {
			first = e.Key()
		}
		var p struct {
			State string `json:"state"`
		}
		if json.Unmarshal(e.Value(), &p) == nil && p.State != string(mesh.Provided) {
			return e.Key(), nil
		}
	}
	if first == "" {
		return "", fmt.Errorf("%s has no provisions", node)
	}
	return first, nil
}

// cpuOf returns the CPU time (user and system) process pid has used, read
// from /proc; zero when it cannot be read.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // clock ticks of 100 Hz
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
