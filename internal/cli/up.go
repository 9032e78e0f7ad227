package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lockfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/memlimit"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
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

// DataLock is the file in up's --data directory that up holds an exclusive
// lock on (flock) for its whole life, with its pid in it: two up processes
// never share one JetStream store.
const DataLock = "lock"

// lockData creates data (mode 0700) and takes the lock on data/DataLock;
// another up holding it fails at once, naming the directory and its pid.
func lockData(data string) (*lockfile.Lock, error) {
	// Another local user who may write the data directory could replace
	// the server's configuration or a party's credentials in it.
	if err := auth.CheckDir(data); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	l, err := lockfile.Take(filepath.Join(data, DataLock))
	var held *lockfile.HeldError
	if errors.As(err, &held) {
		if held.PID == 0 {
			return nil, fmt.Errorf("%s is in use by another up", data)
		}
		return nil, fmt.Errorf("%s is in use by another up (pid %d)", data, held.PID)
	}
	return l, err
}

func logger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: %w", level, err)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// up's soft memory limit (see memlimit.Follow): 1.5 times the live heap,
// never below a budget of 256 KiB a node of the mesh and never below
// 256 MiB (below the budget the collector's own pacing rules).
const (
	upMemoryFloor   = 256 << 20
	upMemoryPerNode = 256 << 10
	upMemoryFactor  = 1.5
)

