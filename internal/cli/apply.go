package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	var yes, dryRun, detailed, phases bool
	var output string
	cmd := &cobra.Command{
		Use:   "apply -f MESHFILE",
		Short: "Write a mesh file's placement, wants, modules, manifests, builds and haves to the bus",
		Long: `Apply validates the whole mesh file first; a file with any error is refused whole, every
error printed with its line, and nothing is written. A valid file writes placement, wants,
modules, manifests, builds and haves, only where a key's bytes differ, and removes the
placement, wants and haves of nodes and modules the file no longer has (manifests, builds
and modules stay). Applying the same file again writes nothing.

Apply asks the seat's verb which nodes' placement, wants and haves differ from the file and reads only
those (with no seat running it says so and reads them whole).

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
			began := time.Now()
			f, err := meshfile.ParseFile(file)
			parsed, parsedCPU := time.Since(began), processCPU()
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
			// The seat's verb, asked which nodes differ from the file, is
			// asked in the requests account; without it the buckets are
			// read whole.
			ask := asker{}
			if anc, err := bf.connectAsk("apply"); err != nil {
				ask.why = "no connection to ask the seat's verb on: " + err.Error()
			} else {
				defer anc.Close()
				ask.nc = anc
			}
			if dryRun {
				if !phases {
					parsed = 0
				}
				return runDry(cmd, js, ask, f, output, detailed, parsed, parsedCPU)
			}
			// A cluster just formed, or electing a leader, does not
			// answer for a while: each read and the apply are tried again
			// (the apply writes only what still differs), as components
			// do.
			say := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			// Under the mesh's users the seat alone makes buckets: an
			// operator's apply waits for it to have made them.
			if bf.credsOrDefault() != "" {
				if err := awaitBuckets(cmd.Context(), js, cmd.ErrOrStderr(), "apply", meshfile.Buckets, bucketWait); err != nil {
					return fmt.Errorf("apply %s: %w", file, err)
				}
			}
			fr, d, err := readForApply(cmd, js, ask, f, yes, say)
			if fr != nil && fr.fallback {
				fmt.Fprintln(cmd.ErrOrStderr(), "apply:", fr.says())
			}
			if err != nil {
				return err
			}
			st, err := writeApply(cmd.Context(), js, ask, f, fr, d, say)
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
	cmd.Flags().BoolVar(&phases, "phases", false, "with --dry-run: say on stderr how long the file's parse, the reads, the diff and the run took")
	_ = cmd.Flags().MarkHidden("phases")
	cmd.Flags().BoolVar(&yes, "yes", false, "apply a file that no longer places most of the mesh without asking")
	bf.add(cmd)
	bf.addReplicas(cmd)
	return cmd
}

// readForApply reads what the diff of f needs through js ([readFile]: of
// placement, wants and haves only the nodes the seat's verb says differ
// from the file), trying again for [applyRetry] while the bus's errors are
// transient (said on say), and returns what it read and the diff; unless
// yes, it asks the operator first when the file no longer places most of
// the mesh. Its errors say apply.
func readForApply(cmd *cobra.Command, js jetstream.JetStream, ask asker, f *meshfile.File, yes bool, say *slog.Logger) (*fileRead, *meshfile.Diff, error) {
	fr, d, err := readDiff(cmd.Context(), js, ask, f, say)
	if err != nil {
		return fr, nil, fmt.Errorf("apply: %w", err)
	}
	if !yes {
		if loss := f.Loss(fr.current, d); loss.Most() {
			if err := confirm(cmd, fmt.Sprintf("apply %s %s", f.Name, loss)); err != nil {
				return fr, nil, fmt.Errorf("apply: %s %s: %w", f.Name, loss, err)
			}
		}
	}
	return fr, d, nil
}

// readDiff reads what the diff of f needs ([readFile]) and makes it,
// trying again for [applyRetry] while the bus's errors are transient.
func readDiff(ctx context.Context, js jetstream.JetStream, ask asker, f *meshfile.File, say *slog.Logger) (*fileRead, *meshfile.Diff, error) {
	var fr *fileRead
	var d *meshfile.Diff
	err := bus.Retry(ctx, applyRetry, say, "read the mesh", func() error {
		var err error
		if fr, err = readFile(ctx, js, ask, f); err != nil {
			return err
		}
		d = f.DiffOf(fr.read, fr.nodes, time.Now())
		return nil
	})
	return fr, d, err
}

// writeApply writes d, the diff of f over fr ([meshfile.Write]); a
// transient error of the bus is tried again for [applyRetry], said on say,
// with the keys read and the diff made again first (it writes only what
// still differs).
func writeApply(ctx context.Context, js jetstream.JetStream, ask asker, f *meshfile.File, fr *fileRead, d *meshfile.Diff, say *slog.Logger) (meshfile.Stats, error) {
	var st meshfile.Stats
	again := false
	err := bus.Retry(ctx, applyRetry, say, "apply "+f.Name, func() error {
		if again {
			var err error
			if fr, d, err = readDiff(ctx, js, ask, f, say); err != nil {
				return err
			}
		}
		again = true
		var err error
		st, err = meshfile.Write(ctx, js, f, d)
		return err
	})
	return st, err
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
	return confirmOn(cmd.InOrStdin(), cmd.ErrOrStderr(), what)
}

// confirmOn is [confirm] asking on errOut, reading the answer from in.
func confirmOn(in io.Reader, errOut io.Writer, what string) error {
	if f, ok := in.(*os.File); !ok || !isTerminal(f) {
		return fmt.Errorf("%w (stdin is not a terminal: give --yes to apply it)", errNotConfirmed)
	}
	fmt.Fprintf(errOut, "%s.\nType yes to apply it: ", what)
	line, _ := bufio.NewReader(in).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return errNotConfirmed
	}
	return nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
