// Package cli holds the subcommands of the mesh-provisioner binary, one file
// each. The binary's main only calls [Run].
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// Run runs the command line args (without the program name) and returns the
// process's exit code: 0 on success, 1 on an error (printed to stderr), 2 on
// a usage error.
func Run(args []string) int {
	// One log format everywhere: what a package logs through
	// slog.Default() is written as every component's logger writes.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := Root()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	fmt.Fprintln(os.Stderr, "mesh-provisioner:", err)
	if isUsage(err) && !slices.Contains(args, "--detailed-exitcode") {
		return 2
	}
	// With --detailed-exitcode, 2 means changes (Terraform's codes): a
	// usage error is 1 as any error.
	return 1
}

// usageError is an error in how a command was called (a flag, an
// argument, a missing required flag): the exit code is 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// ranError is an error returned by a subcommand's RunE: whatever cobra
// returns without this wrapper failed before the command ran (an unknown
// command, a bad argument count, a missing required flag), which is a
// usage error.
type ranError struct{ error }

func (r ranError) Unwrap() error { return r.error }

// isUsage reports whether err is a usage error (exit code 2).
func isUsage(err error) bool {
	var u usageError
	if errors.As(err, &u) {
		return true
	}
	var r ranError
	return !errors.As(err, &r)
}

// markRan wraps the RunE of cmd and of its subcommands, so that an error a
// command returns while it runs is told from one cobra returns before. A
// command whose context the server's refusal ended ([refusedError]) fails
// with the refusal, whatever its request then returned, even when it went
// on.
func markRan(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error {
			err := run(c, args)
			var refused *refusedError
			if errors.As(context.Cause(c.Context()), &refused) {
				// Even when the command went on: what it printed may
				// lack what it was refused.
				err = refused
			}
			if err != nil {
				return ranError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		markRan(sub)
	}
}

// refusedError is a permission the NATS server refused the command's
// connection (a publish or subscribe its user may not make), said as soon
// as the server reports it.
type refusedError struct {
	err   error  // wraps nats.ErrPermissionViolation, naming the subject
	creds string // the credentials file used, "" for none
}

func (e *refusedError) Error() string {
	user := "a connection without credentials"
	if e.creds != "" {
		user = "the user of " + e.creds
		if u := bus.CredsUser(e.creds); u != "" {
			user = "the user " + u + " (" + e.creds + ")"
		}
	}
	return fmt.Sprintf("the NATS server refused %s: %v: this user may not do that; run the command as a party that may (--creds FILE, or --context NAME; an operator's are DATA/auth/operator.creds; who may do what: docs/trust.md)", user, e.err)
}

func (e *refusedError) Unwrap() error { return e.err }

// busFlags are the flags every subcommand that talks to a running mesh
// takes.
type busFlags struct {
	url   string
	creds string
	// ca is --tls-ca: the CA file of the servers' certificates, for a
	// cluster with TLS ("" for none).
	ca string
	// domain is --domain: the JetStream domain reached through a leafnode
	// server ("" on the mesh's servers).
	domain string
	// context is --context: the nats CLI's context to connect with (see
	// resolve); from says where url came from when not --nats ("context
	// NAME", "$NATS_URL"), "" for --nats or the default.
	context, from string
	// refuse ends the command's context with a *refusedError (see
	// connect); set in the command's PreRunE. While aside is set (see
	// tolerate), a refusal ends aside's context instead.
	refuse context.CancelCauseFunc
	mu     sync.Mutex
	aside  context.CancelCauseFunc
	log    *slog.Logger // nil means slog.Default()
	// replicas is the replica count of the buckets the command makes
	// (--replicas, see addReplicas); 0 for a command without the flag.
	replicas replicas
	// wait is --timeout, the bound of an operator's command's retries
	// (see retry); 0 means busWait.
	wait time.Duration
	// errOut is the command's stderr, set in its PreRunE: where its
	// retries are said (see retry).
	errOut io.Writer
	// ownNode, set by get before it connects, is the node its reads are
	// narrowed to (--node): a node's client may get its own node's keys
	// (see checkOperator).
	ownNode string
}

// replicas is the --replicas flag: a bucket's replica count, refused
// outside 1 to bus.MaxReplicas when parsed.
type replicas int

func (r *replicas) String() string { return strconv.Itoa(int(*r)) }
func (r *replicas) Type() string   { return "int" }
func (r *replicas) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || bus.CheckReplicas(n) != nil {
		return fmt.Errorf("a bucket has 1 to %d replicas (3 on a three-server NATS cluster, 1 on one server)", bus.MaxReplicas)
	}
	*r = replicas(n)
	return nil
}

// addReplicas adds --replicas to a command that makes buckets on a real
// NATS server or cluster (apply, serve, router, vault, postgres, client).
func (f *busFlags) addReplicas(cmd *cobra.Command) {
	f.replicas = 1
	cmd.Flags().Var(&f.replicas, "replicas", "replicas of each bucket this command makes when it is missing: 3 on a three-server NATS cluster, 1 on one server (1 to 5; a bucket that exists is used as it is)")
}

