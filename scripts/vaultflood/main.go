// Command vaultflood measures what one node's client flooding the vault's
// secret verb does to another node's requests, every party a process of its
// own (issue 18, hole 6): it builds mesh-provisioner from -src (default the
// repository it runs in) and nats-server's own binary, writes the users
// "auth gen" makes for the bundled homelab mesh, starts nats-server on that
// configuration, the seat ("serve") and the vault ("vault") as their own
// processes, and applies the mesh as the operator. A measuring process,
// as client-g14 (its mesh-requests file), then asks mesh-vault.secret.grafana.client-g14
// one request at a time (each with a 5 s deadline) for -before, then
// -during while -flooders processes, each as client-ace with -conns
// connections of its own, publish mesh-vault.secret.gitea.client-ace requests as fast
// as the server takes them (bursts of a thousand, then a flush), then
// -after once they stopped. It prints, per phase, g14's answered requests,
// their latency (p50, p99, max) and its failures, the ratio of the p50 and
// p99 during the flood to before it, what the flooders sent and were
// answered, and what the vault and the server said of drops and slow
// consumers.
//
// Run it from the repository's root:
//
//	go run ./scripts/vaultflood [-pin] [-nice N] [-profile DIR] [-held] [-src DIR] [-flooders 3] [-conns 3] [-payload 2] [-before 15s] [-during 20s] [-after 10s]
//
// -profile DIR writes nats-server's CPU profile of the flood and the
// vault's of its run there (nats-server.cpu, vault.cpu; go tool pprof).
//
// -nice N runs every process of the measure (the mesh and the flooders
// alike) at niceness N: on a machine other work loads, -10 gives them the
// CPU before that work.
//
// -held says, at the flood's end and after the measure, how many
// response mappings nats-server holds in the services account (a
// request's reply, kept until its answer or its export's response
// threshold) and its resident memory; the server's answer, every mapping,
// is costly and delays the after phase.
//
// -pin runs nats-server, the seat, the vault and the measuring process on
// CPU 0 and the flooding processes on CPU 1 (taskset; -mesh-cpus and
// -flood-cpus name other lists), as when the flooding node is another
// machine: the figures then say what the server and the vault do with a
// flood, not what CPU the flooders leave them. It also prints the CPU
// time nats-server and the vault took during the flood.
//
// -src names another checkout of the repository (an older commit, in a
// worktree of its own) whose mesh-provisioner and nats-server are run, the
// measuring and flooding processes staying this one's, so that two commits
// are measured the same way.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
)

// The parties of the measure: client-ace floods gitea's secrets (placed on
// ace), client-g14 asks grafana's (placed on g14).
const (
	flooder   = "client-ace"
	floodOf   = "gitea"
	measurer  = "client-g14"
	measureOf = "grafana"
)

func main() {
	role := flag.String("role", "", "internal: flood or measure (the processes this command starts)")
	url := flag.String("nats", "", "internal: the server's URL")
	creds := flag.String("creds", "", "internal: the party's credentials file (its mesh file's; the mesh-requests one beside it is dialled)")
	src := flag.String("src", ".", "the repository checkout whose mesh-provisioner and nats-server run")
	flooders := flag.Int("flooders", 3, "flooding processes, each as "+flooder)
	conns := flag.Int("conns", 3, "connections of each flooding process")
	payload := flag.Int("payload", 2, "bytes of each flooding request (a JSON object padded with a field the vault ignores)")
	before := flag.Duration("before", 15*time.Second, "how long g14 asks before the flood")
	during := flag.Duration("during", 20*time.Second, "how long g14 asks during the flood")
	after := flag.Duration("after", 10*time.Second, "how long g14 asks after the flood")
	meshCPUs := flag.String("mesh-cpus", "", "the CPUs (a taskset list: 0, 0-1) nats-server, the seat, the vault and the measuring process run on; empty: any")
	floodCPUs := flag.String("flood-cpus", "", "the CPUs the flooding processes run on; empty: any")
	profile := flag.String("profile", "", "a directory to write CPU profiles to: nats-server's during the flood (nats-server.cpu, from its prof_port) and the vault's whole run (vault.cpu, its --cpuprofile), for go tool pprof")
	held := flag.Bool("held", false, "say the response mappings nats-server holds in the services account (its accountz) and its resident memory at the flood's end and after the measure: costly, the server writes every mapping in one answer, which delays the after phase")
	pin := flag.Bool("pin", false, "the mesh on CPU 0 and the flooders on CPU 1 (-mesh-cpus 0 -flood-cpus 1): the flooding node is another machine")
	flag.IntVar(&niceness, "nice", 0, "the niceness every process of the measure runs at (nice -n; below 0 needs root): on a machine others load, -10 gives the mesh and the flooders the CPU before them")
	flag.Parse()
	if *pin {
		if *meshCPUs == "" {
			*meshCPUs = "0"
		}
		if *floodCPUs == "" {
			*floodCPUs = "1"
		}
	}
	var err error
	switch *role {
	case "flood":
		err = flood(*url, *creds, *conns, *payload)
	case "measure":
		err = measure(*url, *creds, []phase{{"before", *before}, {"during", *during}, {"after", *after}})
	case "":
		err = run(*held, *src, *profile, *meshCPUs, *floodCPUs, *flooders, *conns, *payload, *before, *during, *after)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vaultflood:", err)
		os.Exit(1)
	}
}

