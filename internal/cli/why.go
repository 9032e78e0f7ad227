package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/internal/why"
)

func init() { commands = append(commands, newWhyCmd) }

func newWhyCmd() *cobra.Command {
	var bf busFlags
	var output string
	cmd := &cobra.Command{
		Use:   "why KEY",
		Short: "Walk a provision, plan or refusal key to the root cause of its state, one line per step",
		Long: `why reads only the keys its walk passes (each by its key, never a whole bucket) and walks KEY
to the root cause of its state: a provision's depends-on keys that are not
provided, its provider's entry (or have), the refusals of its provider and consumer, and for a retiring
key its ask or the operator's answer. A plan key (<node>.<module>) walks its provisions that are not
provided; a refusal key says why the module is held. A provision key the seat does not keep answers
with the refusal of its held consumer, or, once retired, with the ask and the answer that removed it.
The key asked about is first, the root cause of
each branch last, indented by how far it is:

  g14.grafana.database  asked for 3h: waits for g14.grafana.credential.postgres_database, which is failed
    → g14.grafana.credential.postgres_database  failed for 3h: mesh-vault said: store sealed
      → mesh-vault_bound g14.grafana.credential.postgres_database  failed: mesh-vault on control says failed: store sealed`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("why: want one KEY (a provision key, or <node>.<module>), got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			nc, js, err := bf.connect("cli-why")
			if err != nil {
				return fmt.Errorf("why: %w", err)
			}
			defer nc.Close()
			bf.sayNoSeat(cmd.Context(), js, cmd.ErrOrStderr(), "why")
			fromReplicas := bf.leader(cmd.Context(), js) == nil
			var steps []why.Step
			var walked error // the walk's own error: the key's shape
			err = bf.retry(cmd.Context(), "why "+args[0], func(ctx context.Context) error {
				st := lookup.New(ctx, js)
				if fromReplicas {
					st.FromReplicas()
				}
				steps, walked = why.Walk(st, args[0])
				return st.Err()
			})
			if err != nil {
				return fmt.Errorf("why: %w", err)
			}
			if walked != nil {
				return walked
			}
			if output == "json" || output == "yaml" {
				return writeData(cmd.OutOrStdout(), output, struct {
					Key   string     `json:"key"`
					Steps []why.Step `json:"steps"`
				}{args[0], steps})
			}
			return writeSteps(cmd.OutOrStdout(), steps, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table (one line per step), json or yaml")
	bf.add(cmd)
	bf.addTimeout(cmd)
	return cmd
}

// writeSteps writes one line per step, indented by its depth: the key, its
// state and for how long, and what it says.
func writeSteps(w io.Writer, steps []why.Step, now time.Time) error {
	for _, s := range steps {
		var b strings.Builder
		b.WriteString(strings.Repeat("  ", s.Depth))
		if s.Depth > 0 {
			b.WriteString("→ ")
		}
		if s.Key != "" {
			b.WriteString(s.Key)
			b.WriteString("  ")
		}
		if s.State != "" {
			b.WriteString(s.State)
			if !s.Since.IsZero() {
				b.WriteString(" for " + ago(now.Sub(s.Since)))
			}
			b.WriteString(": ")
		}
		b.WriteString(s.Says)
		if _, err := fmt.Fprintln(w, escapeControl(b.String())); err != nil {
			return err
		}
	}
	return nil
}

// ago says a duration the way an operator reads it: 40s, 12m, 3h, 5d.
func ago(d time.Duration) string { return lookup.Ago(d) }

// sayNoSeat says on w, after prefix, when no seat holds the lease and when
// the seat last wrote (lookup.ReadSeat: a few requests whatever the
// mesh's size), since a read view then shows what the last seat left. It
// says nothing when a seat holds it, nor when the server refuses the
// command's user the seat's bucket (a node's client); another failed
// read is said.
func (f *busFlags) sayNoSeat(ctx context.Context, js jetstream.JetStream, w io.Writer, prefix string) {
	var s lookup.Seat
	var err error
	if refused := f.tolerate(ctx, func(ctx context.Context) { s, err = lookup.ReadSeat(ctx, js) }); refused != nil {
		return
	}
	if err != nil {
		fmt.Fprintf(w, "%s: where the seat stands is not known: %v\n", prefix, err)
		return
	}
	if !s.Held {
		fmt.Fprintf(w, "%s: %s\n", prefix, s.Says(time.Now()))
	}
}
