package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/dryrun"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// dryRun reads what a dry run of f at now needs and runs it: the report,
// the file's diff, what it read, and every odd change said by the mesh.
func dryRun(ctx context.Context, js jetstream.JetStream, ask asker, f *meshfile.File, now time.Time) (*dryrun.Report, *meshfile.Diff, *inputs, []error, error) {
	began, cpu := time.Now(), processCPU()
	in, err := readInputs(ctx, js, ask, f)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	in.phases.read, in.phases.readCPU = time.Since(began), processCPU()-cpu
	began, cpu = time.Now(), processCPU()
	d := f.DiffOf(in.file.read, in.file.nodes, now)
	in.phases.diff, in.phases.diffCPU = time.Since(began), processCPU()-cpu
	defer func(began time.Time, cpu time.Duration) {
		in.phases.run, in.phases.runCPU = time.Since(began), processCPU()-cpu
	}(time.Now(), processCPU())
	changes := make([]bus.Change, 0, len(d.Puts)+len(d.Removes))
	for _, p := range d.Puts {
		changes = append(changes, bus.Change{Bucket: p.Bucket, Key: p.Key, Value: p.Value})
	}
	for _, r := range d.Removes {
		changes = append(changes, bus.Change{Bucket: r.Bucket, Key: r.Key, Deleted: true})
	}
	m, odd := in.mesh()
	for {
		loaded := in.loaded
		if loaded == nil {
			loaded = &dryrun.Loaded{Every: true}
		}
		loaded.Lazy = in.lazy
		rep, missing := dryrun.RunLoaded(m, loaded, changes, now.UTC())
		if missing.None() {
			return rep, d, in, append(odd, in.lazy.Odd()...), nil
		}
		read, err := in.read(ctx, js, missing)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if missing.Changed || in.loaded == nil {
			m, odd = in.mesh()
			continue
		}
		odd = append(odd, in.take(m, read)...)
	}
}

// runDry is apply --dry-run: the buckets a mesh file writes and the ask
// router's records read once, the file's changes computed from them, and
// composed as the seat would over the seat's in-memory view (state.Mesh),
// which holds the seat's own keys and the providers' entries only of the
// nodes the run reads (dryrun.RunLoaded says which it needed and lacked:
// they are read, by subject, and the run made again); nothing written.
//
// With detailed, a run that would change something returns [errChanges]
// (exit code 2, as Terraform's plan -detailed-exitcode), one that would
// change nothing nil (0); an error is 1.
//
// With parsed (the file's parse and check took that long, and the process
// had taken parsedCPU of CPU time by its end) it says on
// stderr how long each step took, and how many keys it read and decoded
// past the file's buckets (apply's hidden --phases, for
// scripts/dryruncost).
func runDry(cmd *cobra.Command, js jetstream.JetStream, ask asker, f *meshfile.File, output string, detailed bool, parsed, parsedCPU time.Duration) error {
	rep, d, in, odd, err := dryRun(cmd.Context(), js, ask, f, time.Now())
	if err != nil {
		return fmt.Errorf("apply --dry-run: %w", err)
	}
	if in.file.fallback {
		fmt.Fprintln(cmd.ErrOrStderr(), "apply --dry-run:", in.file.says())
	}
	if parsed > 0 {
		seatKeys := 0
		for _, held := range in.seat {
			seatKeys += len(held)
		}
		nodes := "every node: " + in.file.whole
		if in.file.nodes != nil {
			nodes = fmt.Sprintf("%d nodes differing as the seat's digests say", len(in.file.nodes))
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "apply --dry-run phases: parse and check %.3f s, read %.3f s (%d keys of the file's buckets of %s, %d records), diff %.3f s, run %.3f s (%.3f s CPU, %d seat keys read, %d wants and haves and %d placements decoded, %d rounds)\n",
			parsed.Seconds(), in.phases.read.Seconds(), in.file.keys, nodes, len(in.records), in.phases.diff.Seconds(), in.phases.run.Seconds(), in.phases.runCPU.Seconds(), seatKeys, len(in.lazy.Took()), len(in.lazy.Placements()), rep.Rounds)
		fmt.Fprintf(cmd.ErrOrStderr(), "apply --dry-run CPU: parse and check %.3f s, read %.3f s, diff %.3f s\n",
			parsedCPU.Seconds(), in.phases.readCPU.Seconds(), in.phases.diffCPU.Seconds())
	}
	for _, o := range odd {
		fmt.Fprintln(cmd.ErrOrStderr(), "apply --dry-run: odd key left as it is:", o)
	}
	if err := writeDry(cmd.OutOrStdout(), f.Name, d, rep, output); err != nil {
		return err
	}
	if detailed && rep.Changed() {
		return errChanges
	}
	return nil
}

// errChanges is what apply --dry-run --detailed-exitcode returns when the
// seat would change something: exit code 2, nothing more said.
var errChanges = exitCode(2)

// exitCode is an error that is only an exit code: Run exits with it and
// prints nothing.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit code %d", int(e)) }

