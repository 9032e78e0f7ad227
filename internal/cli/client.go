package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newClientCmd, newRenderCmd) }

// defaultRoot is the root folder of node's client when --root is not
// given: <data>/nodes/<node> under the user's state directory.
func defaultRoot(node string) string {
	return assemble.Data(defaultDataDir()).ClientRoot(node)
}

func newClientCmd() *cobra.Command {
	var bf busFlags
	var node, root, logLevel string
	var reload bool
	cmd := &cobra.Command{
		Use:   "client --node N [--root DIR]",
		Short: "Run a node's client: apply the node's plans (folders, ports, sweeps, applied, collect)",
		Long: `client runs the client of one node on its own bus connection ("client-<node>") until Ctrl-C or
SIGTERM; started before the seat, it waits for the plans and registry buckets the seat makes. It follows the
node's plans and applies each module's: folders at <root>/<module>/<dir>, a port number per port that stays
the same across restarts, files it did not write in a "sweep" folder moved to <root>.quarantine (never
deleted), and the records in ` + mesh.AppliedBucket + ` and ` + mesh.CollectBucket + `. When a module's plan
is gone its records go; its folders and data stay. A module's templates are rendered into its folders, and
rendered again when a credential in them is rotated; with --reload the client then runs the module's reload
command (with the client's own rights: whoever writes the module's manifest decides it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !mesh.ValidName(node) {
				return usageError{fmt.Errorf("client: --node %q is not a valid node name", node)}
			}
			log, err := logger(logLevel, os.Stderr)
			if err != nil {
				return err
			}
			if root == "" {
				root = defaultRoot(node)
			}
			// A client whose access to the mesh was removed (its node left:
			// its user revoked, its credentials moved away) stops and says
			// so, rather than retry for ever.
			ctx, stop := context.WithCancelCause(cmd.Context())
			defer stop(nil)
			a := bf.assembly(log)
			dial := a.Dial
			a.Dial = func(c assemble.Component) bus.Dial {
				d := dial(c)
				d.OnRemoved = func(err error) { stop(err) }
				return d
			}
			r, c, err := a.StartClient(ctx, client.Config{Node: node, Root: root, Reload: reload})
			if err != nil {
				if removed := context.Cause(ctx); errors.Is(removed, bus.ErrAccessRemoved) {
					return fmt.Errorf("client: %w", removed)
				}
				return fmt.Errorf("client: %w", bf.explain(err))
			}
			// With --creds the client is its node's user, which may not read
			// the placement: the check would only be refused.
			if _, js := r.Conn(); js != nil && bf.creds == "" {
				if why := notInMesh(cmd.Context(), js, node); why != "" {
					log.Warn("client: "+why+"; it waits for its plans", "node", node)
				}
			}
			log.Info("client: running", "node", node, "root", c.Root(), "quarantine", c.Quarantine())
			<-r.Done()
			if err := context.Cause(ctx); errors.Is(err, bus.ErrAccessRemoved) {
				log.Error("client: stopped: its access to the mesh was removed", "node", node, "err", err)
				return fmt.Errorf("client: %w", err)
			}
			log.Info("client: stopped", "node", node, "err", r.Err())
			return r.Err()
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "the node whose plans this client applies (required)")
	cmd.Flags().StringVar(&root, "root", "", "the node's root folder (default <state dir>/mesh-provisioner/nodes/<node>)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	cmd.Flags().BoolVar(&reload, "reload", false, "run the modules' reload commands after their templates are rendered anew (with this client's rights)")
	cmd.MarkFlagRequired("node")
	bf.add(cmd)
	bf.addReplicas(cmd)
	return cmd
}

func newRenderCmd() *cobra.Command {
	var bf busFlags
	var node, module string
	cmd := &cobra.Command{
		Use:   "render --node N --module M TEMPLATE",
		Short: "Render a module's configuration template with its placeholders resolved through the registry",
		Long: `render reads TEMPLATE ("-" for stdin) and prints it with every placeholder ${kind:name} resolved
through the registry (` + mesh.RegistryBucket + `): ${dir:state} and ${port:http} from what the node's client
applied, ${config:domain} from mesh-config, ${bound:database} from the provider's entry (its vault name;
${bound:database/host}, /port, /database and /role give a database's connection, ${bound:database:main/host}
for a local), ${secret:name} from
the vault, ${collected:name}, ${shell:zsh:normal} and ${environment} from the node's collections. "$$" is a
literal "$". When any placeholder cannot be resolved it prints nothing and lists every one with why.
It applies nothing: run it beside the node's client, with its credentials (--creds
DATA/auth/client-<node>.creds: the vault answers a node's values to that node's client, asked as
mesh-vault.secret.<module>.client-<node>).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !mesh.ValidName(node) || !mesh.ValidName(module) {
				return usageError{fmt.Errorf("render: --node %q and --module %q must be valid names", node, module)}
			}
			var text []byte
			var err error
			if args[0] == "-" {
				text, err = io.ReadAll(cmd.InOrStdin())
			} else {
				text, err = os.ReadFile(args[0])
			}
			if err != nil {
				return fmt.Errorf("render: %w", err)
			}
			nc, js, err := bf.connect("render-" + node)
			if err != nil {
				return fmt.Errorf("render: %w", err)
			}
			defer nc.Close()
			ask, err := bf.connectAsk("render-" + node)
			if err != nil {
				return fmt.Errorf("render: %w", err)
			}
			defer ask.Close()
			// A read-only client reads what the node's plans name, then
			// renders: tried again while the bus does not answer.
			var out string
			err = bf.retry(cmd.Context(), "render", func(ctx context.Context) error {
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				c, err := client.New(client.Config{Node: node, Root: ".", JS: js, NC: nc, Ask: ask, ReadOnly: true})
				if err != nil {
					return err
				}
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				ready := time.NewTimer(requestTimeout)
				defer ready.Stop()
				select {
				case <-c.Ready():
				case err := <-done:
					return err
				case <-ctx.Done():
					return ctx.Err()
				case <-ready.C:
					return fmt.Errorf("the node's plans not read within %v: %w", requestTimeout, context.DeadlineExceeded)
				}
				out, err = c.Render(ctx, module, string(text))
				return err
			})
			var re *client.RenderError
			if errors.As(err, &re) {
				for _, u := range re.Unresolved {
					fmt.Fprintf(cmd.ErrOrStderr(), "render: %s: %s\n", u.Placeholder, u.Why)
				}
				return fmt.Errorf("render %s on %s: %d placeholder(s) not resolved", module, node, len(re.Unresolved))
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), out)
			return err
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "the module's node (required)")
	cmd.Flags().StringVar(&module, "module", "", "the module whose configuration it is (required)")
	cmd.MarkFlagRequired("node")
	cmd.MarkFlagRequired("module")
	bf.add(cmd)
	bf.addTimeout(cmd)
	return cmd
}

// notInMesh says why node is not in the mesh (no placement key for it in
// mesh-controller_placement, naming the nodes that have one), or returns
// "" when it is, or when the placement cannot be read.
func notInMesh(ctx context.Context, js jetstream.JetStream, node string) string {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, mesh.PlacementBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Sprintf("node %s is not in the mesh: nothing is placed yet (%s does not exist; apply a mesh file)", node, mesh.PlacementBucket)
	}
	if err != nil {
		return ""
	}
	if _, err := kv.Get(ctx, node); err == nil || !errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return fmt.Sprintf("node %s is not in the mesh (%s has no key %s)", node, mesh.PlacementBucket, node)
	}
	var nodes []string
	for k := range lister.Keys() {
		nodes = append(nodes, k)
	}
	sort.Strings(nodes)
	return fmt.Sprintf("node %s is not in the mesh (%s has no key %s; its nodes: %s)", node, mesh.PlacementBucket, node, strings.Join(nodes, ", "))
}