// phase is one stretch of the measure: its name and how long it lasts.
type phase struct {
	name string
	d    time.Duration
}

// figures are one phase's measure, as the measuring process prints them
// (a line "figures <json>").
type figures struct {
	Phase    string         `json:"phase"`
	Answered int            `json:"answered"`
	Failed   int            `json:"failed"`
	Errors   map[string]int `json:"errors,omitempty"`
	// P50, P99 and Max are the answered requests' latencies.
	P50, P99, Max time.Duration
}

// quantile returns the q quantile (0 to 1) of took, sorted.
func quantile(took []time.Duration, q float64) time.Duration {
	if len(took) == 0 {
		return 0
	}
	return took[min(len(took)-1, int(q*float64(len(took))))]
}

// measure asks measureOf's secrets as the user of creds, one request at a
// time, through each phase in turn, saying "phase <name>" on stdout as
// each begins and "figures <json>" as each ends. It first waits (up to
// two minutes) for an answer that holds a value.
func measure(url, creds string, phases []phase) error {
	nc, err := bus.ConnectIn(bus.Dial{URL: url, Name: measurer, Creds: creds}, access.Requests)
	if err != nil {
		return err
	}
	defer nc.Close()
	ask := func() (kit.VaultAnswer, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		a, err := kit.AskSecretsAs(ctx, nc, measureOf, measurer, kit.VaultRequest{})
		return a, time.Since(start), err
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		a, _, err := ask()
		if err == nil && len(a.Credentials)+len(a.Secrets) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer holding a value of %s in 2 minutes: %+v, %v", measureOf, a, err)
		}
		time.Sleep(500 * time.Millisecond) // a retry's pause, not a wait for a condition of ours
	}
	for _, p := range phases {
		fmt.Printf("phase %s\n", p.name)
		f := figures{Phase: p.name, Errors: map[string]int{}}
		var took []time.Duration
		for end := time.Now().Add(p.d); time.Now().Before(end); {
			a, d, err := ask()
			switch {
			case err != nil:
				f.Failed++
				f.Errors[errKind(err)]++
			case len(a.Credentials)+len(a.Secrets) == 0:
				f.Failed++
				f.Errors["an answer without values"]++
			default:
				f.Answered++
				took = append(took, d)
			}
		}
		slices.Sort(took)
		f.P50, f.P99, f.Max = quantile(took, 0.5), quantile(took, 0.99), quantile(took, 1)
		b, _ := json.Marshal(f)
		fmt.Printf("figures %s\n", b)
	}
	return nil
}

// errKind names an asking error by its kind (its text up to the subject).
func errKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "no answer in 5 s"
	case errors.Is(err, nats.ErrNoResponders):
		return "no responders"
	}
	return err.Error()
}