// upMemoryBudget is the floor of up's memory limit for a mesh of nodes
// nodes, in bytes: 256 KiB a node, at least 256 MiB.
func upMemoryBudget(nodes int) uint64 {
	return max(upMemoryFloor, uint64(nodes)*upMemoryPerNode)
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
	lock, err := lockData(f.data)
	if err != nil {
		return err
	}
	defer lock.Release()
	// The name of the mesh the data holds, kept by the up that applied it:
	// a restart with no file runs under it, and up MESHFILE says when the
	// file renames the mesh.
	stored, err := readMeshName(f.data)
	if err != nil {
		if len(args) == 0 {
			return err
		}
		fmt.Fprintf(errOut, "up: %v; %s replaces it\n", err, name)
		stored = ""
	}
	sc := bus.ServerConfig{Dir: filepath.Join(f.data, "nats"), Listen: f.listen}
	credsWritten := func() error { return nil }
	later := false // node clients' credentials are written after the server starts
	authDir := filepath.Join(f.data, AuthDir)
	var authority *auth.Authority // nil with --no-auth
	existing := filepath.Join(authDir, auth.ConfigFile)
	switch _, statErr := os.Stat(existing); {
	case f.noAuth:
	case len(args) == 0 && statErr == nil:
		// No file: the data directory's mesh runs as it is, and so do its
		// users (made from the file it was last run with), never the
		// bundled example's.
		sc.ConfigFile = existing
		authority, err = auth.Open(authDir, auth.Options{})
		if err != nil {
			return err
		}
		// An up stopped while it wrote the node clients' credentials
		// (after its server started) left some unwritten: written now,
		// from the record it made of them.
		mended, err := auth.Mend(authDir)
		if err != nil {
			return err
		}
		if len(mended) > 0 {
			fmt.Fprintf(errOut, "up: the last up stopped before it wrote the credentials of %d users; written now in %s: %s\n",
				len(mended), authDir, someOf(mended, 5))
		}
	default:
		parties, err := access.Parties(auth.MeshOf(file, nil))
		if err != nil {
			return err
		}
		opts := auth.Options{StoreDir: sc.Dir, Source: name}
		// With a file, whether clients run is decided; with none the
		// data directory is new (or ran --no-auth) and --clients says.
		if !f.clients {
			// No client of up's reads the node clients' credentials:
			// they are written while the server starts.
			clients := map[string]bool{}
			for _, p := range parties {
				if p.Has(access.Client) {
					clients[p.User] = true
				}
			}
			opts.Later = func(user string) bool { return clients[user] }
		}
		res, err := auth.Gen(authDir, parties, opts)
		if err != nil {
			return err
		}
		// They are written while the server starts; up returns once they
		// are, and says when one is not.
		go res.WriteLater()
		credsWritten, later = res.WriteLater, opts.Later != nil
		defer func() {
			// A failed write of a credentials file is said with whatever
			// else failed (the success path has checked it already).
			if werr := res.WriteLater(); werr != nil && err != nil && !errors.Is(err, werr) {
				err = errors.Join(err, werr)
			}
		}()
		sc.ConfigFile = res.Config
		authority = res.Authority
	}
	if authority != nil {
		// Users whose JWTs expire soon (or did, while up was stopped)
		// are renewed before any component connects, and then while up
		// runs.
		if _, err := authority.Renew(); err != nil {
			return err
		}
		go renewUsers(ctx, authority, log)
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
	fmt.Fprintf(progress, "NATS with JetStream on %s (store %s)\n", srv.URL(), filepath.Join(f.data, "nats"))
	hint := "--nats " + srv.URL()
	if !f.noAuth {
		creds := auth.CredsPath(authDir, access.DefaultOperator)
		fmt.Fprintf(progress, "NATS users of every party in %s; the operator's credentials: %s\n", authDir, creds)
		if creds != defaultCreds() {
			hint += " --creds " + creds
		}
	}
	fmt.Fprintf(progress, "from another terminal: mesh-provisioner get provisions %s\n", hint)
	if !f.once {
		go func() {
			if err := credsWritten(); err != nil {
				fmt.Fprintf(os.Stderr, "up: %v\n", err)
			} else if later {
				// Stderr: out belongs to the loop below (and to the caller
				// once up returns).
				fmt.Fprintf(os.Stderr, "node clients' credentials written: %s\n", filepath.Join(authDir, "client-N"+auth.CredsExt))
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
		dial = assemble.UsersDialer(srv.URL(), authDir, log)
	}
	asm := &assemble.Assembly{Dial: dial, Log: log}
	defer func() {
		cancel()
		asm.Wait()
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
	if apply && len(args) == 0 && sc.ConfigFile == existing {
		// The users were made for the file up last ran with, which never
		// got written: the bundled example's parties may have none.
		if err := haveUsers(authDir, file); err != nil {
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
		if err := applyMesh(ctx, ojs, file, name, f.data, stored, m.name, progress, errOut); err != nil {
			return err
		}
	} else if stored == "" && m.name != "" {
		if err := writeMeshName(f.data, m.name); err != nil {
			return err
		}
	}
	// The buckets the node clients and the vault follow exist before they
	// start, so that none of them waits on a bucket the seat has yet to make.
	for _, b := range []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket, mesh.RegistryBucket,
		mesh.AppliedBucket, mesh.CollectBucket, mesh.RecordsBucket} {
		if _, err := bus.Bucket(ctx, ojs, b, 0); err != nil {
			return err
		}
	}
	// The clients' lease bucket too: the operator makes it before any
	// client does.
	if _, err := bus.LeaseBucket(ctx, ojs, mesh.ClientsBucket, client.LeaseTTL); err != nil {
		return err
	}

	if _, err := asm.StartRouter(ctx); err != nil {
		return err
	}

	if f.web != "" && !f.once {
		if err := upWeb(ctx, asm, f, progress, log); err != nil {
			return err
		}
	}

	results := make(chan *compose.Result, 1024)
	sr, err := asm.StartSeat(ctx, assemble.SeatConfig{OnResult: func(r *compose.Result) {
		select {
		case results <- r:
		default: // progress is best effort; the log has every result
		}
	}, Metrics: f.metrics})
	if err != nil {
		return err
	}
	if sr.MetricsAt != nil {
		fmt.Fprintf(progress, "metrics on http://%s/metrics, health on http://%s/healthz\n", sr.MetricsAt, sr.MetricsAt)
	}
	st := sr.Seat()
	seatDone := make(chan error, 1)
	go func() {
		<-sr.Done()
		seatDone <- sr.Err()
	}()

	if m.autoNoClients {
		clientCreds := " --creds " + filepath.Join(authDir, "client-N"+auth.CredsExt)
		if f.noAuth {
			clientCreds = ""
		}
		fmt.Fprintf(progress, "node clients: none for %d nodes (more than %d); run them with \"client --node N%s\", or give --clients\n",
			len(file.Nodes), maxAutoClients, clientCreds)
	}
	// What runs beside the seat and the router follows the live mesh:
	// the vault and the postgres provider where they are placed, a client
	// per node, each started as its module or node appears in the
	// placement and stopped when it leaves, its user issued first.
	fcfg := assemble.FollowConfig{
		Runs:       assemble.Runs{Clients: f.clients, Postgres: f.postgres != ""},
		ClientRoot: func(node string) string { return filepath.Join(f.data, "nodes", node) },
		VaultDir:   func(node string) string { return filepath.Join(f.data, "vault", node) },
		Postgres:   pgprovider.Config{DSN: f.postgres, Mesh: f.meshName, OneMachine: true},
		Said:       func(e assemble.Event) { fmt.Fprintf(progress, "%s\n", e) },
	}
	if !f.noAuth {
		fcfg.Users = &assemble.GenUsers{Dir: authDir, StoreDir: sc.Dir, Before: credsWritten, Log: log}
	}
	follower, err := asm.Follow(ctx, ojs, fcfg)
	if err != nil {
		return err
	}
	if f.postgres == "" && placed(file, pgprovider.Module) {
		fmt.Fprintf(progress, "postgres provider: not running (give --postgres DSN); postgres keys stay asked\n")
	}
	providers := follower.Providers()
	// The provisions waitQuiet follows are printed by --once after the
	// components stop: their copy follows until up returns.
	follow, stopFollow := context.WithCancel(outer)
	defer stopFollow()
	provisions, err := waitQuiet(ctx, follow, st, ojs, providers, results, progress, seatDone)
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
		if err := credsWritten(); err != nil {
			return err
		}
		return printKept(outer, out, ojs, f.output, provisions)
	}
	shown := map[string]string{} // node -> its summary row as last printed
	if err := printSummary(ctx, out, ojs, shown); err != nil {
		return err
	}
	fmt.Fprintln(out, "up: running; Ctrl-C stops")
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-seatDone:
			return err
		case r := <-results:
			printResult(out, r)
			if err := waitSettled(ctx, st, ojs, results, out, seatDone); err != nil {
				return err
			}
			if err := printSummary(ctx, out, ojs, shown); err != nil {
				return err
			}
		}
	}
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

// liveFile is file with its nodes and placement replaced by those the
// placement bucket holds (node -> value): what up runs clients and
// providers for when it runs the mesh a data directory holds. A placement
// that does not decode places nothing. Its name (Mesh) is cleared: the
// bus never holds it (up keeps it in DATA/MeshNameFile).
func liveFile(file *meshfile.File, placement map[string][]byte) *meshfile.File {
	lf := *file
	lf.Mesh = ""
	lf.Nodes = make([]string, 0, len(placement))
	lf.Placement = map[string][]string{}
	for node, v := range placement {
		lf.Nodes = append(lf.Nodes, node)
		var p mesh.Placement
		if json.Unmarshal(v, &p) == nil {
			for _, pm := range p.Modules {
				lf.Placement[node] = append(lf.Placement[node], pm.Module)
			}
		}
	}
	sort.Strings(lf.Nodes)
	return &lf
}

// haveUsers returns an error naming the first party of file that has no
// credentials file in the users' directory dir, nil when every one has.
func haveUsers(dir string, file *meshfile.File) error {
	parties, err := access.Parties(auth.MeshOf(file, nil))
	if err != nil {
		return err
	}
	for _, p := range parties {
		path := auth.CredsPath(dir, p.User)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("no %s", path)
		}
	}
	return nil
}

// upMesh is what up decides from the mesh it runs, once that mesh is
// known (see decideMesh): never from the bundled example when the data
// directory holds a mesh of its own.
type upMesh struct {
	// nodes is the number of the mesh's nodes (placed nodes, for the live
	// mesh of a restart with no file).
	nodes int
	// name is the mesh's name ("" for none): the postgres provider names
	// its roles and databases after it.
	name string
	// budget is the floor of up's soft memory limit, in bytes
	// (upMemoryBudget of nodes).
	budget uint64
	// clients says up runs a node client per node.
	clients bool
	// autoNoClients says clients are off because the mesh has more than
	// maxAutoClients nodes and --clients was not given.
	autoNoClients bool
}

// upDecided is called with what up decided, once per run; tests replace it
// to see the decision.
var upDecided = func(upMesh) {}

// decideMesh decides what depends on the mesh for file, the mesh up runs.
// restart says file is a data directory's live mesh, run with no file:
// then its name is stored (what DATA/MeshNameFile held, "" for nothing),
// and a --mesh-name that contradicts it is a usage error (a restart never
// changes the mesh); else the name is --mesh-name or the file's mesh:. It
// is a usage error when a postgres provider runs and the mesh has no name.
func decideMesh(file *meshfile.File, f upFlags, restart bool, stored string) (upMesh, error) {
	d := upMesh{nodes: len(file.Nodes), clients: f.clients}
	d.budget = upMemoryBudget(d.nodes)
	if f.clients && !f.clientsSet && d.nodes > maxAutoClients {
		d.clients, d.autoNoClients = false, true
	}
	if !restart {
		var err error
		d.name, err = meshName(file, f.meshName, f.postgres != "")
		return d, err
	}
	keep := filepath.Join(f.data, MeshNameFile)
	switch {
	case f.meshName != "" && stored != "" && f.meshName != stored:
		return d, usageError{fmt.Errorf("--mesh-name %q: the mesh in %s is named %q (%s); a restart never changes the mesh: leave --mesh-name out, "+
			"or run \"up MESHFILE --mesh-name %s\" to rename it (the postgres provider never takes the roles and databases of %q under a new name)",
			f.meshName, f.data, stored, keep, f.meshName, stored)}
	case f.meshName != "":
		d.name = f.meshName
	default:
		d.name = stored
	}
	if d.name == "" && f.postgres != "" {
		return d, usageError{fmt.Errorf("--postgres: the mesh in %s has no name that up knows (%s: none; its file named no mesh, or an older up ran it): "+
			"pass --mesh-name NAME, the name its roles and databases carry (NAME_<node>_<consumer>), or run \"up MESHFILE\"", f.data, keep)}
	}
	return d, nil
}

// validMeshNameFlag returns a usage error when flag (--mesh-name) is given
// and is not a valid name.
func validMeshNameFlag(flag string) error {
	if flag != "" && !mesh.ValidName(flag) {
		return usageError{fmt.Errorf("--mesh-name %q is not a valid name (lower-case [a-z0-9][a-z0-9-]*)", flag)}
	}
	return nil
}

// MeshNameFile is the file in up's --data directory that holds the name
// of the mesh the directory holds (one line), for a restart with no file:
// up writes it when it applies a mesh (removes it when that mesh has no
// name), and a restart with --mesh-name where none is kept. "apply -f"
// never touches it: the name is up's configuration, never a bus value.
const MeshNameFile = "mesh-name"

// readMeshName returns the name data/MeshNameFile holds, "" when there is
// no such file. A file that holds no valid name is an error naming it.
func readMeshName(data string) (string, error) {
	path := filepath.Join(data, MeshNameFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if !mesh.ValidName(name) {
		return "", fmt.Errorf("%s holds %q, not a mesh's name (lower-case [a-z0-9][a-z0-9-]*): write the mesh's name in it, or remove it and run \"up MESHFILE\"", path, name)
	}
	return name, nil
}

// applyMesh applies file (label names it in messages) through js, then
// keeps meshName, the mesh's name, in data/MeshNameFile for a restart with
// no file ("" removes it). The name is kept once the data holds the new mesh,
// whole or in part: when [meshfile.Apply] returns, or fails having written
// or removed a key. An Apply that fails before it wrote anything (a value
// over the server's max payload refuses the whole file) leaves the kept
// name as it is: the data still holds the mesh it names. stored is the name
// kept before ("" for none); one other than meshName is said on errOut
// when the new one is kept. What it applied is said on progress. It returns
// Apply's error, or the error of writing the name.
func applyMesh(ctx context.Context, js jetstream.JetStream, file *meshfile.File, label, data, stored, meshName string, progress, errOut io.Writer) error {
	stats, err := meshfile.Apply(ctx, js, file, time.Now())
	if err != nil && stats.Written+stats.Removed == 0 {
		return err
	}
	if stored != "" && stored != meshName {
		fmt.Fprintf(errOut, "up: the mesh in %s was named %q and is now %s: the postgres provider names its roles and databases after the new name and never takes those of %q\n",
			data, stored, nameOrNone(meshName), stored)
	}
	if werr := writeMeshName(data, meshName); werr != nil {
		return errors.Join(err, werr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "applied %s: %d written, %d unchanged, %d removed\n", label, stats.Written, stats.Unchanged, stats.Removed)
	return nil
}

// writeMeshName keeps name in data/MeshNameFile (mode 0600, replaced
// whole by a rename), or removes that file when name is "".
func writeMeshName(data, name string) error {
	path := filepath.Join(data, MeshNameFile)
	if name == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(name+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// nameOrNone is name quoted, or "without a name" for "".
func nameOrNone(name string) string {
	if name == "" {
		return "without a name"
	}
	return fmt.Sprintf("named %q", name)
}

// meshName is the mesh's name: flag (--mesh-name) when given, else the
// mesh file's "mesh:". It is a usage error when flag is not a valid name,
// or when needed (a postgres provider runs) and there is none.
func meshName(file *meshfile.File, flag string, needed bool) (string, error) {
	name := file.Mesh
	if flag != "" {
		if err := validMeshNameFlag(flag); err != nil {
			return "", err
		}
		name = flag
	}
	if name == "" && needed {
		return "", usageError{fmt.Errorf("--postgres: %s names no mesh: add \"mesh: NAME\" to it or pass --mesh-name NAME "+
			"(the postgres provider names its roles and databases after the mesh, so that meshes sharing a server never meet)", file.Name)}
	}
	return name, nil
}

// upWeb serves the operator's page on its own connection, answering as
// the operator. A page that cannot listen on the default address is said
// and up goes on; one on an address given with --web fails up.
func upWeb(ctx context.Context, asm *assemble.Assembly, f upFlags, out io.Writer, log *slog.Logger) error {
	nc, js, err := asm.Connect(assemble.Component{Role: assemble.Operator})
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

// waitQuiet waits until the mesh is quiet: the provider of every needed
// key among providers (those up runs) has an entry for it, the seat has
// taken and judged every write made so far to the buckets it follows (the
// bound buckets of the providers included: [seat.Seat.Marks]) and has
// nothing left to do, and nothing was written to those buckets meanwhile.
// It prints the seat's results as they come. When providers run, it
// returns the copy of the provisions bucket it followed (with values,
// following until follow is done), for the print of up --once; else nil.
func waitQuiet(ctx, follow context.Context, st *seat.Seat, js jetstream.JetStream, providers []string,
	results <-chan *compose.Result, out io.Writer, seatDone <-chan error) (*bus.Copy, error) {
	if len(providers) == 0 {
		return nil, waitSettled(ctx, st, js, results, out, seatDone)
	}
	// The providers' answers are followed only once the seat has settled
	// a first time: the seat writes every provision at least once at
	// start, and a provided one again, so that following from the start
	// cost the server a delivery and up a decode for each of those
	// changes; from then on the copy reads each provision once and the
	// few changes after.
	if err := waitSettled(ctx, st, js, results, out, seatDone); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered, provisions, err := followAnswers(ctx, follow, js, providers)
	if err != nil {
		return nil, err
	}
	for {
		if err := pollUntil(ctx, answered); err != nil {
			return nil, err
		}
		marks := st.Marks(ctx, js)
		if err := waitSettledAt(ctx, st, marks, results, out, seatDone); err != nil {
			return nil, err
		}
		// A provider that answered late, or keys the seat wrote meanwhile
		// that a provider has yet to answer: once more.
		if answered() && maps.Equal(st.Marks(ctx, js), marks) {
			return provisions, nil
		}
	}
}

// followAnswers follows the bound buckets of providers until ctx is done
// and the provisions until follow is done, and returns once each copy holds its bucket's keys,
// with a function that reports whether the provider of every needed key
// among providers has an entry for it, and the copy of the provisions. It
// keeps aside only the keys one of providers answers, each with its
// provider; the bound buckets' copies keep revisions only, and of each
// provision only the provider and state are read, once per change (a mesh
// of 10,000 nodes holds over 300,000: see answerReader).
func followAnswers(ctx, follow context.Context, js jetstream.JetStream, providers []string) (answered func() bool, provisions *bus.Copy, err error) {
	bound := map[string]*bus.Copy{}
	var copies []*bus.Copy
	for _, p := range providers {
		bound[p] = bus.Follow(ctx, js, mesh.BoundBucket(p), bus.Options{Create: true, RevisionsOnly: true})
		copies = append(copies, bound[p])
	}
	var mu sync.Mutex
	answers := map[string]string{} // key -> its provider, one of providers
	var reader answerReader        // on the copy's goroutine only
	provs := bus.Follow(follow, js, mesh.ProvisionsBucket, bus.Options{OnChange: func(ch bus.Change) {
		mu.Lock()
		defer mu.Unlock()
		if !ch.Deleted {
			if p, answered := reader.read(ch.Value); answered && bound[p] != nil {
				answers[ch.Key] = p
				return
			}
		}
		delete(answers, ch.Key)
	}})
	if err := ready(ctx, append(copies, provs)...); err != nil {
		return nil, nil, err
	}
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		for key, p := range answers {
			if _, has := bound[p].Get(key); !has {
				return false
			}
		}
		return true
	}, provs, nil
}

// ready waits until every copy holds its bucket's keys.
func ready(ctx context.Context, copies ...*bus.Copy) error {
	for _, c := range copies {
		select {
		case <-c.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// pollUntil checks cond every 50 ms until it holds or ctx is done: the
// operator's command waits on what other components write.
func pollUntil(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if cond() {
			return nil
		}
	}
}

// waitApplied waits until every plan has been applied by its node's client
// at the plan's build. Each plan and applied value is decoded once per
// change (its fingerprint kept), not at every poll.
func waitApplied(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// fingerprint is a value's fingerprint; ok is false when the value
	// does not decode (never applied, then).
	type fingerprint struct {
		fp string
		ok bool
	}
	var mu sync.Mutex
	planned := map[string]fingerprint{} // plan key -> the plan's
	applied := map[string]fingerprint{} // plan key -> the applied value's
	follow := func(bucket string, into map[string]fingerprint, decode func([]byte) (string, error), create bool) *bus.Copy {
		return bus.Follow(ctx, js, bucket, bus.Options{Create: create, RevisionsOnly: true, OnChange: func(ch bus.Change) {
			mu.Lock()
			defer mu.Unlock()
			if ch.Deleted {
				delete(into, ch.Key)
				return
			}
			fp, err := decode(ch.Value)
			into[ch.Key] = fingerprint{fp, err == nil}
		}})
	}
	plans := follow(mesh.PlansBucket, planned, func(v []byte) (string, error) {
		var p mesh.Plan
		err := json.Unmarshal(v, &p)
		return p.Fingerprint, err
	}, false)
	apps := follow(mesh.AppliedBucket, applied, func(v []byte) (string, error) {
		var a mesh.Applied
		err := json.Unmarshal(v, &a)
		return a.Fingerprint, err
	}, true)
	if err := ready(ctx, plans, apps); err != nil {
		return err
	}
	return pollUntil(ctx, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for key, p := range planned {
			if a, has := applied[key]; !p.ok || !has || !a.ok || a.fp != p.fp {
				return false
			}
		}
		return true
	})
}

// waitSettled prints results until the seat has taken every write made so
// far to the buckets it follows ([seat.Seat.Marks]) and has nothing left to
// do.
func waitSettled(ctx context.Context, st *seat.Seat, js jetstream.JetStream, results <-chan *compose.Result, out io.Writer, seatDone <-chan error) error {
	return waitSettledAt(ctx, st, st.Marks(ctx, js), results, out, seatDone)
}

// waitSettledAt prints results until the seat has taken every write up to
// marks and has nothing left to do.
func waitSettledAt(ctx context.Context, st *seat.Seat, marks map[string]uint64, results <-chan *compose.Result, out io.Writer, seatDone <-chan error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-seatDone:
			if err == nil {
				err = fmt.Errorf("the seat stopped")
			}
			return err
		case r := <-results:
			printResult(out, r)
		case <-tick.C:
			if st.Settled(marks) && len(results) == 0 {
				return nil
			}
		}
	}
}

func printResult(out io.Writer, r *compose.Result) {
	if !r.Changed() && len(r.Held) == 0 && len(r.Problems) == 0 {
		return
	}
	if r.Node == "" { // keys re-judged on a provider's entry or have, or an ask's record
		keys := make([]string, 0, len(r.Provisions)+len(r.Retired))
		for _, k := range r.Retired {
			keys = append(keys, k+" retired")
		}
		for k, p := range r.Provisions {
			if !slices.Contains(r.Retired, k) { // a key retired in this judging is said once, as retired
				keys = append(keys, k+" "+string(p.State))
			}
		}
		sort.Strings(keys)
		fmt.Fprintf(out, "judged     %s\n", someOf(keys, 3))
		for _, p := range r.Problems {
			fmt.Fprintf(out, "           warrant refused: %s\n", p)
		}
		return
	}
	fmt.Fprintf(out, "composed %-10s plans %d written %d removed, provisions %d changed, %d retiring, %d held, %d problems (%v)\n",
		r.Node, len(r.Plans), len(r.PlansRemoved), len(r.Provisions), len(r.Retiring), len(r.Held), len(r.Problems),
		(r.Compose + r.Judge).Round(time.Microsecond))
}

// kept reads what the seat keeps: every plan, provision and refusal as
// stored, by the names of keptBuckets; the provisions from provisions when
// it is not nil (see readKept).
func kept(ctx context.Context, js jetstream.JetStream, provisions *bus.Copy) (map[string]map[string]json.RawMessage, error) {
	all := map[string]map[string]json.RawMessage{}
	for _, b := range keptBuckets {
		ans, err := readKept(ctx, js, b.bucket, provisionsCopy(b.bucket, provisions))
		if err != nil {
			return nil, err
		}
		m := map[string]json.RawMessage{}
		for _, it := range ans.Items {
			m[it.Key] = asJSON(it.Value)
		}
		all[b.name] = m
	}
	return all, nil
}

// keptBuckets are the buckets of what the seat keeps, by the names up
// prints them under, in the order it prints them.
var keptBuckets = []struct{ name, bucket string }{
	{"plans", mesh.PlansBucket}, {"provisions", mesh.ProvisionsBucket}, {"refused", mesh.RefusedBucket},
}

// printKept prints what the seat keeps: one JSON object
// {"plans":{..},"provisions":{..},"refused":{..}}, or tables. The JSON is
// written one bucket at a time as it is read, so that no more than one
// bucket's values are held at once. The provisions are taken from
// provisions when it is not nil (a copy waitQuiet followed: up no longer
// writes, so that it is read again only if it has not caught up with the
// bucket's last write within a few seconds).
func printKept(ctx context.Context, out io.Writer, js jetstream.JetStream, output string, provisions *bus.Copy) error {
	if output == "json" {
		w := bufio.NewWriter(out)
		w.WriteString("{")
		for i, b := range keptBuckets {
			ans, err := readKept(ctx, js, b.bucket, provisionsCopy(b.bucket, provisions))
			if err != nil {
				return err
			}
			sort.Slice(ans.Items, func(i, j int) bool { return ans.Items[i].Key < ans.Items[j].Key })
			if i > 0 {
				w.WriteString(",")
			}
			if err := writeKeptJSON(w, b.name, ans.Items); err != nil {
				return err
			}
		}
		w.WriteString("\n}\n")
		return w.Flush()
	}
	all, err := kept(ctx, js, provisions)
	if err != nil {
		return err
	}
	for _, what := range []string{"plans", "provisions", "refused"} {
		kind := getKinds[what]
		items := make([]getItem, 0, len(all[what]))
		for k, v := range all[what] {
			items = append(items, getItem{Key: k, Value: v})
		}
		sort.Slice(items, func(i, j int) bool { return items[i].Key < items[j].Key })
		fmt.Fprintf(out, "\n%s (%d)\n", strings.ToUpper(what), len(items))
		if err := writeGetTable(out, what, kind, getAnswer{Items: items}, false); err != nil {
			return err
		}
	}
	return writeSummary(ctx, out, js, all, nil)
}

// provisionsCopy is provisions for the provisions bucket, else nil.
func provisionsCopy(bucket string, provisions *bus.Copy) *bus.Copy {
	if bucket == mesh.ProvisionsBucket {
		return provisions
	}
	return nil
}

// readKept reads every key of bucket as readBucket does, from followed
// instead when it is not nil and it catches up with the bucket's last
// write (stream sequence) within caughtUpWait.
func readKept(ctx context.Context, js jetstream.JetStream, bucket string, followed *bus.Copy) (getAnswer, error) {
	if followed != nil && caughtUp(ctx, js, followed) {
		var ans getAnswer
		ans.Items = make([]getItem, 0, followed.Len())
		followed.Range(func(key string, it bus.Item) bool {
			ans.Items = append(ans.Items, getItem{Key: key, Value: it.Value})
			return true
		})
		return ans, nil
	}
	return readBucket(ctx, js, bucket, func(string, []byte) (bool, string) { return true, "" })
}

// caughtUpWait is how long readKept waits for a followed copy to catch up
// with its bucket before reading the bucket anew (a variable for tests).
var caughtUpWait = 5 * time.Second

// caughtUp reports whether c has taken its bucket's last write (the
// stream's last sequence, read now), waiting up to caughtUpWait.
func caughtUp(ctx context.Context, js jetstream.JetStream, c *bus.Copy) bool {
	str, err := js.Stream(ctx, "KV_"+c.Bucket())
	if err != nil {
		return false
	}
	last := str.CachedInfo().State.LastSeq
	ctx, cancel := context.WithTimeout(ctx, caughtUpWait)
	defer cancel()
	return c.Seen() >= last || pollUntil(ctx, func() bool { return c.Seen() >= last }) == nil
}

// writeKeptJSON writes one member of printKept's JSON object: "name" and
// the object of items (sorted by key), each value as it is stored (a value
// that is not JSON as a string), indented as json.Encoder with
// SetIndent("", "  ") indents the whole object.
func writeKeptJSON(w *bufio.Writer, name string, items []getItem) error {
	buf := appendQuoted([]byte("\n  "), name)
	buf = append(buf, ": {"...)
	for i, it := range items {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, "\n    "...)
		buf = appendQuoted(buf, it.Key)
		buf = append(buf, ": "...)
		buf = appendIndented(buf, asJSON(it.Value), "    ", "  ")
		if len(buf) >= 64<<10 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if len(items) > 0 {
		buf = append(buf, "\n  "...)
	}
	buf = append(buf, '}')
	_, err := w.Write(buf)
	return err
}

// printSummary prints per node how many provisions are in each state and
// which modules are held: only the nodes whose row differs from shown
// (node -> row as last printed, updated; nil prints every node).
func printSummary(ctx context.Context, out io.Writer, js jetstream.JetStream, shown map[string]string) error {
	all, err := kept(ctx, js, nil)
	if err != nil {
		return err
	}
	return writeSummary(ctx, out, js, all, shown)
}

// writeSummary is printSummary over what the seat keeps, already read.
func writeSummary(ctx context.Context, out io.Writer, js jetstream.JetStream, all map[string]map[string]json.RawMessage, shown map[string]string) error {
	type row struct {
		plans  int
		states map[mesh.State]int
		held   []string
	}
	rows := map[string]*row{}
	get := func(n string) *row {
		if rows[n] == nil {
			rows[n] = &row{states: map[mesh.State]int{}}
		}
		return rows[n]
	}
	for k := range all["plans"] {
		n, _, _ := strings.Cut(k, ".")
		get(n).plans++
	}
	for k, v := range all["provisions"] {
		var p mesh.Provision
		if json.Unmarshal(v, &p) != nil {
			continue
		}
		n, _, _ := strings.Cut(k, ".")
		get(n).states[p.State]++
	}
	for k := range all["refused"] {
		n, m, _ := strings.Cut(k, ".")
		r := get(n)
		r.held = append(r.held, m)
	}
	nodes := make([]string, 0, len(rows))
	for n := range rows {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var table [][]string
	for _, n := range nodes {
		r := rows[n]
		sort.Strings(r.held)
		held := "-"
		if len(r.held) > 0 {
			held = strings.Join(r.held, ", ")
		}
		cells := []string{n, fmt.Sprint(r.plans), fmt.Sprint(r.states[mesh.Provided]), fmt.Sprint(r.states[mesh.Asked]),
			fmt.Sprint(r.states[mesh.Waits]), fmt.Sprint(r.states[mesh.Failed]), fmt.Sprint(r.states[mesh.Retiring]), held}
		text := strings.Join(cells, "\t")
		if shown != nil {
			if shown[n] == text {
				continue // unchanged since last printed
			}
			shown[n] = text
		}
		table = append(table, cells)
	}
	var gone []string
	for n := range shown {
		if rows[n] == nil {
			gone = append(gone, n)
			delete(shown, n)
		}
	}
	sort.Strings(gone)
	if len(table) > 0 {
		fmt.Fprintln(out)
		if err := writeTable(out, []string{"NODE", "PLANS", "PROVIDED", "ASKED", "WAITS", "FAILED", "RETIRING", "HELD"}, table, false); err != nil {
			return err
		}
	}
	for _, n := range gone {
		fmt.Fprintf(out, "%s: nothing kept any more\n", n)
	}
	ans, err := readBucket(ctx, js, mesh.RecordsBucket, func(_ string, v []byte) (bool, string) {
		var r mesh.Record
		return json.Unmarshal(v, &r) == nil && r.State == mesh.RecordOpen, ""
	})
	if err != nil {
		return err
	}
	if n := len(ans.Items); n > 0 {
		fmt.Fprintf(out, "%d asks open for the operator: mesh-provisioner asks --nats %s\n", n, natsURLOf(js))
	} else {
		fmt.Fprintln(out, "no asks open")
	}
	return nil
}

func natsURLOf(js jetstream.JetStream) string { return js.Conn().ConnectedUrl() }
