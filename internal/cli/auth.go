package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

func init() { commands = append(commands, newAuthCmd) }

// newAuthCmd returns "auth", the mesh's NATS users.
func newAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Make the mesh's NATS users and their permissions (spec section 10)",
	}
	cmd.AddCommand(newAuthGenCmd())
	return cmd
}

func newAuthGenCmd() *cobra.Command {
	var file, dir, store string
	var operators []string
	cmd := &cobra.Command{
		Use:   "gen -f MESHFILE -o DIR",
		Short: "Write a nats-server configuration and one credentials file per party of the mesh",
		Long: `gen writes into DIR the nats-server configuration of the mesh (` + auth.ConfigFile + `: an operator, the
account "` + auth.AccountName + `" with JetStream, resolver MEMORY with the accounts preloaded) and one credentials
file per party (<user>.creds, mode 0600), each user's JWT carrying its permissions of spec section 10:

  mesh-provisioner   the seat: alone writes registry, plans, provisions, refused and its lease
  mesh-asks          the ask router: its records; answers asks.*, mesh-asks.answer.*, withdraw, list
  mesh-vault         the vault: its entries; answers mesh-vault.secret.*, .consumers.*, .rotate
  <module>           each module: asks mesh-vault.secret.<module>; a provider (state names bound) also
                     writes <module>_bound, reads plans and provisions, asks mesh-vault.consumers.<module>
  client-<node>      each node's client: writes <node>.> of applied and collect, reads its node's keys
  <operator>         each operator (--operator, default "operator"): applies the mesh file, reads
                     everything, answers asks as mesh-asks.answer.<operator>, rotates credentials

Seeds of the operator and accounts are kept in DIR/keys (mode 0600). Running gen again keeps every key it
finds and signs each user's permissions anew from the mesh file; a party no longer in the file has its
credentials moved to DIR/revoked and is revoked in the account. Restart (or reload) nats-server after.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" || dir == "" {
				return usageError{fmt.Errorf("auth gen needs -f MESHFILE and -o DIR")}
			}
			f, err := meshfile.ParseFile(file)
			if err != nil {
				return err
			}
			parties, err := access.Parties(auth.MeshOf(f, operators))
			if err != nil {
				return err
			}
			res, err := auth.Gen(dir, parties, auth.Options{StoreDir: store, Source: file})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s and %d credentials files in %s\n", res.Config, len(res.Creds), dir)
			fmt.Fprintf(out, "keys made: %s\n", list(res.Made))
			fmt.Fprintf(out, "keys kept: %s\n", list(res.Kept))
			if len(res.Revoked) > 0 {
				fmt.Fprintf(out, "revoked (no longer in %s): %s\n", file, list(res.Revoked))
			}
			fmt.Fprintf(out, "run: nats-server -c %s\n", res.Config)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&file, "file", "f", "", "the mesh file")
	fl.StringVarP(&dir, "output", "o", "", "the directory to write into (created, mode 0700)")
	fl.StringVar(&store, "store", "", "JetStream store directory written into the configuration (default DIR/jetstream)")
	fl.StringArrayVar(&operators, "operator", nil, "an operator's user name (repeat for several; default operator)")
	return cmd
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