func (f *busFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "nats", "nats://127.0.0.1:4222", "URL of the mesh's NATS server (else the context's url, else $NATS_URL)")
	cmd.Flags().StringVar(&f.domain, "domain", "", "the JetStream domain of the mesh's servers, for a connection to an edge node's leafnode server (auth gen --domain); empty on the servers themselves")
	cmd.Flags().StringVar(&f.ca, "tls-ca", "", "the CA file (PEM) that signs the servers' certificates: the connection requires TLS and checks the server's certificate against it (a cluster whose files auth gen wrote with --tls-cert, --tls-key and --tls-ca)")
	cmd.Flags().StringVar(&f.creds, "creds", "", "NATS credentials file (else the context's creds, else $NATS_CREDS; an operator's command without any uses the operator's that up writes, DATA/auth/operator.creds, when there is one)")
	cmd.Flags().StringVar(&f.context, "context", "", "the nats CLI's context to connect with (~/.config/nats/context/NAME.json: its url and creds; default $NATS_CONTEXT)")
	pre := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if err := f.resolve(c.Flags()); err != nil {
			return err
		}
		ctx, cancel := context.WithCancelCause(c.Context())
		c.SetContext(ctx)
		f.refuse = cancel
		f.errOut = c.ErrOrStderr()
		if pre != nil {
			return pre(c, args)
		}
		return nil
	}
}

// connect dials the bus as component name. A server that cannot be
// reached is said with a hint (is up running? --nats), and so is a server
// without JetStream.
func (f *busFlags) connect(name string) (*nats.Conn, jetstream.JetStream, error) {
	log := f.log
	if log == nil {
		log = slog.Default()
	}
	if err := f.checkOperator(name); err != nil {
		return nil, nil, err
	}
	d := bus.Dial{URL: f.url, Creds: f.credsOrDefault(), Name: name, Log: log, Replicas: int(f.replicas), Domain: f.domain, CA: f.ca}
	d.OnRefused = f.refusedBy(d.Creds)
	var nc *nats.Conn
	var js jetstream.JetStream
	err := f.dialRetry(func() (err error) {
		nc, js, err = bus.Connect(d)
		return err
	})
	if err != nil {
		return nil, nil, f.explain(err)
	}
	if !bus.HasJetStream(nc, d) {
		nc.Close()
		return nil, nil, f.explain(fmt.Errorf("%w at %s", assemble.ErrNoJetStream, f.url))
	}
	return nc, js, nil
}

// connectAsk dials the bus as component name's user in the requests
// account (the credentials "auth gen" writes beside --creds, in
// mesh-requests/), on which an operator's command asks verbs: their
// answers come back there, never to the buckets' account. Errors are as
// for connect.
func (f *busFlags) connectAsk(name string) (*nats.Conn, error) {
	log := f.log
	if log == nil {
		log = slog.Default()
	}
	if err := f.checkOperator(name); err != nil {
		return nil, err
	}
	creds := f.credsOrDefault()
	var nc *nats.Conn
	err := f.dialRetry(func() (err error) {
		nc, err = bus.ConnectIn(bus.Dial{URL: f.url, Creds: creds, Name: name, Log: log, OnRefused: f.refusedBy(creds), CA: f.ca}, access.Requests)
		return err
	})
	if err != nil {
		return nil, f.explain(err)
	}
	return nc, nil
}

// dialRetry calls dial until it connects, trying again with backoff while
// the server is too slow to finish the handshake (a loaded machine: a
// handshake past the library's 2 s, the server's auth timeout, the socket
// it then ended; [bus.Transient]) for up to --timeout, each change of why
// said once on stderr. No server at the address (nats.ErrNoServers) and a
// refusal are returned at once: the command says them with a hint.
func (f *busFlags) dialRetry(dial func() error) error {
	wait := f.wait
	if wait <= 0 {
		wait = busWait
	}
	err := bus.Retry(context.Background(), wait, f.sayer(), "connect", func() error {
		err := dial()
		if errors.Is(err, nats.ErrNoServers) {
			return final{err}
		}
		return err
	})
	if fe, ok := errors.AsType[final](err); ok {
		return fe.err
	}
	return err
}

// refusedBy returns the OnRefused of a connection made with creds: it
// ends the command's context (or tolerate's) with a *refusedError; nil
// before the command's PreRunE set f.refuse.
func (f *busFlags) refusedBy(creds string) func(error) {
	if f.refuse == nil {
		return nil
	}
	return func(err error) {
		f.mu.Lock()
		end := f.refuse
		if f.aside != nil {
			end = f.aside
		}
		f.mu.Unlock()
		end(&refusedError{err: err, creds: creds})
	}
}

