package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
)

func init() { commands = append(commands, newGenCmd) }

// newGenCmd returns "gen": write a synthetic mesh file for benchmarks.
func newGenCmd() *cobra.Command {
	var nodes, modules int
	var seed int64
	var out string
	cmd := &cobra.Command{
		Use:   "gen --nodes N --modules M [--seed S] [-o FILE]",
		Short: "Write a synthetic mesh file of N nodes with M app modules each",
		Long: `Gen writes a valid synthetic mesh file: a control node with mesh-vault, postgres, redis,
keycloak, route-proxy and node-tools, and N-1 worker nodes with node-tools and M app modules
each, drawn from a shared pool, with realistic requirements, wants and haves. The same
arguments write the same file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || modules < 0 {
				return usageError{errors.New("gen: --nodes must be at least 1 and --modules at least 0")}
			}
			text := gen.Generate(nodes, modules, seed)
			if out == "" || out == "-" {
				_, err := cmd.OutOrStdout().Write(text)
				return err
			}
			if err := os.WriteFile(out, text, 0o644); err != nil {
				return fmt.Errorf("gen: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: %d nodes, %d app modules per worker, seed %d\n", out, nodes, modules, seed)
			return nil
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 10, "how many nodes, the control node included")
	cmd.Flags().IntVar(&modules, "modules", 4, "how many app modules on each worker node")
	cmd.Flags().Int64Var(&seed, "seed", 1, "seed of every random choice")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the file to write (default: standard output)")
	return cmd
}
