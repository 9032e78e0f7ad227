package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newCaptureCmd, newBenchCmd) }

// Capture is the file "capture" writes and "bench" reads: every bucket
// the seat reads, as it was, key -> value text.
type Capture struct {
	At      time.Time                    `json:"at"`
	URL     string                       `json:"url"`
	Buckets map[string]map[string]string `json:"buckets"`
}

func newCaptureCmd() *cobra.Command {
	var bf busFlags
	cmd := &cobra.Command{
		Use:   "capture FILE",
		Short: "Capture every bucket the seat reads of a live mesh into one file, for bench",
		Long: `capture reads every bucket the seat follows (placement, wants, modules, manifests, builds, haves, its
plans, provisions and refusals, the ask records, and the entries of every provider that keeps them) once and
writes them into FILE as JSON: {"at","url","buckets":{bucket:{key:value}}}. Secrets are never in a bucket,
so none is in the file; it holds the mesh's names and manifests, so keep it as you keep the mesh file.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("capture: want FILE, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, js, err := bf.connect("cli-capture")
			if err != nil {
				return fmt.Errorf("capture: %w", err)
			}
			defer nc.Close()
			c := Capture{At: time.Now().UTC(), URL: bf.url, Buckets: map[string]map[string]string{}}
			keys := 0
			m, _, err := readMesh(cmd.Context(), js, func(bucket, key string, value []byte) {
				if c.Buckets[bucket] == nil {
					c.Buckets[bucket] = map[string]string{}
				}
				c.Buckets[bucket][key] = string(value)
				keys++
			})
			if err != nil {
				return fmt.Errorf("capture: %w", err)
			}
			buckets := append([]string(nil), meshBuckets...)
			for _, p := range m.Bound() {
				buckets = append(buckets, mesh.BoundBucket(p))
			}
			for _, b := range buckets {
				if c.Buckets[b] == nil {
					c.Buckets[b] = map[string]string{} // empty, or not made yet
				}
			}
			b, err := json.Marshal(c)
			if err != nil {
				return fmt.Errorf("capture: %w", err)
			}
			if err := os.WriteFile(args[0], b, 0o600); err != nil {
				return fmt.Errorf("capture: %w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "captured %d keys of %d buckets into %s (%d bytes)\n", keys, len(buckets), args[0], len(b))
			return err
		},
	}
	bf.add(cmd)
	return cmd
}

func newBenchCmd() *cobra.Command {
	var rounds int
	cmd := &cobra.Command{
		Use:   "bench FILE",
		Short: "Time composing each node of a captured mesh (p50, p90, p99, max)",
		Long: `bench loads a file written by capture into the seat's in-memory mesh (the same code the seat takes
changes with), then composes every node --rounds times with the seat's pure composition (nothing is
written) and prints the percentiles of one node's composition time, and the slowest node.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("bench: want FILE, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if rounds < 1 {
				return usageError{fmt.Errorf("bench: --rounds %d; want at least 1", rounds)}
			}
			b, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			var c Capture
			if err := json.Unmarshal(b, &c); err != nil {
				return fmt.Errorf("bench: %s is not a capture: %w", args[0], err)
			}
			m, odd := loadCapture(c)
			for _, o := range odd {
				fmt.Fprintln(cmd.ErrOrStderr(), "bench: odd key:", o)
			}
			nodes := m.Nodes()
			if len(nodes) == 0 {
				return fmt.Errorf("bench: %s holds no node", args[0])
			}
			r := benchNodes(m, nodes, rounds, c.At)
			_, err = fmt.Fprintf(cmd.OutOrStdout(),
				"%d nodes x %d rounds = %d compositions of %s (captured %s)\np50 %v  p90 %v  p99 %v  max %v (%s)\n",
				len(nodes), rounds, len(r.times), args[0], c.At.Format(time.RFC3339),
				r.pct(50), r.pct(90), r.pct(99), r.times[len(r.times)-1], r.slowest)
			return err
		},
	}
	cmd.Flags().IntVar(&rounds, "rounds", 10, "how many times each node is composed")
	return cmd
}

// loadCapture takes a capture's keys into a fresh mesh, read buckets
// before the seat's own, and returns the odd changes.
func loadCapture(c Capture) (*state.Mesh, []error) {
	m := state.New()
	var odd []error
	var order []string
	order = append(order, meshBuckets...)
	var bound []string
	for b := range c.Buckets {
		if !slices.Contains(meshBuckets, b) {
			bound = append(bound, b)
		}
	}
	sort.Strings(bound)
	order = append(order, bound...)
	for _, b := range order {
		keys := make([]string, 0, len(c.Buckets[b]))
		for k := range c.Buckets[b] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t := m.Take(bus.Change{Bucket: b, Key: k, Value: []byte(c.Buckets[b][k]), Revision: 1})
			if t.Odd != nil {
				odd = append(odd, t.Odd)
			}
		}
	}
	return m, odd
}

// benchResult holds every composition time, sorted.
type benchResult struct {
	times   []time.Duration
	slowest string
}

func (r benchResult) pct(p int) time.Duration {
	i := (len(r.times)*p + 99) / 100
	return r.times[max(0, min(i, len(r.times))-1)]
}

// benchNodes composes every node rounds times at now and returns the
// times, sorted, and the node of the slowest.
func benchNodes(m *state.Mesh, nodes []string, rounds int, now time.Time) benchResult {
	var r benchResult
	var worst time.Duration
	for range rounds {
		for _, n := range nodes {
			start := time.Now()
			res := compose.Node(m, n, now)
			d := time.Since(start)
			m.Composed(res)
			r.times = append(r.times, d)
			if d > worst {
				worst, r.slowest = d, n
			}
		}
	}
	sort.Slice(r.times, func(i, j int) bool { return r.times[i] < r.times[j] })
	return r
}
