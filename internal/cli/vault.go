package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/kit"
)

func init() { commands = append(commands, newVaultCmd) }

// newVaultCmd returns "vault", the operator's commands for mesh-vault.
func newVaultCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vault",
		Short: "Operate the mesh's vault (mesh-vault)",
	}
	cmd.AddCommand(newVaultRotateCmd())
	return cmd
}

func newVaultRotateCmd() *cobra.Command {
	var bf busFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "rotate KEY",
		Short: "Give a credential a new value at the next generation",
		Long: "rotate asks mesh-vault (verb mesh-vault.rotate) for a new value of the credential at KEY\n" +
			"(<node>.<consumer>.credential.<provider>_<provision>[_<local>]). The vault writes its entry\n" +
			"again with generation+1; the seat carries it into the provision's reference and the\n" +
			"provider sets the new value.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("vault rotate takes one KEY, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, _, err := bf.connect("vault-rotate")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			a, err := kit.AskRotate(ctx, nc, args[0])
			if err != nil {
				return fmt.Errorf("vault rotate %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated %s: vault name %s, generation %d\n", a.Key, a.VaultName, a.Generation)
			return nil
		},
	}
	bf.add(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the vault's answer")
	return cmd
}