// markers are the signs of a dry run's changes, as Terraform's: + a key
// added, ~ changed, - removed; each with its colour on a terminal.
var markers = map[dryrun.Op]struct{ sign, colour string }{
	dryrun.Add:    {"+", "\x1b[32m"},
	dryrun.Update: {"~", "\x1b[33m"},
	dryrun.Remove: {"-", "\x1b[31m"},
}

// writeDry prints a dry run's report: JSON, or a line of what the file
// changes (its keys, in the buckets apply writes) and what the seat would
// change (the rows below it), then a table with each change's marker (coloured on a terminal,
// unless $NO_COLOR is set).
func writeDry(w io.Writer, name string, d *meshfile.Diff, rep *dryrun.Report, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	seatWrites, seatRemoves := 0, 0
	for _, c := range rep.Changes {
		if c.Op == dryrun.Remove {
			seatRemoves++
		} else {
			seatWrites++
		}
	}
	fmt.Fprintf(w, "dry run of %s: the file writes %s and removes %d; the seat would write %s and remove %d (below); nothing written\n",
		name, countKeys(len(d.Puts)), len(d.Removes), countKeys(seatWrites), seatRemoves)
	if !rep.Changed() {
		fmt.Fprintln(w, "the seat would write nothing")
		return nil
	}
	var rows [][]string
	for _, c := range rep.Changes {
		rows = append(rows, []string{markers[c.Op].sign, c.Node, would(c), c.Key, c.Why})
	}
	var b strings.Builder
	if err := writeTable(&b, []string{" ", "NODE", "WOULD", "KEY", "WHY"}, rows, false, tableWidth(w)); err != nil {
		return err
	}
	colour := writesTerminal(w) && os.Getenv("NO_COLOR") == ""
	for i, line := range strings.SplitAfter(b.String(), "\n") {
		if colour && i > 0 && line != "" {
			for _, m := range markers {
				if strings.HasPrefix(line, m.sign+" ") {
					line = m.colour + m.sign + "\x1b[0m" + line[len(m.sign):]
					break
				}
			}
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
	}
	if len(rep.Odd) > 0 {
		fmt.Fprintln(w, "odd:", strings.Join(rep.Odd, "; "))
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

// inputs is what a dry run has read: every key of the buckets a mesh file
// writes and of the ask router's records, and the seat's keys and the
// providers' entries of the nodes in loaded (nil once whole buckets were
// read).
type inputs struct {
	file    *fileRead
	current map[string]map[string][]byte // the buckets a mesh file writes (in.file.current)
	records map[string][]byte
	seat    map[string]map[string][]byte // plans, provisions, refused and bound buckets read so far
	loaded  *dryrun.Loaded               // nil once whole buckets were read
	lazy    *dryrun.Lazy                 // the wants and haves of current, taken into the mesh as the run reads them
	nodes   int                          // nodes placed
	phases  phases
	bound   []string // the providers that keep entries, once a mesh was made
}

// phases are the wall times of a dry run's steps past the file's parse and
// check: the read of the buckets a mesh file writes and of the ask
// router's records (what the file's diff needs, as apply reads them), the
// diff, and the run (the mesh made, the seat's keys of the nodes it needs
// read by subject, composed).
type phases struct {
	read, diff, run time.Duration
	// The process's CPU time in the read, the diff and the run (its
	// garbage collection's too).
	readCPU, diffCPU, runCPU time.Duration
}

// seatBuckets are the buckets whose keys a dry run reads per node.
var seatBuckets = []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket}

// wholeShare is the share of the nodes past which a dry run reads whole
// buckets rather than each node's keys by subject (a quarter): a read per
// node costs a watch each. A test reads by node with [testHooks].
const wholeShare = 4

// readInputs reads what the diff of f needs of the buckets a mesh file
// writes ([readFile]: the keys of the nodes where the bus differs from
// the file, as the seat's verb says) and every key of the ask router's
// records; a bucket that does not exist is read as empty.
func readInputs(ctx context.Context, js jetstream.JetStream, ask asker, f *meshfile.File) (*inputs, error) {
	in := &inputs{seat: map[string]map[string][]byte{},
		loaded: &dryrun.Loaded{Nodes: map[string]bool{}, Dependents: map[string]bool{}, Provisions: map[string]bool{}}}
	fr, err := readFile(ctx, js, ask, f)
	if err != nil {
		return nil, err
	}
	in.file, in.current = fr, fr.current
	records, err := readKeys(ctx, js, mesh.RecordsBucket, "")
	if err != nil {
		return nil, err
	}
	in.records = records
	in.nodes = len(in.current[mesh.PlacementBucket])
	return in, nil
}

// read reads what a run missed: the seat's keys and the providers' entries
// of its nodes (whole buckets once they are more than a wholeShare of the
// nodes), and the provision keys of each provision whose shared credential
// it needs the dependents of, or whose keys on every node it needs.
//
// It returns what it read (bucket -> key -> value) for [inputs.take], or
// nothing once it read whole buckets: make a new mesh then.
func (in *inputs) read(ctx context.Context, js jetstream.JetStream, missing dryrun.Missing) (map[string]map[string][]byte, error) {
	buckets := append([]string(nil), seatBuckets...)
	for _, p := range in.bound {
		buckets = append(buckets, mesh.BoundBucket(p))
	}
	whole := hooksOf(ctx).share(hooksOf(ctx).wholeShare, wholeShare)*(len(in.loaded.Nodes)+len(missing.Nodes)) > in.nodes
	if whole {
		for _, b := range buckets {
			held, err := readKeys(ctx, js, b, "")
			if err != nil {
				return nil, err
			}
			in.seat[b] = held
		}
		in.loaded = nil
		return nil, nil
	}
	got := map[string]map[string][]byte{}
	keep := func(b string, held map[string][]byte) {
		if in.seat[b] == nil {
			in.seat[b] = map[string][]byte{}
		}
		if got[b] == nil {
			got[b] = map[string][]byte{}
		}
		for k, v := range held {
			if _, had := in.seat[b][k]; !had {
				got[b][k] = v
			}
			in.seat[b][k] = v
		}
	}
	for _, b := range buckets {
		for _, n := range missing.Nodes {
			held, err := readKeys(ctx, js, b, n+".>")
			if err != nil {
				return nil, err
			}
			keep(b, held)
		}
	}
	for _, n := range missing.Nodes {
		in.loaded.Nodes[n] = true
	}
	read := map[string]bool{}
	provs := make([]string, 0, len(missing.Dependents)+len(missing.Provisions))
	for key, prov := range missing.Dependents {
		in.loaded.Dependents[key] = true
		provs = append(provs, prov)
	}
	for _, prov := range missing.Provisions {
		in.loaded.Provisions[prov] = true
		provs = append(provs, prov)
	}
	for _, prov := range provs {
		if read[prov] {
			continue
		}
		read[prov] = true
		for _, filter := range []string{"*.*." + prov, "*.*." + prov + ".*"} {
			held, err := readKeys(ctx, js, mesh.ProvisionsBucket, filter)
			if err != nil {
				return nil, err
			}
			keep(mesh.ProvisionsBucket, held)
		}
	}
	return got, nil
}

// take takes what read returned into m, seat buckets first, and returns
// every odd change said by the mesh.
func (in *inputs) take(m *state.Mesh, read map[string]map[string][]byte) []error {
	var odd []error
	for _, b := range append(append([]string(nil), seatBuckets...), boundBuckets(in.bound)...) {
		for k, v := range read[b] {
			if t := m.Take(bus.Change{Bucket: b, Key: k, Value: v}); t.Odd != nil {
				odd = append(odd, t.Odd)
			}
		}
	}
	return odd
}

// boundBuckets names the bound buckets of providers.
func boundBuckets(providers []string) []string {
	out := make([]string, len(providers))
	for i, p := range providers {
		out[i] = mesh.BoundBucket(p)
	}
	return out
}

// mesh returns a fresh [state.Mesh] holding what in has read, and every odd
// change said by the mesh; the placements, wants and haves are not taken
// but left to in.lazy, a new source of them for the runs over this mesh,
// which takes each as a run reads it (most of a mesh's keys: a run decodes
// those of the nodes it composes, of their providers and of the nodes
// placing a module it asks about).
func (in *inputs) mesh() (*state.Mesh, []error) {
	m := state.New()
	var odd []error
	take := func(bucket string, held map[string][]byte) {
		for k, v := range held {
			if t := m.Take(bus.Change{Bucket: bucket, Key: k, Value: v}); t.Odd != nil {
				odd = append(odd, t.Odd)
			}
		}
	}
	for _, b := range meshfile.Buckets {
		if b != mesh.PlacementBucket && b != mesh.WantsBucket && b != mesh.HaveBucket {
			take(b, in.current[b])
		}
	}
	in.lazy = dryrun.NewLazy(in.current[mesh.PlacementBucket], in.current[mesh.WantsBucket], in.current[mesh.HaveBucket])
	take(mesh.RecordsBucket, in.records)
	for _, b := range seatBuckets {
		take(b, in.seat[b])
	}
	in.bound = m.Bound()
	for _, p := range in.bound {
		take(mesh.BoundBucket(p), in.seat[mesh.BoundBucket(p)])
	}
	return m, odd
}

// readKeys reads the keys of bucket matching filter (every key when
// empty) once: key -> value. A bucket that does not exist is read as
// empty.
func readKeys(ctx context.Context, js jetstream.JetStream, bucket, filter string) (map[string][]byte, error) {
	held := map[string][]byte{}
	if _, err := js.KeyValue(ctx, bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
		return held, nil
	} else if err != nil {
		return nil, fmt.Errorf("read %s: %w", bucket, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the copy's watch
	c := bus.Follow(ctx, js, bucket, bus.Options{Filter: filter, Leader: true})
	select {
	case <-c.Ready():
	case <-ctx.Done():
		return nil, fmt.Errorf("read %s: %w", bucket, ctx.Err())
	}
	c.Range(func(key string, it bus.Item) bool {
		held[key] = it.Value
		return true
	})
	return held, nil
}
