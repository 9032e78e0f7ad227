package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/dryrun"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
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
	if len(rep.Nodes) == 0 {
		fmt.Fprintln(out, "the seat would write nothing")
		return nil
	}
	nodes := make([]string, 0, len(rep.Nodes))
	for n := range rep.Nodes {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var rows [][]string
	for _, n := range nodes {
		nd := rep.Nodes[n]
		add := func(what string, keys []string) {
			for _, k := range keys {
				rows = append(rows, []string{n, what, k})
			}
		}
		add("plan written", nd.PlansWritten)
		add("plan removed", nd.PlansRemoved)
		add("refusal written", nd.RefusalsWritten)
		add("refusal removed", nd.RefusalsRemoved)
		keys := make([]string, 0, len(nd.Provisions))
		for k := range nd.Provisions {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			what := "provision " + string(nd.Provisions[k])
			for _, a := range nd.Asks {
				if a == k {
					what += ", ask raised"
				}
			}
			rows = append(rows, []string{n, what, k})
		}
		add("provision removed", nd.ProvisionsRemoved)
	}
	if err := writeTable(out, []string{"NODE", "WOULD", "KEY"}, rows, false); err != nil {
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
