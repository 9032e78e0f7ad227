package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newApplyCmd) }

// newApplyCmd returns "apply -f MESHFILE": validate a mesh file whole and
// write its keys to the bus (spec 9).
func newApplyCmd() *cobra.Command {
	var bf busFlags
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f MESHFILE",
		Short: "Write a mesh file's placement, wants, modules, manifests, builds and haves to the bus",
		Long: `Apply validates the whole mesh file first; a file with any error is refused whole, every
error printed with its line, and nothing is written. A valid file writes placement, wants,
modules, manifests, builds and haves, only where a key's bytes differ, and removes the
placement, wants and haves of nodes and modules the file no longer has (manifests, builds
and modules stay). Applying the same file again writes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError{errors.New("apply: -f MESHFILE is required")}
			}
			f, err := meshfile.ParseFile(file)
			if errs, ok := errors.AsType[*meshfile.Errors](err); ok {
				fmt.Fprintln(cmd.ErrOrStderr(), errs.Error())
				return fmt.Errorf("apply: %s refused with %s; nothing written", file, errs.Count())
			}
			if err != nil {
				return fmt.Errorf("apply: %w", err)
			}
			for _, w := range f.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), meshfile.Located(file, meshfile.Error{Line: w.Line, Msg: "warning: " + w.Msg}))
			}
			nc, js, err := bf.connect("apply")
			if err != nil {
				return fmt.Errorf("apply: %w", err)
			}
			defer nc.Close()
			st, err := meshfile.Apply(cmd.Context(), js, f, time.Now())
			for _, o := range st.Odd {
				fmt.Fprintf(cmd.ErrOrStderr(), "odd key %s in %s left alone: %s\n", o.Key, o.Bucket, o.Why)
			}
			if errs, ok := errors.AsType[*meshfile.Errors](err); ok {
				fmt.Fprintln(cmd.ErrOrStderr(), errs.Error())
				return fmt.Errorf("apply: %s refused with %s; nothing written", file, errs.Count())
			}
			if err != nil {
				return fmt.Errorf("apply: %w (so far %d written, %d removed)", err, st.Written, st.Removed)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "applied %s: %d written, %d unchanged, %d removed\n", file, st.Written, st.Unchanged, st.Removed)
			for _, b := range []string{mesh.PlacementBucket, mesh.WantsBucket, mesh.ModulesBucket, mesh.ManifestsBucket, mesh.BuildsBucket, mesh.HaveBucket} {
				if c := st.Buckets[b]; c.Written+c.Removed > 0 {
					fmt.Fprintf(out, "  %s: %d written, %d unchanged, %d removed\n", b, c.Written, c.Unchanged, c.Removed)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the mesh file (YAML) to apply")
	bf.add(cmd)
	return cmd
}
