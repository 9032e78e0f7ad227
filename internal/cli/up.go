package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/memlimit"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/internal/web"
)

func init() { commands = append(commands, newUpCmd) }

// upFlags are the flags of "up".
type upFlags struct {
	data     string
	listen   string
	once     bool
	output   string
	logLevel string
	clients  bool
	postgres string
	meshName string
	metrics  string
	web      string
	// webSet says --web was given: then a page that cannot listen fails
	// up; the default's only says so.
	webSet bool
	// noAuth runs the embedded server with no users (anyone who reaches
	// it may do anything).
	noAuth bool
	// clientsSet says --clients was given; without it a mesh of more than
	// maxAutoClients nodes gets no clients.
	clientsSet bool
	// yes applies a given file that no longer places most of the mesh
	// without asking (as apply's --yes).
	yes bool
}

func newUpCmd() *cobra.Command {
	var f upFlags
	cmd := &cobra.Command{
		Use:   "up [MESHFILE]",
		Short: "Run a whole mesh on this machine: embedded NATS, the seat, the mesh file applied",
		Long: `up runs the single-machine default: an embedded NATS server with JetStream (its store in --data),
the seat, and the mesh file applied (the bundled homelab example when none is given). It prints progress
while the seat composes, then a summary per node, and keeps running: apply the file again from another
terminal ("apply -f FILE --nats URL") and only what changed is composed again.

With --once it applies, waits until the seat is quiet, prints everything the seat keeps and exits 0.

A file that would no longer place most of the mesh the data directory holds asks first, as apply does:
type "yes" to go on; --yes skips the question, and with no terminal on stdin it is refused unless --yes.

Every component connects as its own NATS user, allowed only what its part needs (docs/trust.md): up makes the
users from the mesh file as "auth gen" does, into DATA/auth (keys kept across runs), and runs its server
with them. The operator's credentials are DATA/auth/operator.creds (mode 0600); commands such as get,
apply, asks and answer use it by default when --data is the default, else pass --creds.

One up at a time per --data directory: up holds a lock on DATA/lock (with its pid in it) while it runs,
and a second up on the same directory fails at once.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.clientsSet = cmd.Flags().Changed("clients")
			f.webSet = cmd.Flags().Changed("web")
			return runUp(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", defaultDataDir(), "directory of the mesh's state (the NATS JetStream store)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:4222", "address the embedded NATS server listens on (port 0 picks a free one)")
	fl.BoolVar(&f.once, "once", false, "apply, wait until the seat is quiet, print what it keeps, and exit")
	fl.StringVarP(&f.output, "output", "o", "table", "with --once: table or json")
	fl.StringVar(&f.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	fl.StringVar(&f.postgres, "postgres", "", "DSN of a PostgreSQL server (a role that may create roles and databases) for the postgres provider; without it postgres keys stay asked")
	fl.StringVar(&f.meshName, "mesh-name", "", "the mesh's name (default: the mesh file's mesh:; with no file, the name kept in DATA/mesh-name, which it may not contradict); the postgres provider names its roles and databases after it, so that meshes sharing a PostgreSQL server never meet")
	fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics (/metrics) and a health check (/healthz) on this address, e.g. 127.0.0.1:9464")
	fl.StringVar(&f.web, "web", defaultWeb, "address of the operator's page (provisions, held modules, open asks, live), which lets in only the browser that opened the login URL printed (its secret in DATA/"+web.LoginFile+", 0600); empty for none; not served with --once")
	fl.BoolVar(&f.noAuth, "no-auth", false, "run the embedded server without users: anyone who reaches it may do anything")
	fl.BoolVar(&f.yes, "yes", false, "apply a file that no longer places most of the mesh without asking")
	fl.BoolVar(&f.clients, "clients", true, "run a node client per node of the mesh file, each under DATA/nodes/<node> (by default only for meshes of up to 100 nodes)")
	return cmd
}

// defaultDataDir is a folder under the user's state directory.
func defaultDataDir() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return filepath.Join(os.TempDir(), "mesh-provisioner")
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "mesh-provisioner")
}

func logger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: %w", level, err)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func runUp(ctx context.Context, in io.Reader, out, errOut io.Writer, f upFlags, args []string) (err error) {
	if f.output != "table" && f.output != "json" {
		return usageError{fmt.Errorf("-o %q: want table or json", f.output)}
	}
	log, err := logger(f.logLevel, os.Stderr)
	if err != nil {
		return err
	}
	// Parse first: a bad file is refused before anything starts.
	file, name, err := upFile(args)
	if err != nil {
		return err
	}
	if err := asUsage(assemble.CheckMeshName(f.meshName)); err != nil {
		return err
	}
	// What depends on the mesh (its name, the memory limit's floor, whether
	// node clients run) is decided once, from the mesh up runs, as soon as
	// it is known: a given file's at once, before anything starts; with no
	// file, the data directory's live mesh (or the bundled example, going
	// into an empty one), once the server is up and the mesh read.
	u := &upRun{f: f, log: log, in: in, stopMemory: func() {}, decided: hooksOf(ctx).upDecided}
	defer func() { u.stopMemory() }()
	if len(args) == 1 {
		if err := u.decide(file, false, ""); err != nil {
			return err
		}
	}
	if w := listenWarning(f.listen); w != "" && f.noAuth {
		fmt.Fprintln(os.Stderr, w)
	}
	m, err := assemble.OpenMachine(ctx, assemble.MachineConfig{Data: assemble.Data(f.data), Listen: f.listen, NoAuth: f.noAuth,
		File: file, Source: name, Given: len(args) == 1, Clients: u.f.clients, Log: log})
	if err != nil {
		return asUsage(err)
	}
	defer m.Close()
	if m.StoredErr != nil {
		fmt.Fprintf(errOut, "up: %v; %s replaces it\n", m.StoredErr, name)
	}
	if mended := m.Users.Mended; len(mended) > 0 {
		fmt.Fprintf(errOut, "up: the last up stopped before it wrote the credentials of %d users; written now in %s: %s\n",
			len(mended), m.Data.Auth(), someOf(mended, 5))
	}
	defer func() {
		// A failed write of a credentials file is said with whatever
		// else failed (the success path has checked it already).
		if werr := m.Users.Written(); werr != nil && err != nil && !errors.Is(err, werr) {
			err = errors.Join(err, werr)
		}
	}()
	// The follower says what it starts and stops while up prints the
	// seat's results: one writer at a time.
	out, errOut = lockedWriter(out), lockedWriter(errOut)
	u.out, u.errOut, u.progress = out, errOut, out
	if f.once {
		u.progress = errOut
	}
	u.m = m
	u.hint = operatorFlags(m.Server.URL(), m.Creds(access.DefaultOperator))
	if done := u.banner(); done != nil {
		defer func() { <-done }() // errOut is the caller's once up returns
	}

	// outer outlives the components: with --once they are stopped before
	// what the seat keeps is read and printed, so that their memory is
	// free for it.
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every component runs on a connection of its own; on the way out they
	// all stop (the seat giving its lease back while its connection is
	// still open) before the server does.
	stopped := false // up ran until its context ended (Ctrl-C, SIGTERM)
	defer func() {
		cancel()
		m.Assembly.Wait()
		if stopped {
			fmt.Fprintln(out, "up: stopped; its components stopped")
		}
	}()
	// The operator's connection applies the file first, so that the seat
	// starts from the whole mesh rather than from half-written buckets; it
	// then reads what the seat keeps.
	onc, ojs, err := m.Assembly.Connect(assemble.Component{Role: assemble.Operator})
	if err != nil {
		return err
	}
	defer onc.Close()
	u.js = ojs
	if file, err = u.applyFile(ctx, file, name, len(args) == 0); err != nil {
		return err
	}
	running, err := u.start(ctx, file)
	if err != nil {
		return err
	}
	stopped, err = u.settleAndPrint(ctx, outer, cancel, running)
	return err
}

// settleAndPrint waits until running's seat has settled (and, with
// clients, every plan is applied), then with --once stops the components
// (cancel) and prints what the seat keeps; else prints the summary and
// follows the mesh until ctx is done (stopped) or the seat stops. outer
// outlives the components: what --once prints is read through it.
func (u *upRun) settleAndPrint(ctx, outer context.Context, cancel context.CancelFunc, running *assemble.MeshRunning) (stopped bool, err error) {
	st := u.settle(running)
	// The provisions up --once prints are followed until they are
	// printed, past the components' stop.
	follow, stopFollow := context.WithCancel(outer)
	defer stopFollow()
	provisions, err := st.Quiet(ctx, follow, running.Follower.Providers())
	if err != nil {
		return false, err
	}
	if !u.f.once {
		stopFollow()
		provisions = nil
	}
	if u.f.clients {
		if err := assemble.WaitApplied(ctx, u.js); err != nil {
			return false, err
		}
	}
	if u.f.once {
		cancel()
		u.m.Assembly.Wait()
		if err := u.m.Users.Written(); err != nil {
			return false, err
		}
		return false, printKept(outer, u.out, u.js, u.hint, u.f.output, provisions)
	}
	return u.follow(ctx, st)
}

// upFile parses the mesh file of args, or the bundled example with none,
// and returns it with its name for messages.
func upFile(args []string) (*meshfile.File, string, error) {
	if len(args) == 1 {
		file, err := meshfile.ParseFile(args[0])
		return file, args[0], err
	}
	file, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	return file, "bundled example homelab.yaml", err
}

// upRun is one run of up: what it was told, what it decided, and where
// it prints.
type upRun struct {
	f   upFlags
	log *slog.Logger
	m   *assemble.Machine
	js  jetstream.JetStream // the operator's
	// d is what up decided from the mesh it runs ([assemble.Decide]).
	d                     assemble.Decision
	stopMemory            func()
	out, errOut, progress io.Writer
	// in is where the operator answers up's question before a file that
	// no longer places most of the mesh is applied.
	in io.Reader
	// hint is the flags a command from another terminal needs.
	hint    string
	results chan *compose.Result
	// seatDone receives why the seat process stopped.
	seatDone chan error
	// decided, when not nil, is called with what up decided, once per
	// run (a test's, see [testHooks]).
	decided func(assemble.Decision)
}

// decide decides what depends on the mesh up runs, file
// ([assemble.Decide]; restart and stored as there), and sets the memory
// limit: the collector keeps the process near what it holds (a 1000-node
// mesh's start under 300 MB) unless GOGC or GOMEMLIMIT is set.
func (u *upRun) decide(file *meshfile.File, restart bool, stored string) error {
	d, err := decideMesh(file, u.f, restart, stored)
	if err != nil {
		return err
	}
	u.d = d
	u.f.meshName, u.f.clients = d.Name, d.Clients
	if stop, ok := memlimit.Follow(d.Budget, assemble.MemoryFactor); ok {
		u.stopMemory = stop
	}
	if u.decided != nil {
		u.decided(d)
	}
	return nil
}

// banner prints where the bus is and how to reach it. Without --once it
// then says, once they are written, where the node clients' credentials
// are (or why they are not), and returns a channel closed once said; nil
// with --once.
func (u *upRun) banner() <-chan struct{} {
	m := u.m
	fmt.Fprintf(u.progress, "NATS with JetStream on %s (store %s)\n", m.Server.URL(), m.Data.Store())
	if creds := m.Creds(access.DefaultOperator); creds != "" {
		fmt.Fprintf(u.progress, "NATS users of every party in %s; the operator's credentials: %s\n", m.Data.Auth(), creds)
	}
	fmt.Fprintf(u.progress, "from another terminal: mesh-provisioner get provisions %s\n", u.hint)
	if u.f.once {
		return nil
	}
	said := make(chan struct{})
	go func() {
		defer close(said)
		if err := m.Users.Written(); err != nil {
			fmt.Fprintf(u.errOut, "up: %v\n", err)
		} else if m.Users.Later {
			fmt.Fprintf(u.errOut, "node clients' credentials written: %s\n", m.Data.Creds("client-N"))
		}
	}()
	return said
}

// applyFile applies file (name in messages) unless, run with no file
// (restart), the data directory holds a mesh already: the bundled example
// goes only into an empty one, so that a restart never changes the
// operator's own mesh. It decides what depends on the mesh when it was
// not decided (no file), keeps the mesh's name, and returns the file up
// runs: the live mesh's when it applied none.
func (u *upRun) applyFile(ctx context.Context, file *meshfile.File, name string, restart bool) (*meshfile.File, error) {
	m, f := u.m, u.f
	apply := true
	if restart {
		held, err := assemble.ReadHeld(ctx, u.js)
		if err != nil {
			return nil, err
		}
		if !held.Empty() {
			apply = false
			file = assemble.LiveFile(file, held.Placed)
		}
		if n := len(held.Placed); n > 0 {
			fmt.Fprintf(u.progress, "%s already holds a mesh (%d nodes placed): running it as it is, not the bundled example; \"up MESHFILE\" or \"apply -f MESHFILE\" changes it\n",
				f.data, n)
		} else if !apply {
			// An apply cut short before its placement: the operator's
			// mesh in part, never to be replaced by the example.
			fmt.Fprintf(u.progress, "%s holds a mesh written in part (%d keys, no placement: an apply was cut short): running it as it is, not the bundled example; \"up MESHFILE\" or \"apply -f MESHFILE\" completes it\n",
				f.data, held.Keys)
		}
	}
	if apply && m.Users.Kept {
		// The users were made for the file up last ran with, which never
		// got written: the bundled example's parties may have none.
		if err := m.Data.HaveUsers(file); err != nil {
			return nil, fmt.Errorf("%s holds no mesh, and its NATS users were made for another mesh file (%w): run \"up MESHFILE\" with that file, or remove %s to start with the bundled example",
				f.data, err, f.data)
		}
	}
	if restart {
		if err := u.decide(file, !apply, m.Stored); err != nil {
			return nil, err
		}
	}
	// The mesh's name is kept beside its data for a restart with no file:
	// written by the up that applies a mesh (once the data holds it, see
	// applyMesh), and by a restart told it with --mesh-name where none was
	// kept.
	if apply {
		// The seat's user alone makes buckets: they are made before the
		// operator applies the file into them.
		if err := m.Assembly.MakeBuckets(ctx); err != nil {
			return nil, err
		}
		if !restart && !f.yes {
			if err := u.confirmLoss(ctx, file, name); err != nil {
				return nil, err
			}
		}
		if err := applyMesh(ctx, u.js, file, name, f.data, m.Stored, u.d.Name, u.progress, u.errOut); err != nil {
			return nil, err
		}
	} else if m.Stored == "" && u.d.Name != "" {
		if err := m.Data.KeepMeshName(u.d.Name); err != nil {
			return nil, err
		}
	}
	return file, nil
}

// confirmLoss asks the operator, as apply -f does, before file (name in
// messages) is applied when it no longer places most of the mesh the data
// directory holds ([meshfile.Loss]): with no terminal to ask on, or no
// "yes", it is an error and nothing is written.
func (u *upRun) confirmLoss(ctx context.Context, file *meshfile.File, name string) error {
	current, err := meshfile.Current(ctx, u.js)
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	loss := file.Loss(current, file.Diff(current, time.Now()))
	if !loss.Most() {
		return nil
	}
	if err := confirmOn(u.in, u.errOut, fmt.Sprintf("up %s %s", name, loss)); err != nil {
		return fmt.Errorf("up: %s %s: %w", name, loss, err)
	}
	return nil
}

// start says what up does not run for file, the mesh it runs, then starts
// the router, the seat, and what follows the live mesh beside them: the
// vault and the postgres provider where they are placed, a client per
// node, each started as its module or node appears in the placement and
// stopped when it leaves, its user issued first; and the page.
func (u *upRun) start(ctx context.Context, file *meshfile.File) (*assemble.MeshRunning, error) {
	m, f := u.m, u.f
	if u.d.AutoNoClients {
		clientCreds := ""
		if creds := m.Creds("client-N"); creds != "" {
			clientCreds = " --creds " + creds
		}
		fmt.Fprintf(u.progress, "node clients: none for %d nodes (more than %d); run them with \"client --node N%s\", or give --clients\n",
			len(file.Nodes), assemble.MaxAutoClients, clientCreds)
	}
	if f.postgres == "" && placed(file, pgprovider.Module) {
		fmt.Fprintf(u.progress, "postgres provider: not running (give --postgres DSN); postgres keys stay asked\n")
	}
	u.results = make(chan *compose.Result, 1024)
	cfg := m.MeshConfig(u.d, f.postgres)
	cfg.Seat = assemble.SeatConfig{OnResult: func(r *compose.Result) {
		select {
		case u.results <- r:
		default: // progress is best effort; the log has every result
		}
	}, Metrics: f.metrics}
	cfg.Follow.Said = func(e assemble.Event) { fmt.Fprintf(u.progress, "%s\n", e) }
	running, err := m.Assembly.StartMesh(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if at := running.Seat.MetricsAt; at != nil {
		fmt.Fprintf(u.progress, "metrics on http://%s/metrics, health on http://%s/healthz\n", at, at)
	}
	if f.web != "" && !f.once {
		if err := upWeb(ctx, m.Assembly, f, u.progress, u.log); err != nil {
			return nil, err
		}
	}
	u.seatDone = make(chan error, 1)
	go func() {
		<-running.Seat.Done()
		u.seatDone <- running.Seat.Err()
	}()
	return running, nil
}

// settle returns the wait on running's seat, its results printed on
// progress.
func (u *upRun) settle(running *assemble.MeshRunning) assemble.Settle {
	return assemble.Settle{Seat: running.Seat.Seat(), JS: u.js, Results: u.results, SeatDone: u.seatDone,
		Said: func(r *compose.Result) { printResult(u.progress, r) }}
}

// follow prints the summary, then each of the seat's results and the
// summary again once the seat has settled, until ctx is done (stopped) or
// the seat stops (its error).
func (u *upRun) follow(ctx context.Context, st assemble.Settle) (stopped bool, err error) {
	shown := map[string]string{} // node -> its summary row as last printed
	if err := printSummary(ctx, u.out, u.js, u.hint, shown); err != nil {
		return false, err
	}
	fmt.Fprintln(u.out, "up: running; Ctrl-C stops")
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case err := <-u.seatDone:
			return false, err
		case r := <-u.results:
			printResult(u.out, r)
			if err := st.Settled(ctx); err != nil {
				return false, err
			}
			if err := printSummary(ctx, u.out, u.js, u.hint, shown); err != nil {
				return false, err
			}
		}
	}
}

// operatorFlags returns the flags a command run from another terminal
// needs to reach up's bus at url as the operator: "--nats URL", and
// "--creds FILE" for the operator's credentials file creds unless creds is
// empty (up without auth) or the file commands read by default.
func operatorFlags(url, creds string) string {
	if creds == "" || creds == defaultCreds() {
		return "--nats " + url
	}
	return "--nats " + url + " --creds " + creds
}

// someOf returns the first n of s joined by commas, and how many more
// there are.
func someOf(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:n], ", "), len(s)-n)
}

// listenWarning warns when up's embedded server listens beyond loopback
// with --no-auth: without users, anyone who reaches the address may read
// credentials from the vault and answer asks. It returns "" for a
// loopback address.
func listenWarning(listen string) string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "" // StartServer says what is wrong with it
	}
	if host == "localhost" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	return "warning: --listen " + listen + " is not a loopback address, and up's server has no users: anyone who reaches it " +
		"can read any module's credential from the vault, answer asks and write the mesh (see docs/trust.md)"
}

// upWeb serves the operator's page on its own connection, answering as
// the operator, its login secret in DATA/web-login. A page that cannot
// listen on the default address, or whose login file cannot be used, is
// said and up goes on; one on an address given with --web fails up.
func upWeb(ctx context.Context, asm *assemble.Assembly, f upFlags, out io.Writer, log *slog.Logger) error {
	snc, js, err := asm.Connect(assemble.Component{Role: assemble.Operator})
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, snc.Close)
	nc, err := asm.ConnectIn(assemble.Component{Role: assemble.Operator}, access.Requests)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, nc.Close)
	err = serveWeb(ctx, f.web, filepath.Join(f.data, web.LoginFile), nc, js, "operator", out, log)
	var le loginError
	switch {
	case errors.As(err, &le) && !f.webSet:
		fmt.Fprintf(out, "web page: not served (%v)\n", err)
		return nil
	case err != nil && !f.webSet:
		fmt.Fprintf(out, "web page: not served (%v); give --web ADDR\n", err)
		return nil
	}
	return err
}

// placed reports whether file places module on some node.
func placed(file *meshfile.File, module string) bool {
	for _, mods := range file.Placement {
		if slices.Contains(mods, module) {
			return true
		}
	}
	return false
}

// lockedWriter returns w guarded by a mutex: each Write is whole.
func lockedWriter(w io.Writer) io.Writer {
	if l, ok := w.(*locked); ok {
		return l
	}
	return &locked{w: w}
}

type locked struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *locked) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
