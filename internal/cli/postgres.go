package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newPostgresCmd) }

// newPostgresCmd returns "postgres": the PostgreSQL provider on its own.
func newPostgresCmd() *cobra.Command {
	var bf busFlags
	var dsn, node, owner, meshName, logLevel, advertise string
	var check time.Duration
	cmd := &cobra.Command{
		Use:   "postgres --dsn DSN --node N --mesh-name M",
		Short: "Run the postgres provider against a NATS server and a PostgreSQL server",
		Long: `postgres runs the PostgreSQL provider (module postgres) of node N on its own bus connection until
Ctrl-C or SIGTERM. Each database provision whose provider is postgres on N gets a role of its own (its
password is the consumer's credential, asked from mesh-vault) and a database owned by it, both named
after mesh M and the key (M_<node>_<consumer>[_<local>]) and marked as M's: a role or database of that name
that M did not make is refused with why, never taken, so that meshes sharing a server never meet. Entries go to
` + mesh.BoundBucket(pgprovider.Module) + `. On the operator's yes the role logs in no more at once, what it owns in every
database is handed to --owner, and it goes; its database and data stay (a removal PostgreSQL refuses is
said in the key's why and tried again). Consumers are handed --advertise HOST:PORT as the server's address
(default: the DSN's; a loopback address is refused to consumers on other nodes). Every --check-every the roles
are checked against the credentials handed out: a password changed by hand is said in its key and set back.
DSN connects as a role that may create roles and databases. Started before the seat, it waits for the
provisions bucket the seat makes; an unreachable PostgreSQL server makes its keys wait.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !mesh.ValidName(node) {
				return usageError{fmt.Errorf("postgres: --node %q is not a valid node name", node)}
			}
			if dsn == "" {
				return usageError{fmt.Errorf("postgres: --dsn is required")}
			}
			if !mesh.ValidName(meshName) {
				return usageError{fmt.Errorf("postgres: --mesh-name %q is not a valid name: give the mesh's name (its mesh file's mesh:)", meshName)}
			}
			log, err := logger(logLevel, os.Stderr)
			if err != nil {
				return err
			}
			if check == 0 {
				check = -1 // the flag's 0 is never; the config's is the default
			}
			r, err := bf.assembly(log).StartPostgres(cmd.Context(), pgprovider.Config{DSN: dsn, Node: node, Owner: owner, Mesh: meshName, Check: check, Advertise: advertise})
			if err != nil {
				return bf.explain(err)
			}
			log.Info("postgres: provider running", "node", node, "nats", bf.url)
			<-r.Done()
			log.Info("postgres: provider stopped", "node", node, "err", r.Err())
			return r.Err()
		},
	}
	bf.add(cmd)
	bf.addReplicas(cmd)
	cmd.Flags().StringVar(&dsn, "dsn", "", "PostgreSQL DSN (keyword/value or URL) of a role that may create roles and databases (required)")
	cmd.Flags().StringVar(&node, "node", "", "the node postgres is placed on (required)")
	cmd.Flags().StringVar(&meshName, "mesh-name", "", "the mesh's name, as its mesh file's mesh: says (required): roles and databases are named after it")
	cmd.Flags().StringVar(&owner, "owner", "", "the role that receives what a retired role owned (default: the DSN's user)")
	cmd.Flags().StringVar(&advertise, "advertise", "", "the address handed to consumers, host:port, that their nodes reach the server at (default: the DSN's host and port; a loopback address is refused to consumers on other nodes: their keys fail, saying so)")
	cmd.Flags().DurationVar(&check, "check-every", time.Minute, "how often each provided role is checked against the credential handed out (a password changed by hand is said in its key and set again); 0 checks never")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	return cmd
}
