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

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/memlimit"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
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
	// it may do anything), as before section 10 was built.
	noAuth bool
	// clientsSet says --clients was given; without it a mesh of more than
	// maxAutoClients nodes gets no clients.
	clientsSet bool
}

// maxAutoClients is the largest mesh for which up runs every node's client
// unless told: each client holds its own connection and watches.
const maxAutoClients = 100

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

Every component connects as its own NATS user with the permissions of spec section 10: up makes the
users from the mesh file as "auth gen" does, into DATA/auth (keys kept across runs), and runs its server
with them. The operator's credentials are DATA/auth/operator.creds (mode 0600); commands such as get,
apply, asks and answer use it by default when --data is the default, else pass --creds.

One up at a time per --data directory: up holds a lock on DATA/lock (with its pid in it) while it runs,
and a second up on the same directory fails at once.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.clientsSet = cmd.Flags().Changed("clients")
			f.webSet = cmd.Flags().Changed("web")
			return runUp(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, args)
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
	fl.StringVar(&f.web, "web", defaultWeb, "address of the operator's page (provisions, held modules, open asks, live); empty for none; not served with --once")
	fl.BoolVar(&f.noAuth, "no-auth", false, "run the embedded server without users: anyone who reaches it may do anything")
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

func runUp(ctx context.Context, out, errOut io.Writer, f upFlags, args []string) (err error) {
	if f.output != "table" && f.output != "json" {
		return usageError{fmt.Errorf("-o %q: want table or json", f.output)}
	}
	log, err := logger(f.logLevel, os.Stderr)
	if err != nil {
		return err
	}
	// Parse first: a bad file is refused before anything starts.
	var file *meshfile.File
	name := "bundled example homelab.yaml"
	if len(args) == 1 {
		name = args[0]
		file, err = meshfile.ParseFile(args[0])
	} else {
		file, err = meshfile.Parse("homelab.yaml", examples.Homelab)
	}
	if err != nil {
		return err
	}
	if err := validMeshNameFlag(f.meshName); err != nil {
		return err
	}
	// What depends on the mesh (its name, the memory limit's floor, whether
	// node clients run) is decided once, from the mesh up runs, as soon as
	// it is known: a given file's at once, before anything starts; with no
	// file, the data directory's live mesh (or the bundled example, going
	// into an empty one), once the server is up and the mesh read.
	var m upMesh
	stopMemory := func() {}
	defer func() { stopMemory() }()
	decided := func(d upMesh) {
		m = d
		f.meshName, f.clients = d.name, d.clients
		// Memory: the collector keeps the process near what it holds (a
		// 1000-node mesh's start under 300 MB) unless GOGC or GOMEMLIMIT
		// is set.
		if stop, ok := memlimit.Follow(d.budget, upMemoryFactor); ok {
			stopMemory = stop
		}
		upDecided(d)
	}
	if len(args) == 1 {
		d, err := decideMesh(file, f, false, "")
		if err != nil {
			return err
		}
		decided(d)
	}
	if w := listenWarning(f.listen); w != "" && f.noAuth {
		fmt.Fprintln(os.Stderr, w)
	}
	data := assemble.Data(f.data)
	lock, err := data.Lock()
	if err != nil {
		return err
	}
	defer lock.Release()
	// The name of the mesh the data holds, kept by the up that applied it:
	// a restart with no file runs under it, and up MESHFILE says when the
	// file renames the mesh.
	stored, err := data.MeshName()
	if err != nil {
		if len(args) == 0 {
			return err
		}
		fmt.Fprintf(errOut, "up: %v; %s replaces it\n", err, name)
		stored = ""
	}
	// The users: with no file, the data directory's as they are (made from
	// the file it last ran with), never the bundled example's; else made
	// from the file. With a file, whether clients run is decided; with
	// none the data directory is new (or ran --no-auth) and --clients says.
	sc := bus.ServerConfig{Dir: data.Store(), Listen: f.listen}
	users := &assemble.ServerUsers{Written: func() error { return nil }}
	if !f.noAuth {
		if users, err = data.PrepareUsers(file, name, len(args) == 0, f.clients); err != nil {
			return err
		}
		if len(users.Mended) > 0 {
			fmt.Fprintf(errOut, "up: the last up stopped before it wrote the credentials of %d users; written now in %s: %s\n",
				len(users.Mended), data.Auth(), someOf(users.Mended, 5))
		}
		defer func() {
			// A failed write of a credentials file is said with whatever
			// else failed (the success path has checked it already).
			if werr := users.Written(); werr != nil && err != nil && !errors.Is(err, werr) {
				err = errors.Join(err, werr)
			}
		}()
		sc.ConfigFile = users.Config
		// Users whose JWTs expire soon (or did, while up was stopped)
		// are renewed before any component connects, and then while up
		// runs.
		if _, err := users.Authority.Renew(); err != nil {
			return err
		}
		go renewUsers(ctx, users.Authority, log)
	}
	srv, err := bus.StartServer(sc)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	// The follower says what it starts and stops while up prints the
	// seat's results: one writer at a time.
	out, errOut = lockedWriter(out), lockedWriter(errOut)
	progress := out
	if f.once {
		progress = errOut
	}
	fmt.Fprintf(progress, "NATS with JetStream on %s (store %s)\n", srv.URL(), data.Store())
	creds := ""
	if !f.noAuth {
		creds = data.Creds(access.DefaultOperator)
		fmt.Fprintf(progress, "NATS users of every party in %s; the operator's credentials: %s\n", data.Auth(), creds)
	}
	hint := operatorFlags(srv.URL(), creds)
	fmt.Fprintf(progress, "from another terminal: mesh-provisioner get provisions %s\n", hint)
	if !f.once {
		said := make(chan struct{})
		defer func() { <-said }() // errOut is the caller's once up returns
		go func() {
			defer close(said)
			if err := users.Written(); err != nil {
				fmt.Fprintf(errOut, "up: %v\n", err)
			} else if users.Later {
				fmt.Fprintf(errOut, "node clients' credentials written: %s\n", data.Creds("client-N"))
			}
		}()
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
	dial := assemble.Shared(srv.URL(), "", log)
	if !f.noAuth {
		dial = assemble.UsersDialer(srv.URL(), data.Auth(), log)
	}
	asm := &assemble.Assembly{Dial: dial, Log: log}
	stopped := false // up ran until its context ended (Ctrl-C, SIGTERM)
	defer func() {
		cancel()
		asm.Wait()
		if stopped {
			fmt.Fprintln(out, "up: stopped; its components stopped")
		}
	}()

	// The operator's connection applies the file first, so that the seat
	// starts from the whole mesh rather than from half-written buckets; it
	// then reads what the seat keeps.
	onc, ojs, err := asm.Connect(assemble.Component{Role: assemble.Operator})
	if err != nil {
		return err
	}
	defer onc.Close()
	// With no file, the bundled example goes only into an empty data
	// directory: a restart never changes the operator's own mesh.
	apply := true
	if len(args) == 0 {
		current, err := meshfile.Current(ctx, ojs)
		if err != nil {
			return err
		}
		held := 0
		for _, keys := range current {
			held += len(keys)
		}
		switch placed := current[mesh.PlacementBucket]; {
		case len(placed) > 0:
			apply = false
			file = liveFile(file, placed)
			fmt.Fprintf(progress, "%s already holds a mesh (%d nodes placed): running it as it is, not the bundled example; \"up MESHFILE\" or \"apply -f MESHFILE\" changes it\n",
				f.data, len(placed))
		case held > 0:
			// An apply cut short before its placement: the operator's
			// mesh in part, never to be replaced by the example.
			apply = false
			file = liveFile(file, placed)
			fmt.Fprintf(progress, "%s holds a mesh written in part (%d keys, no placement: an apply was cut short): running it as it is, not the bundled example; \"up MESHFILE\" or \"apply -f MESHFILE\" completes it\n",
				f.data, held)
		}
	}
	if apply && users.Kept {
		// The users were made for the file up last ran with, which never
		// got written: the bundled example's parties may have none.
		if err := data.HaveUsers(file); err != nil {
			return fmt.Errorf("%s holds no mesh, and its NATS users were made for another mesh file (%w): run \"up MESHFILE\" with that file, or remove %s to start with the bundled example",
				f.data, err, f.data)
		}
	}
	if len(args) == 0 {
		d, err := decideMesh(file, f, !apply, stored)
		if err != nil {
			return err
		}
		decided(d)
	}
	// The mesh's name is kept beside its data for a restart with no file:
	// written by the up that applies a mesh (once the data holds it, see
	// applyMesh), and by a restart told it with --mesh-name where none was
	// kept.
	if apply {
		// The seat's user alone makes buckets: they are made before the
		// operator applies the file into them.
		if err := asm.MakeBuckets(ctx); err != nil {
			return err
		}
		if err := applyMesh(ctx, ojs, file, name, f.data, stored, m.name, progress, errOut); err != nil {
			return err
		}
	} else if stored == "" && m.name != "" {
		if err := data.KeepMeshName(m.name); err != nil {
			return err
		}
	}
	if m.autoNoClients {
		clientCreds := " --creds " + data.Creds("client-N")
		if f.noAuth {
			clientCreds = ""
		}
		fmt.Fprintf(progress, "node clients: none for %d nodes (more than %d); run them with \"client --node N%s\", or give --clients\n",
			len(file.Nodes), maxAutoClients, clientCreds)
	}
	if f.postgres == "" && placed(file, pgprovider.Module) {
		fmt.Fprintf(progress, "postgres provider: not running (give --postgres DSN); postgres keys stay asked\n")
	}

	// The router, the seat, and what follows the live mesh beside them:
	// the vault and the postgres provider where they are placed, a client
	// per node, each started as its module or node appears in the
	// placement and stopped when it leaves, its user issued first.
	results := make(chan *compose.Result, 1024)
	cfg := assemble.MeshConfig{
		Seat: assemble.SeatConfig{OnResult: func(r *compose.Result) {
			select {
			case results <- r:
			default: // progress is best effort; the log has every result
			}
		}, Metrics: f.metrics},
		Follow: assemble.FollowConfig{
			Runs:       assemble.Runs{Clients: f.clients, Postgres: f.postgres != ""},
			ClientRoot: data.ClientRoot,
			VaultDir:   data.Vault,
			Postgres:   pgprovider.Config{DSN: f.postgres, Mesh: f.meshName, OneMachine: true},
			Said:       func(e assemble.Event) { fmt.Fprintf(progress, "%s\n", e) },
		},
	}
	if !f.noAuth {
		cfg.Follow.Users = &assemble.GenUsers{Dir: data.Auth(), StoreDir: data.Store(), URL: srv.URL(), Before: users.Written, Log: log}
	}
	running, err := asm.StartMesh(ctx, cfg)
	if err != nil {
		return err
	}
	if at := running.Seat.MetricsAt; at != nil {
		fmt.Fprintf(progress, "metrics on http://%s/metrics, health on http://%s/healthz\n", at, at)
	}
	if f.web != "" && !f.once {
		if err := upWeb(ctx, asm, f, progress, log); err != nil {
			return err
		}
	}
	st := running.Seat.Seat()
	seatDone := make(chan error, 1)
	go func() {
		<-running.Seat.Done()
		seatDone <- running.Seat.Err()
	}()

	// The provisions waitQuiet follows are printed by --once after the
	// components stop: their copy follows until up returns.
	follow, stopFollow := context.WithCancel(outer)
	defer stopFollow()
	provisions, err := waitQuiet(ctx, follow, st, ojs, running.Follower.Providers(), results, progress, seatDone)
	if err != nil {
		return err
	}
	if !f.once {
		stopFollow()
		provisions = nil
	}
	if f.clients {
		if err := waitApplied(ctx, ojs); err != nil {
			return err
		}
	}
	if f.once {
		cancel()
		asm.Wait()
		if err := users.Written(); err != nil {
			return err
		}
		return printKept(outer, out, ojs, hint, f.output, provisions)
	}
	shown := map[string]string{} // node -> its summary row as last printed
	if err := printSummary(ctx, out, ojs, hint, shown); err != nil {
		return err
	}
	fmt.Fprintln(out, "up: running; Ctrl-C stops")
	for {
		select {
		case <-ctx.Done():
			stopped = true
			return nil
		case err := <-seatDone:
			return err
		case r := <-results:
			printResult(out, r)
			if err := waitSettled(ctx, st, ojs, results, out, seatDone); err != nil {
				return err
			}
			if err := printSummary(ctx, out, ojs, hint, shown); err != nil {
				return err
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

// renewEvery is how often up renews its parties' credentials files: a
// thirtieth of their life, so that each is renewed ten times before the
// third of its life that is left when it is due.
const renewEvery = auth.DefaultExpiry / 30

// renewUsers renews the due credentials files of a every renewEvery until
// ctx is done; a running component reads its renewed file when the server
// closes its connection at the old JWT's expiry. A failure is logged and
// tried again at the next tick.
func renewUsers(ctx context.Context, a *auth.Authority, log *slog.Logger) {
	t := time.NewTicker(renewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		renewed, err := a.Renew()
		if err != nil {
			log.Error("up: renew credentials", "dir", a.Dir(), "err", err)
			continue
		}
		if len(renewed) > 0 {
			log.Info("up: credentials renewed", "dir", a.Dir(), "users", len(renewed))
		}
	}
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
// the operator. A page that cannot listen on the default address is said
// and up goes on; one on an address given with --web fails up.
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
	err = serveWeb(ctx, f.web, nc, js, "operator", out, log)
	if err != nil && !f.webSet {
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
