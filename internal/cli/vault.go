package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newVaultCmd) }

// newVaultCmd returns "vault": with --node it runs mesh-vault on its own;
// its subcommands operate the running vault.
func newVaultCmd() *cobra.Command {
	var bf busFlags
	var node, data, logLevel, keyFile string
	cmd := &cobra.Command{
		Use:   "vault --node N [--data DIR] [--key-file FILE]",
		Short: "Run the mesh's vault (mesh-vault) on a node, or operate it (vault rotate)",
		Long: `vault --node N runs mesh-vault for node N on its own bus connection until Ctrl-C or SIGTERM: it
gives every credential provision whose provider is mesh-vault on N a strong random value, sealed in its
store (DATA/vault/<node>, key file mode 0600; the same store up uses with the same --data), writes its
entries to ` + mesh.BoundBucket(mesh.VaultModule) + ` and answers mesh-vault.secret.<module>.<asker>,
mesh-vault.consumers.<provider>.<asker> and mesh-vault.rotate (the asker, last, is the asking user: the
module itself, or the client of one of its nodes). Started before the seat, it waits for the plans and
provisions buckets the seat makes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				return usageError{fmt.Errorf("vault: give --node N to run the vault, or a subcommand (vault rotate KEY)")}
			}
			if !mesh.ValidName(node) {
				return usageError{fmt.Errorf("vault: --node %q is not a valid node name", node)}
			}
			log, err := logger(logLevel, os.Stderr)
			if err != nil {
				return err
			}
			dir := assemble.Data(data).Vault(node)
			r, err := bf.assembly(log).StartVault(cmd.Context(), vault.Config{Dir: dir, Node: node, KeyFile: keyFile})
			if err != nil {
				return bf.explain(err)
			}
			log.Info("vault: running", "node", node, "store", dir)
			<-r.Done()
			log.Info("vault: stopped", "node", node, "err", r.Err())
			return r.Err()
		},
	}
	bf.add(cmd)
	bf.addReplicas(cmd)
	cmd.Flags().StringVar(&node, "node", "", "the node mesh-vault is placed on: run the vault there")
	cmd.Flags().StringVar(&data, "data", defaultDataDir(), "directory of the mesh's state; the vault's store is DATA/vault/<node>")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "the store's key (32 bytes, mode 0600, made on first start) kept apart from DATA, so that a copy of DATA opens no value; default DATA/vault/<node>/vault.key")
	cmd.AddCommand(newVaultRotateCmd())
	return cmd
}

func newVaultRotateCmd() *cobra.Command {
	var bf busFlags
	var now bool
	cmd := &cobra.Command{
		Use:   "rotate KEY",
		Short: "Give a credential a new value at the next generation",
		Long: "rotate asks mesh-vault (verb mesh-vault.rotate) for a new value of the credential at KEY\n" +
			"(<node>.<consumer>.credential.<provider>_<provision>[_<local>]) at generation+1. When the\n" +
			"consumer's module renders the credential into its templates, its node moves first (its\n" +
			"client renders them again and runs its reload once the provider holds it): the old value\n" +
			"stays in force for the provider until that node has applied the new one, or until the\n" +
			"vault's grace ends (1 minute). Then, or at once for any other consumer, the vault's entry\n" +
			"names the new generation: the seat carries it into the provision's reference and the\n" +
			"provider sets it. With --now the new value is in force at once (a credential that\n" +
			"leaked): the provider refuses the old one as soon as it sets the new.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("vault rotate takes one KEY, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := bf.connectAsk("vault-rotate")
			if err != nil {
				return err
			}
			defer nc.Close()
			ask := kit.AskRotate
			if now {
				ask = kit.AskRotateNow
			}
			// Asked again only while no vault takes it (one starting): a
			// rotation whose request timed out may have been made.
			var a kit.RotateAnswer
			err = bf.retryUntaken(cmd.Context(), "vault rotate "+args[0], func(ctx context.Context) (err error) {
				ctx, cancel := context.WithTimeout(ctx, requestTimeout)
				defer cancel()
				a, err = ask(ctx, nc, args[0])
				return err
			})
			if err != nil {
				return fmt.Errorf("vault rotate %s: %w", args[0], err)
			}
			when := "in force now"
			if a.InForce != 0 && a.InForce != a.Generation {
				when = fmt.Sprintf("generation %d stays in force until the consumer's node applies it, or until the vault's grace ends", a.InForce)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated %s: vault name %s, generation %d, %s\n", a.Key, a.VaultName, a.Generation, when)
			return nil
		},
	}
	bf.add(cmd)
	bf.addTimeout(cmd)
	cmd.Flags().BoolVar(&now, "now", false, "put the new value in force at once, with no grace (the provider refuses the old one as soon as it sets the new)")
	return cmd
}
