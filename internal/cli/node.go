package cli

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

func init() { commands = append(commands, newNodeCmd) }

// newNodeCmd returns "node", a standalone deployment's members.
func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Add a node to a running standalone deployment, or remove one, with no server restart",
	}
	cmd.AddCommand(newNodeJoinCmd(), newNodeLeaveCmd())
	return cmd
}

// nodeFlags are the flags of node join and leave.
type nodeFlags struct {
	file, dir string
	operators []string
	push      pushFlags
}

func (f *nodeFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "the mesh file, as applied")
	fl.StringVarP(&f.dir, "output", "o", "", "the directory auth gen wrote")
	fl.StringArrayVar(&f.operators, "operator", nil, "an operator's user name (repeat for several; default operator), as given to auth gen")
	f.push.add(cmd, "nats")
}

// gen runs auth gen over the mesh file and pushes the accounts: every
// party's credentials as the file says, each kept when it holds that.
func (f *nodeFlags) gen(cmd *cobra.Command) (*auth.Result, *meshfile.File, error) {
	if f.file == "" || f.dir == "" || f.push.url == "" {
		return nil, nil, usageError{fmt.Errorf("%s needs -f MESHFILE, -o DIR and --nats URL", cmd.CommandPath())}
	}
	mf, err := meshfile.ParseFile(f.file)
	if err != nil {
		return nil, nil, err
	}
	parties, err := access.Parties(auth.MeshOf(mf, f.operators))
	if err != nil {
		return nil, nil, err
	}
	res, err := auth.Gen(f.dir, parties, auth.Options{Source: f.file, MaxStore: access.StoreReserved(assemble.Providers(mf))})
	if err != nil {
		return nil, nil, err
	}
	if err := f.push.push(cmd, res.Authority, res.Accounts); err != nil {
		return nil, nil, err
	}
	return res, mf, nil
}

func newNodeJoinCmd() *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{
		Use:   "join NODE -f MESHFILE -o DIR --nats URL",
		Short: "Issue the users of a node the mesh file adds (and of what it places there), push them, and say the file to hand over",
		Long: `join issues the bus users of the mesh file as auth gen does (a new node's client, and a module's
user for each module new in the file), keeping every other party's file as it is, pushes the accounts to
the running servers (no restart, no configuration to edit), and prints the credentials files to hand to
NODE (its client's, and its user of the requests account beside it), with the command its client runs there. Add the node to the mesh file and apply it first (apply -f).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			node := args[0]
			res, mf, err := f.gen(cmd)
			if err != nil {
				return err
			}
			if !slices.Contains(mf.Nodes, node) {
				return fmt.Errorf("%s names no node %s: add it to the file and apply it, then join it", f.file, node)
			}
			creds := res.Creds[access.ClientUser(node)]
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "signed anew: %s\n", list(someOfList(res.Signed, 8)))
			// The client's user in the requests account too, beside its
			// file as it dials it (bus.AccountCreds): its watches and
			// its vault asks go there.
			fmt.Fprintf(out, "hand %s and %s (in the same layout) to %s; there, run:\n",
				creds, bus.AccountCreds(creds, access.Requests), node)
			tls := ""
			if f.push.ca != "" {
				tls = " --tls-ca " + f.push.ca // the node needs the CA file too
			}
			// The file's absolute path, as the node may keep it in the same
			// place; /srv/mesh is only a root for the example (DIR is the
			// auth directory everywhere else).
			abs, err := filepath.Abs(creds)
			if err != nil {
				abs = creds
			}
			fmt.Fprintf(out, "  mesh-provisioner client --node %s --nats %s%s --creds %s --root /srv/mesh\n", node, f.push.url, tls, abs)
			for _, mod := range mf.Placement[node] {
				if p, ok := res.Creds[mod]; ok && slices.Contains(res.Signed, mod) {
					fmt.Fprintf(out, "the module %s placed on %s runs as %s\n", mod, node, p)
				}
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newNodeLeaveCmd() *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{
		Use:   "leave NODE -f MESHFILE -o DIR --nats URL",
		Short: "Revoke the users of a node the mesh file no longer has, at once on every server",
		Long: `leave revokes, as auth gen does, the users of the parties the mesh file no longer has (NODE's client,
and a module's user for each module gone from the file), and narrows every party whose permissions
change, then pushes the accounts: the servers close their connections and refuse their old credentials
at once. Remove the node from the mesh file and apply it first.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			node := args[0]
			res, mf, err := f.gen(cmd)
			if err != nil {
				return err
			}
			if slices.Contains(mf.Nodes, node) {
				return fmt.Errorf("%s still names the node %s: remove it from the file and apply it, then run leave", f.file, node)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "revoked: %s\n", list(res.Revoked))
			if len(res.Narrowed) > 0 {
				fmt.Fprintf(out, "older credentials revoked (permissions changed): %s\n", list(res.Narrowed))
				// Their parties run on with the files of this directory only: the
				// renewed ones are theirs to be handed (a party elsewhere still
				// holds the revoked one).
				for _, u := range res.Narrowed {
					fmt.Fprintf(out, "  hand %s to %s (its older file is refused now)\n", res.Creds[u], u)
				}
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}
