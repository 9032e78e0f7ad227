package cli

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newApplyCmd) }

// newApplyCmd returns "apply -f MESHFILE": validate a mesh file whole and
// write its keys to the bus (spec 9).
// bucketWait is how long apply waits for the seat to make a bucket.
const bucketWait = time.Minute

func newApplyCmd() *cobra.Command {
	var bf busFlags
	var file string
	var yes, dryRun, detailed bool
	var output string
	cmd := &cobra.Command{
		Use:   "apply -f MESHFILE",
		Short: "Write a mesh file's placement, wants, modules, manifests, builds and haves to the bus",
		Long: `Apply validates the whole mesh file first; a file with any error is refused whole, every
error printed with its line, and nothing is written. A valid file writes placement, wants,
modules, manifests, builds and haves, only where a key's bytes differ, and removes the
placement, wants and haves of nodes and modules the file no longer has (manifests, builds
and modules stay). Applying the same file again writes nothing.

--dry-run writes nothing: it reads the live mesh once, takes the file's changes into a copy of it, and
composes every node they touch with the seat's own code, as the seat would, until nothing is left to do.
It prints per node the plans, provisions and refusals that would be written, removed or turn retiring,
and the asks that would be raised (-o json too), each marked + (added), ~ (changed) or - (removed),
coloured on a terminal ($NO_COLOR leaves it plain). What providers answer afterwards is not foreseen.
With --detailed-exitcode it exits 0 when nothing would change, 2 when something would, 1 on an error.

A file that would no longer place most of the mesh (more than half of the modules placed now)
asks first, saying how many keys it removes and which modules it unplaces: type "yes" to go on.
--yes skips the question; with no terminal on stdin such a file is refused unless --yes.`,
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
			if detailed && !dryRun {
				return usageError{errors.New("apply: --detailed-exitcode goes with --dry-run")}
			}
			if output != "table" && output != "json" {
				return usageError{fmt.Errorf("apply: -o %q; want table or json", output)}
			}
			nc, js, err := bf.connect("apply")
			if err != nil {
				return fmt.Errorf("apply: %w", err)
			}
			defer nc.Close()
			if dryRun {
				return runDry(cmd, js, f, output, detailed)
			}
			// A cluster just formed, or electing a leader, does not
			// answer for a while: each read and the apply are tried again
			// (the apply writes only what still differs), as components
			// do.
			say := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			// Under the mesh's users the seat alone makes buckets: an
			// operator's apply waits for it to have made them.
			if bf.credsOrDefault() != "" {
				for _, b := range meshfile.Buckets {
					if _, err := bus.AwaitBucket(cmd.Context(), js, b, bucketWait); err != nil {
						return fmt.Errorf("apply %s: %w", file, err)
					}
				}
			}
			if !yes {
				var current map[string]map[string][]byte
				err := bus.Retry(cmd.Context(), applyRetry, say, "read the mesh", func() error {
					var err error
					current, err = meshfile.Current(cmd.Context(), js)
					return err
				})
				if err != nil {
					return fmt.Errorf("apply: %w", err)
				}
				loss := f.Loss(current, f.Diff(current, time.Now()))
				if loss.Most() {
					if err := confirm(cmd, fmt.Sprintf("apply %s %s", file, loss)); err != nil {
						return fmt.Errorf("apply: %s %s: %w", file, loss, err)
					}
				}
			}
			var st meshfile.Stats
			err = bus.Retry(cmd.Context(), applyRetry, say, "apply "+file, func() error {
				var err error
				st, err = meshfile.Apply(cmd.Context(), js, f, time.Now())
				return err
			})
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
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "write nothing: compose the file against a copy of the live mesh as the seat would, and print what it would write per node")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "with --dry-run: table or json")
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "with --dry-run: exit 0 when the seat would change nothing, 2 when it would change something, 1 on an error (as terraform plan -detailed-exitcode)")
	cmd.Flags().BoolVar(&yes, "yes", false, "apply a file that no longer places most of the mesh without asking")
	bf.add(cmd)
	bf.addReplicas(cmd)
	return cmd
}

// applyRetry is how long apply tries again while the bus's errors are
// transient ([bus.Transient]).
const applyRetry = 30 * time.Second

// errNotConfirmed is returned by confirm when the operator did not type
// yes, or could not be asked.
var errNotConfirmed = errors.New("not confirmed; nothing written")

// confirm asks the operator on the command's stdin whether to go on with
// what: only "yes" goes on. With no terminal on stdin nobody can answer:
// it refuses, saying to give --yes.
func confirm(cmd *cobra.Command, what string) error {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); !ok || !isTerminal(f) {
		return fmt.Errorf("%w (stdin is not a terminal: give --yes to apply it)", errNotConfirmed)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s.\nType yes to apply it: ", what)
	line, _ := bufio.NewReader(in).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return errNotConfirmed
	}
	return nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