// tolerate runs do with a context of ctx that a refusal of the server
// ends (at once, as it ends a command's) without failing the command: for
// what a command adds when its user may (the seat's line of get and why).
// It returns the refusal, or nil.
func (f *busFlags) tolerate(ctx context.Context, do func(ctx context.Context)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f.mu.Lock()
	f.aside = cancel
	f.mu.Unlock()
	do(ctx)
	f.mu.Lock()
	f.aside = nil
	f.mu.Unlock()
	var refused *refusedError
	if errors.As(context.Cause(ctx), &refused) {
		return refused
	}
	return nil
}

// checkOperator returns an error, before the command named name connects,
// when its credentials are not an operator's (access.IsOperator: they are
// a node's client's, a module's, the seat's, the router's or the vault's):
// the command is an operator's, and would be refused some of what it reads
// or asks. The error names whose they are. Two commands are a node's
// client's too: its render ("render-<node>") and a get narrowed to its own
// node (--node, f.ownNode), which read only what the client may.
// Credentials that hold no user JWT pass: the server refuses them and
// explain says so.
func (f *busFlags) checkOperator(name string) error {
	creds := f.credsOrDefault()
	user := bus.CredsUser(creds)
	if user == "" || strings.HasPrefix(name, "render-") {
		return nil
	}
	publish := bus.CredsPublish(creds)
	if access.IsOperator(user, publish) {
		return nil
	}
	command := strings.NewReplacer("cli-", "", "operator-", "", "-", " ").Replace(name)
	node, isClient := access.ClientNode(user)
	if isClient && name == "get" && f.ownNode == node {
		return nil
	}
	hint := ""
	if isClient && name == "get" {
		hint = fmt.Sprintf(" (a node's client gets its own node's keys only: get ... --node %s)", node)
	}
	return fmt.Errorf("the credentials %s are the user %q's (%s), not an operator's: %s is an operator's command%s; pass an operator's --creds (up writes DATA/auth/operator.creds, auth gen DIR/<operator>.creds)",
		creds, user, access.Whose(user, publish), command, hint)
}

// explain adds a hint to an error of connecting: a server that cannot be
// reached (is up running? --nats), a server without JetStream, a server
// that refused the connection's credentials or their lack (--creds).
func (f *busFlags) explain(err error) error {
	switch {
	case errors.Is(err, nats.ErrAuthorization) && f.credsOrDefault() == "":
		return fmt.Errorf("the NATS server at %s refused a connection without credentials: pass --creds FILE (up writes the operator's in DATA/auth/operator.creds): %w", f.url, err)
	case errors.Is(err, nats.ErrAuthorization) && credsExpired(f.credsOrDefault(), time.Now()):
		creds := f.credsOrDefault()
		return fmt.Errorf("the credentials in %s expired at %s: renew them with \"mesh-provisioner auth renew -o DIR\" (DIR: where auth gen wrote them; up renews its own as it starts) "+
			"and hand the renewed file over: %w", creds, credsExpiry(creds).UTC().Format(time.RFC3339), err)
	case errors.Is(err, nats.ErrAuthorization):
		return fmt.Errorf("the NATS server at %s refused the credentials in %s: are they this mesh's (up writes them in DATA/auth, auth gen in its -o)? %w", f.url, f.credsOrDefault(), err)
	case errors.Is(err, nats.ErrNoServers) && f.from != "":
		return fmt.Errorf("no NATS server answers at %s (from %s): is it running? pass --nats URL (%w)", f.url, f.from, err)
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("no NATS server answers at %s: is `up` running? pass --nats URL (%w)", f.url, err)
	case errors.Is(err, assemble.ErrNoJetStream):
		return fmt.Errorf("the NATS server at %s has no JetStream, which holds the mesh's state: run it with JetStream (nats-server -js), or use `up`", f.url)
	}
	return err
}

// assembly returns an assembly whose components all dial the flags' URL
// with the flags' credentials: a standalone subcommand runs one component.
func (f *busFlags) assembly(log *slog.Logger) *assemble.Assembly {
	f.log = log
	dial := assemble.Shared(f.url, f.creds, log)
	if f.domain != "" || f.ca != "" {
		shared := dial
		dial = func(c assemble.Component) bus.Dial {
			d := shared(c)
			d.Domain, d.CA = f.domain, f.ca
			return d
		}
	}
	return &assemble.Assembly{Dial: dial, Log: log, Replicas: int(f.replicas)}
}

// Root returns the root command with every subcommand.
func Root() *cobra.Command {
	root := &cobra.Command{
		Use:           "mesh-provisioner",
		Short:         "The provisioning control plane of a mesh of machines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	addProfileFlags(root)
	for _, add := range commands {
		root.AddCommand(add())
	}
	root.Version = version()
	root.SetVersionTemplate("mesh-provisioner {{.Version}}\n")
	addCompletion(root)
	markRan(root)
	return root
}

// commands lists the constructors of the subcommands; each subcommand's
// file adds its own in an init function, so that files do not collide.
var commands []func() *cobra.Command
