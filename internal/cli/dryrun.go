package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/dryrun"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// runDry is apply --dry-run: the live mesh read once into the seat's
// in-memory view, the file's keys taken into it, composed as the seat
// would; nothing written.
func runDry(cmd *cobra.Command, js jetstream.JetStream, f *meshfile.File, output string) error {
	ctx := cmd.Context()
	// The buckets a mesh file writes, as meshfile.Current reads them, from
	// the same read.
	current := map[string]map[string][]byte{}
	for _, b := range meshfile.Buckets {
		current[b] = map[string][]byte{}
	}
	m, odd, err := readMesh(ctx, js, func(bucket, key string, value []byte) {
		if held := current[bucket]; held != nil {
			held[key] = value
		}
	})
	if err != nil {
		return fmt.Errorf("apply --dry-run: %w", err)
	}
	for _, o := range odd {
		fmt.Fprintln(cmd.ErrOrStderr(), "apply --dry-run: odd key left as it is:", o)
	}
	now := time.Now()
	d := f.Diff(current, now)
	changes := make([]bus.Change, 0, len(d.Puts)+len(d.Removes))
	for _, p := range d.Puts {
		changes = append(changes, bus.Change{Bucket: p.Bucket, Key: p.Key, Value: p.Value})
	}
	for _, r := range d.Removes {
		changes = append(changes, bus.Change{Bucket: r.Bucket, Key: r.Key, Deleted: true})
	}
	rep := dryrun.Run(m, changes, now.UTC())
	out := cmd.OutOrStdout()
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(out, "dry run of %s: %s to write, %d to remove; nothing written\n", f.Name, countKeys(len(d.Puts)), len(d.Removes))
	if !rep.Changed() {
		fmt.Fprintln(out, "the seat would write nothing")
		return nil
	}
	var rows [][]string
	for _, c := range rep.Changes {
		rows = append(rows, []string{c.Node, would(c), c.Key, c.Why})
	}
	if err := writeTable(out, []string{"NODE", "WOULD", "KEY", "WHY"}, rows, false); err != nil {
		return err
	}
	if len(rep.Odd) > 0 {
		fmt.Fprintln(out, "odd:", strings.Join(rep.Odd, "; "))
	}
	return nil
}

// countKeys says n keys: "1 key", "2 keys".
func countKeys(n int) string {
	if n == 1 {
		return "1 key"
	}
	return fmt.Sprintf("%d keys", n)
}

// would says what a dry run's change does, in a table's words: "plan
// written", "provision asked, ask raised", "refusal removed".
func would(c dryrun.Change) string {
	what := map[string]string{mesh.PlansBucket: "plan", mesh.ProvisionsBucket: "provision", mesh.RefusedBucket: "refusal"}[c.Bucket]
	switch {
	case c.Op == dryrun.Remove:
		return what + " removed"
	case c.Bucket == mesh.ProvisionsBucket:
		s := what + " " + string(c.State)
		if c.Ask {
			s += ", ask raised"
		}
		return s
	}
	return what + " written"
}