// flood publishes floodOf's secret requests as the user of creds on conns
// connections, as fast as the server takes them, until SIGTERM; then it
// prints "flooded <sent> <answered>".
func flood(url, creds string, conns, payload int) error {
	body := []byte(`{}`)
	if payload > len(`{"pad":""}`) {
		body = []byte(`{"pad":"` + strings.Repeat("x", payload-len(`{"pad":""}`)) + `"}`)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	var sent, answered atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	for i := range conns {
		nc, err := bus.ConnectIn(bus.Dial{URL: url, Name: flooder, Creds: creds}, access.Requests)
		if err != nil {
			return err
		}
		defer nc.Close()
		reply := "_INBOX_" + flooder + ".flood." + strconv.Itoa(i)
		if _, err := nc.Subscribe(reply, func(*nats.Msg) { answered.Add(1) }); err != nil {
			return err
		}
		wg.Go(func() {
			for !done.Load() {
				n := int64(0)
				for range 1000 {
					if nc.PublishRequest(kit.SecretSubject(floodOf, flooder), reply, body) != nil {
						break
					}
					n++
				}
				sent.Add(n)
				if n < 1000 || nc.Flush() != nil {
					return
				}
			}
		})
	}
	<-stop
	done.Store(true)
	wg.Wait()
	fmt.Printf("flooded %d %d\n", sent.Load(), answered.Load())
	return nil
}

// proc is a process run started, its output kept.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// pinned returns the command running bin with args on the CPUs of cpus
// (a taskset list such as "0" or "0-1"; "" for any CPU): taskset sets the
// affinity before it executes bin, so every thread of the process (and a
// Go program's GOMAXPROCS) keeps to those CPUs.
// With [niceness] set, nice runs it at that niceness.
func pinned(cpus, bin string, args ...string) *exec.Cmd {
	argv := append([]string{bin}, args...)
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	if niceness != 0 {
		argv = append([]string{"nice", "-n", strconv.Itoa(niceness)}, argv...)
	}
	return exec.Command(argv[0], argv[1:]...)
}

// niceness is the niceness every process of the measure runs at (-nice):
// the mesh and the flooders alike, so that on a machine others share
// they take the CPU before those others, not from each other.
var niceness int

// startProc starts bin with args on cpus (see [pinned]), its output kept.
func startProc(name, cpus, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, cmd: pinned(cpus, bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop sends SIGTERM and waits up to 10 s, then kills.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freePort returns a loopback port nobody listens on, below Linux's
// ephemeral range.
func freePort() (int, error) {
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port between 20000 and 32000")
}

func run(held bool, src, profile, meshCPUs, floodCPUs string, flooders, conns, payload int, before, during, after time.Duration) error {
	tmp, err := os.MkdirTemp("", "vaultflood-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	commit, _ := exec.Command("git", "-C", src, "describe", "--always", "--dirty", "--abbrev=7").Output()
	bin := filepath.Join(tmp, "mesh-provisioner")
	natsBin := filepath.Join(tmp, "nats-server")
	for out, pkg := range map[string]string{bin: "./cmd/mesh-provisioner", natsBin: "github.com/nats-io/nats-server/v2"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = src
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s in %s: %v\n%s", pkg, src, err, b)
		}
	}
	meshFile := filepath.Join(tmp, "homelab.yaml")
	if err := os.WriteFile(meshFile, examples.Homelab, 0o600); err != nil {
		return err
	}
	dir := filepath.Join(tmp, "auth")
	if b, err := exec.Command(bin, "auth", "gen", "-f", meshFile, "-o", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("auth gen: %v\n%s", err, b)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	monitor, err := freePort()
	if err != nil {
		return err
	}
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	conf := filepath.Join(dir, "nats-server.conf")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n", port, monitor)
	prof := 0
	if err == nil && profile != "" {
		if prof, err = freePort(); err == nil {
			_, err = fmt.Fprintf(f, "prof_port: %d\n", prof)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	creds := func(user string) string { return filepath.Join(dir, user+".creds") }

	fmt.Printf("vaultflood: commit %s (%s), load average %s\n", strings.TrimSpace(string(commit)), src, loadavg())
	if meshCPUs != "" || floodCPUs != "" {
		fmt.Printf("vaultflood: nats-server, the seat, the vault and %s on CPUs %q, the flooders on %q\n", measurer, meshCPUs, floodCPUs)
	}
	if niceness != 0 {
		fmt.Printf("vaultflood: every process of the measure at niceness %d\n", niceness)
	}
	srv, err := startProc("nats-server", meshCPUs, natsBin, "-c", conf)
	if err != nil {
		return err
	}
	var procs []*proc
	defer func() {
		for _, p := range slices.Backward(procs) {
			p.stop()
		}
		srv.stop()
	}()
	for deadline := time.Now().Add(time.Minute); ; {
		nc, err := nats.Connect(url, nats.UserCredentials(creds("operator")), nats.NoReconnect())
		if err == nil {
			nc.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server did not accept the operator in a minute: %v\n%s", err, srv.output())
		}
		time.Sleep(200 * time.Millisecond) // a retry's pause
	}
	vaultArgs := []string{"vault", "vault", "--node", "control", "--data", filepath.Join(tmp, "vault"), "--nats", url, "--creds", creds("mesh-vault")}
	if profile != "" {
		vaultArgs = append(vaultArgs, "--cpuprofile", filepath.Join(profile, "vault.cpu"))
	}
	for _, c := range [][]string{
		{"seat", "serve", "--nats", url, "--creds", creds("mesh-provisioner")},
		vaultArgs,
	} {
		p, err := startProc(c[0], meshCPUs, bin, c[1:]...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	vault := procs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		b, err := exec.CommandContext(ctx, bin, "apply", "-f", meshFile, "--yes", "--nats", url, "--creds", creds("operator")).CombinedOutput()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("apply: %v\n%s", err, b)
		}
		time.Sleep(time.Second) // the seat makes the buckets first: a retry's pause
	}

	m := pinned(meshCPUs, self, "-role", "measure", "-nats", url, "-creds", creds(measurer),
		"-before", before.String(), "-during", during.String(), "-after", after.String())
	m.Stderr = os.Stderr
	out, err := m.StdoutPipe()
	if err != nil {
		return err
	}
	if err := m.Start(); err != nil {
		return err
	}
	var floods []*proc
	var results []figures
	var watch *backlog
	var srvCPU, vaultCPU time.Duration
	none := make(chan error, 1)
	none <- nil
	var profiled <-chan error = none
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		line := lines.Text()
		switch {
		case line == "phase during":
			for i := range flooders {
				p, err := startProc("flooder "+strconv.Itoa(i), floodCPUs, self, "-role", "flood", "-nats", url, "-creds", creds(flooder), "-conns", strconv.Itoa(conns), "-payload", strconv.Itoa(payload))
				if err != nil {
					return err
				}
				floods = append(floods, p)
			}
			fmt.Printf("vaultflood: %d processes of %s, %d connections each, flooding %s with %d-byte requests\n", flooders, flooder, conns, kit.SecretSubject(floodOf, flooder), payload)
			watch = watchBacklog(fmt.Sprintf("http://127.0.0.1:%d/connz", monitor), vault.cmd.Process.Pid)
			srvCPU, vaultCPU = cpuTime(srv.cmd.Process.Pid), cpuTime(vault.cmd.Process.Pid)
			if profile != "" {
				profiled = profileServer(prof, during, filepath.Join(profile, "nats-server.cpu"))
			}
		case line == "phase after":
			fmt.Printf("vaultflood: %s\n", watch.stop())
			if held {
				fmt.Printf("vaultflood: at the flood's end nats-server holds %s response mappings of the vault's verbs; its resident memory %s\n",
					heldResponses(monitor, creds("mesh-vault")), serverMem(monitor))
			}
			fmt.Printf("vaultflood: CPU time during the flood: nats-server %s, the vault %s\n",
				(cpuTime(srv.cmd.Process.Pid) - srvCPU).Round(time.Millisecond), (cpuTime(vault.cmd.Process.Pid) - vaultCPU).Round(time.Millisecond))
			var sent, answered int64
			for _, p := range floods {
				p.stop()
				var s, a int64
				if _, err := fmt.Sscanf(lastLine(p.output(), "flooded "), "flooded %d %d", &s, &a); err != nil {
					return fmt.Errorf("%s said:\n%s", p.name, p.output())
				}
				sent, answered = sent+s, answered+a
			}
			fmt.Printf("vaultflood: the flood sent %d requests, %d answered (%.1f%%)\n", sent, answered, 100*float64(answered)/float64(max(sent, 1)))
		case strings.HasPrefix(line, "figures "):
			var f figures
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "figures ")), &f); err != nil {
				return err
			}
			results = append(results, f)
			fmt.Printf("%-6s %s: %4d answered, p50 %8s, p99 %8s, max %8s, %d failed %v\n", f.Phase, measurer, f.Answered,
				f.P50.Round(10*time.Microsecond), f.P99.Round(10*time.Microsecond), f.Max.Round(10*time.Microsecond), f.Failed, f.Errors)
		}
	}
	if err := lines.Err(); err != nil {
		_ = m.Process.Kill()
		return fmt.Errorf("the measuring process's output: %w", err)
	}
	if err := m.Wait(); err != nil {
		return fmt.Errorf("the measuring process: %w", err)
	}
	if err := <-profiled; err != nil {
		return fmt.Errorf("nats-server's CPU profile: %w", err)
	}
	if len(results) != 3 {
		return fmt.Errorf("the measuring process said %d phases; want 3", len(results))
	}
	if held {
		fmt.Printf("vaultflood: after it nats-server holds %s response mappings of the vault's verbs; its resident memory %s\n",
			heldResponses(monitor, creds("mesh-vault")), serverMem(monitor))
	}
	b, d := results[0], results[1]
	ratio := func(d, b time.Duration) float64 { return float64(d) / float64(max(b, 1)) }
	fmt.Printf("vaultflood: during/before: p50 %.1fx, p99 %.1fx; failed during %d of %d\n", ratio(d.P50, b.P50), ratio(d.P99, b.P99), d.Failed, d.Failed+d.Answered)
	fmt.Printf("vaultflood: the vault said %d drop lines, %d slow consumer; the server %d slow consumer lines; the vault %s\n",
		strings.Count(vault.output(), "dropped="), strings.Count(strings.ToLower(vault.output()), "slow consumer"),
		strings.Count(strings.ToLower(srv.output()), "slow consumer"), alive(vault))
	fmt.Printf("vaultflood: load average %s\n", loadavg())
	return nil
}

// profileServer asks nats-server's profiling port for a CPU profile of d
// (less a second, so that it ends within the flood) and writes it to out;
// the channel says how that went.
func profileServer(port int, d time.Duration, out string) <-chan error {
	done := make(chan error, 1)
	go func() {
		secs := max(1, int((d-time.Second)/time.Second))
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", port, secs))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(out)
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		done <- err
	}()
	return done
}

// heldResponses says how many response mappings (a request's reply
// kept until its answer, or its export's response threshold) nats-server
// holds in the services account, whose user's credentials creds names the
// storage file of (its accountz monitoring endpoint on port).
func heldResponses(port int, creds string) string {
	b, err := os.ReadFile(bus.AccountCreds(creds, access.Services))
	if err != nil {
		return err.Error()
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return err.Error()
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return err.Error()
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/accountz?acc=%s", port, uc.IssuerAccount))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var z struct {
		Detail struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"account_detail"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&z); err != nil {
		return err.Error()
	}
	return strconv.Itoa(len(z.Detail.Responses))
}

// serverMem says nats-server's resident memory, as its varz monitoring
// endpoint on port says it, in MiB.
func serverMem(port int) string {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/varz", port))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var v struct {
		Mem int64 `json:"mem"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%.0f MiB", float64(v.Mem)/(1<<20))
}

// cpuTime returns the user and system CPU time process pid took so far
// (/proc/<pid>/stat, in the kernel's clock ticks of 10 ms); 0 when it
// cannot be read.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command's name (which may hold spaces),
	// from the third: utime and stime are the 14th and 15th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// alive says whether p still runs.
func alive(p *proc) string {
	select {
	case <-p.done:
		return "exited"
	default:
		return "still runs"
	}
}

// lastLine returns the last line of out that starts with prefix.
func lastLine(out, prefix string) string {
	l := ""
	for s := range strings.Lines(out) {
		if strings.HasPrefix(s, prefix) {
			l = s
		}
	}
	return l
}

func loadavg() string {
	f, err := os.Open("/proc/loadavg")
	if err != nil {
		return "?"
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// backlog follows, every 100 ms, what the server holds for the vault's
// connections (the connz monitoring endpoint's pending bytes of the
// connections whose client port belongs to the vault's process is not
// known to it: the connections named by the vault's users are taken).
type backlog struct {
	url   string
	stopc chan struct{}
	done  chan struct{}
	// max is the most pending bytes seen on one vault connection; polls
	// counts the polls, errs the failed ones.
	max         int64
	polls, errs int
	lastErr     error
}

// watchBacklog starts polling url (a connz endpoint) until stop.
func watchBacklog(url string, _ int) *backlog {
	b := &backlog{url: url, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-b.stopc:
				return
			case <-t.C:
			}
			b.polls++
			n, err := vaultPending(b.url)
			if err != nil {
				b.errs++
				b.lastErr = err
				continue
			}
			b.max = max(b.max, n)
		}
	}()
	return b
}

// stop ends the polling and says what it saw.
func (b *backlog) stop() string {
	if b == nil {
		return "no backlog followed"
	}
	close(b.stopc)
	<-b.done
	return fmt.Sprintf("the server held at most %.1f MiB for a vault connection during the flood (%d polls of connz, %d failed %v)",
		float64(b.max)/(1<<20), b.polls, b.errs, b.lastErr)
}

// vaultPending returns the largest pending bytes the server holds for a
// connection of the vault's users (their names in connz, with auth).
func vaultPending(url string) (int64, error) {
	resp, err := http.Get(url + "?auth=true&limit=1024")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var z struct {
		Connections []struct {
			Name    string `json:"name"`
			Pending int64  `json:"pending_bytes"`
		} `json:"connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&z); err != nil {
		return 0, err
	}
	var most int64
	for _, c := range z.Connections {
		if strings.Contains(c.Name, "vault") {
			most = max(most, c.Pending)
		}
	}
	return most, nil
}
