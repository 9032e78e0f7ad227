// Command coldstart measures the cold start of "up --once" beside the bus's
// own rate, in one run on one machine (issue 11): it builds the binary,
// generates a mesh ("gen --nodes N --modules M"), measures how many
// asynchronous (and synchronous) KV puts a second an embedded JetStream
// takes on this machine, then runs "up --once" on the mesh under
// /usr/bin/time -v and prints its wall time, CPU, peak memory (RSS, and the
// live heap at its peak: --peakprofile, kept in DIR/peak.prof), the keys
// it wrote, and how far it is from the bus's rate.
//
// Run it from the repository's root:
//
//	go run ./scripts/coldstart [-nodes 1000] [-modules 8] [-profile DIR]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

func main() {
	nodes := flag.Int("nodes", 1000, "nodes of the generated mesh")
	modules := flag.Int("modules", 8, "app modules per worker node")
	puts := flag.Int("puts", 40000, "asynchronous puts timed for the bus's rate")
	profile := flag.String("profile", "", "directory for CPU and allocation profiles of up --once (cpu.prof, mem.prof)")
	flag.Parse()
	if err := run(*nodes, *modules, *puts, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "coldstart:", err)
		os.Exit(1)
	}
}

func run(nodes, modules, puts int, profile string) error {
	tmp, err := os.MkdirTemp("", "coldstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "mesh-provisioner")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/mesh-provisioner").CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	file := filepath.Join(tmp, "mesh.yaml")
	if out, err := exec.Command(bin, "gen", "--nodes", strconv.Itoa(nodes), "--modules", strconv.Itoa(modules), "-o", file).CombinedOutput(); err != nil {
		return fmt.Errorf("gen: %v\n%s", err, out)
	}
	fmt.Printf("load average before: %s\n", loadavg())

	async, syncRate, err := busRate(filepath.Join(tmp, "bus"), puts)
	if err != nil {
		return fmt.Errorf("bus rate: %w", err)
	}
	fmt.Printf("bus: %.0f asynchronous KV puts/s (%d puts), %.0f synchronous puts/s\n", async, puts, syncRate)

	args := []string{"-v", bin, "up", file, "--once", "-o", "json", "--data", filepath.Join(tmp, "data"), "--listen", "127.0.0.1:0"}
	peak := filepath.Join(tmp, "peak.prof")
	if profile != "" {
		if err := os.MkdirAll(profile, 0o755); err != nil {
			return err
		}
		peak = filepath.Join(profile, "peak.prof")
		args = append(args, "--cpuprofile", filepath.Join(profile, "cpu.prof"), "--memprofile", filepath.Join(profile, "mem.prof"))
	}
	args = append(args, "--peakprofile", peak)
	cmd := exec.Command("/usr/bin/time", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("up --once: %v\n%s", err, tail(stderr.String(), 40))
	}
	var kept map[string]map[string]struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &kept); err != nil {
		return fmt.Errorf("up --once output: %w", err)
	}
	states := map[string]int{}
	for _, p := range kept["provisions"] {
		states[p.State]++
	}
	plans, provs := len(kept["plans"]), len(kept["provisions"])
	wall := timeField(stderr.String(), `Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)`)
	user := timeField(stderr.String(), `User time \(seconds\): (\S+)`)
	sys := timeField(stderr.String(), `System time \(seconds\): (\S+)`)
	rss := timeField(stderr.String(), `Maximum resident set size \(kbytes\): (\S+)`)
	fmt.Printf("up --once of gen --nodes %d --modules %d: %d plans, %d provisions %v, %d refused\n",
		nodes, modules, plans, provs, states, len(kept["refused"]))
	fmt.Printf("up --once: wall %.2f s, user %.2f s, sys %.2f s, peak RSS %.0f MiB\n", wall, user, sys, rss/1024)
	if m := regexp.MustCompile(`peak live heap: [^\n]*`).FindString(stderr.String()); m != "" {
		fmt.Printf("up --once: %s\n", m)
		if profile == "" {
			fmt.Println("(the peak profile goes with the run's temporary directory: pass -profile DIR to keep it)")
		}
	}
	ideal := float64(plans+provs) / async
	fmt.Printf("the seat's %d keys at the bus's async rate: %.2f s; up --once took %.1fx that (wall), %.1fx (user+sys CPU)\n",
		plans+provs, ideal, wall/ideal, (user+sys)/ideal)
	fmt.Printf("load average after: %s\n", loadavg())
	return nil
}

// busRate starts an embedded JetStream in dir and returns its asynchronous
// and synchronous put rates (puts a second) for provision-sized values.
func busRate(dir string, n int) (async, syncRate float64, err error) {
	srv, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		return 0, 0, err
	}
	defer srv.Shutdown()
	nc, js, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "coldstart"})
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kv, err := bus.Bucket(ctx, js, "coldstart", 0)
	if err != nil {
		return 0, 0, err
	}
	value := bytes.Repeat([]byte("x"), 300)
	start := time.Now()
	// In chunks under the client's limit of outstanding publishes (4000 by
	// default): past it a publish on a loaded machine stalls and fails.
	const chunk = 2000
	for i := range n {
		// Past the client's limit of outstanding publishes a publish waits
		// for room (up to a minute, not the default 200 ms, which a loaded
		// machine exceeds).
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.coldstart.node-%04d.key-%d", i%1000, i), value, jetstream.WithStallWait(time.Minute)); err != nil {
			return 0, 0, err
		}
		if (i+1)%chunk != 0 && i != n-1 {
			continue
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	async = float64(n) / time.Since(start).Seconds()
	m := n / 10
	start = time.Now()
	for i := range m {
		if _, err := kv.Put(ctx, fmt.Sprintf("sync.key-%d", i), value); err != nil {
			return 0, 0, err
		}
	}
	syncRate = float64(m) / time.Since(start).Seconds()
	return async, syncRate, nil
}

// timeField reads one figure of /usr/bin/time -v: seconds (m:ss or
// h:mm:ss for the wall clock) or a number.
func timeField(out, pattern string) float64 {
	m := regexp.MustCompile(pattern).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	total := 0.0
	for _, part := range strings.Split(m[1], ":") {
		f, _ := strconv.ParseFloat(part, 64)
		total = total*60 + f
	}
	return total
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
