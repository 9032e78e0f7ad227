package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newStatusCmd) }

// statusStates are the provision states status counts, in its columns'
// order.
var statusStates = []mesh.State{mesh.Provided, mesh.Asked, mesh.Waits, mesh.Failed, mesh.Retiring}

// nodeStatus is one node's row of status.
type nodeStatus struct {
	Node   string         `json:"node"`
	Plans  int            `json:"plans"`
	States map[string]int `json:"states"`
	// Odd counts the node's provision keys whose value does not decode or
	// names no state the spec has.
	Odd      int      `json:"odd,omitempty"`
	Held     []string `json:"held"`
	OpenAsks []string `json:"open-asks"`
}

// meshStatus is what status shows: the seat, then one row per node.
type meshStatus struct {
	Seat  lookup.Seat   `json:"seat"`
	Nodes []*nodeStatus `json:"nodes"`
	// Notes say what could not be read (a bucket not made yet, the ask
	// router not answering).
	Notes []string `json:"notes,omitempty"`
}

func newStatusCmd() *cobra.Command {
	var bf busFlags
	var node, output string
	cmd := &cobra.Command{
		Use:   "status [--node N]",
		Short: "The mesh at a glance: the seat, and per node its plans, provisions per state, held modules and open asks",
		Long: `status shows the seat (who holds its lease, since when, and when it last wrote: its last
composition that changed a key), then one line per node: its plans, its provisions counted per state,
its held modules and its open asks (by the node of the key each is about).

The counts come from the seat (verb mesh-provisioner.provisioning, what "status"), which keeps them
current as keys change: status reads the seat's lease and the ask router's open asks, and no other
bucket. When no seat answers, status says so and counts from the buckets: the keys of the plans and
the placement (not their values), the state of each provision and the refusals. --node N asks for
(or reads) only that node.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "wide", "json", "yaml"); err != nil {
				return err
			}
			if node != "" && !mesh.ValidName(node) {
				return usageError{fmt.Errorf("status: --node %q is no node's name (lower-case [a-z0-9][a-z0-9-]*)", node)}
			}
			snc, js, err := bf.connect("cli-status")
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			defer snc.Close()
			nc, err := bf.connectAsk("cli-status")
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			defer nc.Close()
			var st meshStatus
			err = bf.retry(cmd.Context(), "status", func(ctx context.Context) (err error) {
				st, err = readStatus(ctx, nc, js, node)
				return err
			})
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			if node != "" {
				if err := checkNodeRow(cmd.Context(), js, node, &st); err != nil {
					return fmt.Errorf("status: %w", err)
				}
			}
			for _, n := range st.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "status:", n)
			}
			switch output {
			case "json", "yaml":
				return writeData(cmd.OutOrStdout(), output, st)
			}
			return writeStatus(cmd.OutOrStdout(), st, time.Now(), output == "wide")
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only this node")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, wide (whole cells), json or yaml")
	bf.add(cmd)
	bf.addTimeout(cmd)
	return cmd
}

// readStatus reads the mesh's status, narrowed to node when it is not "":
// the seat's lease through js; the counts from the seat's verb
// (mesh-provisioner.provisioning, what "status", asked through nc, a
// connection in the requests account), or, when no seat answers it, from
// the buckets through js, said in a note; the open asks from the ask
// router, through nc.
func readStatus(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, node string) (meshStatus, error) {
	var st meshStatus
	seat, err := lookup.ReadSeat(ctx, js)
	if err != nil {
		return st, err
	}
	st.Seat = seat
	nodes, err := askStatus(ctx, nc, node)
	if errors.Is(err, errNoSeatAnswers) && !seat.Held {
		err = fmt.Errorf("no seat holds the lease: %w", err)
	}
	if err != nil {
		st.Notes = append(st.Notes, fmt.Sprintf("%v: counted from the buckets", err))
		if nodes, err = countStatus(ctx, js, node, &st); err != nil {
			return st, err
		}
	}
	of := func(n string) *nodeStatus {
		ns := nodes[n]
		if ns == nil {
			ns = &nodeStatus{Node: n, States: map[string]int{}, Held: []string{}, OpenAsks: []string{}}
			nodes[n] = ns
		}
		return ns
	}
	actx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	l, err := asks.List(actx, nc, mesh.RecordOpen)
	if err != nil {
		st.Notes = append(st.Notes, fmt.Sprintf("open asks not known: %v", err))
	}
	for _, rec := range l.Records {
		key, _ := strings.CutPrefix(rec.Ask.About, "provision.")
		n, _, _ := strings.Cut(key, ".")
		if node != "" && n != node {
			continue
		}
		ns := of(n)
		ns.OpenAsks = append(ns.OpenAsks, rec.Ask.ID)
	}
	for _, ns := range nodes {
		sort.Strings(ns.Held)
		sort.Strings(ns.OpenAsks)
		st.Nodes = append(st.Nodes, ns)
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].Node < st.Nodes[j].Node })
	return st, nil
}

// errNodeNotFound is wrapped by status's error for --node N when N is not
// in the placement and holds nothing (no plan, provision, held module or
// open ask): a misspelt node, said rather than shown as an empty row.
var errNodeNotFound = errors.New("not found")

// checkNodeRow checks the row of status --node node in st against the
// placement, one key read: a node not placed whose row is empty gives an
// error wrapping [errNodeNotFound] ("node "nosuch" not found: ..."); a
// node not placed that still holds keys (it left, its client not done, or
// provisions retiring) keeps its row, with a note saying so. A placement
// that cannot be read leaves st as it is.
func checkNodeRow(ctx context.Context, js jetstream.JetStream, node string, st *meshStatus) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, mesh.PlacementBucket)
	if err == nil {
		_, err = lookup.Get(ctx, js, kv, node)
	}
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound):
		return nil
	}
	for _, ns := range st.Nodes {
		if ns.Node != node {
			continue
		}
		total := ns.Plans + ns.Odd + len(ns.Held) + len(ns.OpenAsks)
		for _, n := range ns.States {
			total += n
		}
		if total > 0 {
			st.Notes = append(st.Notes, fmt.Sprintf("node %s is not in the placement (%s has no key %s); what it still holds is shown", node, mesh.PlacementBucket, node))
			return nil
		}
	}
	return fmt.Errorf("node %q %w: %s has no key %s, and no plan, provision or ask is of it", node, errNodeNotFound, mesh.PlacementBucket, node)
}

// errNoSeatAnswers is askStatus's error when no seat answers its verb.
var errNoSeatAnswers = errors.New("no seat answers " + mesh.ProvisioningSubject)

// askStatus asks the seat's verb for every node's counts (node's only
// when it is not ""), page by page. It returns an error when no seat
// answers, or the answer is an error or does not decode (a seat that does
// not know what "status").
func askStatus(ctx context.Context, nc *nats.Conn, node string) (map[string]*nodeStatus, error) {
	nodes := map[string]*nodeStatus{}
	req := provisioning.Request{What: provisioning.WhatStatus, Node: node}
	for {
		body, _ := json.Marshal(req) // plain strings always encode
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		msg, err := nc.RequestWithContext(rctx, mesh.ProvisioningSubject, body)
		cancel()
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, errNoSeatAnswers
		}
		if err != nil {
			return nil, fmt.Errorf("asking %s: %w", mesh.ProvisioningSubject, err)
		}
		var r provisioning.Reply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return nil, fmt.Errorf("the answer of %s does not decode: %w", mesh.ProvisioningSubject, err)
		}
		if r.Error != "" {
			return nil, fmt.Errorf("%s says: %s", mesh.ProvisioningSubject, r.Error)
		}
		for _, e := range r.Entries {
			var v provisioning.NodeStatus
			if err := json.Unmarshal(e.Value, &v); err != nil {
				return nil, fmt.Errorf("the answer of %s for node %s does not decode: %w", mesh.ProvisioningSubject, e.Key, err)
			}
			if v.States == nil {
				v.States = map[string]int{}
			}
			if v.Held == nil {
				v.Held = []string{}
			}
			nodes[e.Key] = &nodeStatus{Node: e.Key, Plans: v.Plans, States: v.States, Odd: v.Odd, Held: v.Held, OpenAsks: []string{}}
		}
		if r.Next == "" {
			return nodes, nil
		}
		req.After = r.Next
	}
}

// countStatus counts every node's plans, provisions per state and held
// modules (node's only when it is not "") from the buckets through js,
// noting in st a bucket not made yet.
func countStatus(ctx context.Context, js jetstream.JetStream, node string, st *meshStatus) (map[string]*nodeStatus, error) {
	patterns := []string{">"}
	if node != "" {
		patterns = []string{node + ".>"}
	}
	nodes := map[string]*nodeStatus{}
	of := func(n string) *nodeStatus {
		ns := nodes[n]
		if ns == nil {
			ns = &nodeStatus{Node: n, States: map[string]int{}, Held: []string{}, OpenAsks: []string{}}
			nodes[n] = ns
		}
		return ns
	}
	// read reads the keys of bucket matching patterns, with their values
	// unless keysOnly.
	read := func(bucket string, keysOnly bool, f func(key string, v []byte)) error {
		kv, err := js.KeyValue(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			st.Notes = append(st.Notes, fmt.Sprintf("bucket %s does not exist yet (has the seat run?)", bucket))
			return nil
		}
		if err != nil {
			return fmt.Errorf("bucket %s: %w", bucket, err)
		}
		read := lookup.Read
		if keysOnly {
			read = lookup.ReadKeys
		}
		return read(ctx, js, kv, patterns, func(key string, v []byte, _ uint64) { f(key, v) })
	}
	nodeOf := func(key string) *nodeStatus {
		n, _, _ := strings.Cut(key, ".")
		return of(n)
	}
	if node == "" {
		if err := read(mesh.PlacementBucket, true, func(key string, _ []byte) { of(key) }); err != nil {
			return nil, err
		}
	} else {
		of(node)
	}
	if err := read(mesh.PlansBucket, true, func(key string, _ []byte) { nodeOf(key).Plans++ }); err != nil {
		return nil, err
	}
	var heads jsonhead.HeadReader
	err := read(mesh.ProvisionsBucket, false, func(key string, v []byte) {
		ns := nodeOf(key)
		h, err := heads.Read(v, jsonhead.HeadState, nil)
		if err != nil {
			var p mesh.Provision
			if jsonhead.Decode(v, &p) != nil {
				ns.Odd++
				return
			}
			h.State = p.State
		}
		if !known(h.State) {
			ns.Odd++
			return
		}
		ns.States[string(h.State)]++
	})
	if err != nil {
		return nil, err
	}
	if err := read(mesh.RefusedBucket, true, func(key string, _ []byte) {
		if k, err := mesh.ParseRefusalKey(key); err == nil {
			ns := of(k.Node)
			ns.Held = append(ns.Held, k.Module)
		}
	}); err != nil {
		return nil, err
	}
	return nodes, nil
}

// known reports whether s is one of the spec's provision states.
func known(s mesh.State) bool {
	for _, k := range statusStates {
		if s == k {
			return true
		}
	}
	return false
}

// writeStatus writes the seat's line, the mesh's totals and a table of
// the nodes.
func writeStatus(w io.Writer, st meshStatus, now time.Time, wide bool) error {
	fmt.Fprintln(w, st.Seat.Says(now))
	total := map[string]int{}
	plans, held, open, odd, provs := 0, 0, 0, 0, 0
	for _, ns := range st.Nodes {
		plans += ns.Plans
		held += len(ns.Held)
		open += len(ns.OpenAsks)
		odd += ns.Odd
		for s, n := range ns.States {
			total[s] += n
			provs += n
		}
	}
	var counts []string
	for _, s := range statusStates {
		if total[string(s)] > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", total[string(s)], s))
		}
	}
	if odd > 0 {
		counts = append(counts, fmt.Sprintf("%d odd", odd))
	}
	sum := "mesh: " + plural(len(st.Nodes), "node") + ", " + plural(plans, "plan") + ", " + plural(provs+odd, "provision")
	if len(counts) > 0 {
		sum += " (" + strings.Join(counts, ", ") + ")"
	}
	fmt.Fprintf(w, "%s, %d held, %s\n", sum, held, plural(open, "open ask"))
	if len(st.Nodes) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	header := []string{"NODE", "PLANS"}
	for _, s := range statusStates {
		header = append(header, strings.ToUpper(string(s)))
	}
	header = append(header, "HELD", "OPEN ASKS")
	rows := make([][]string, 0, len(st.Nodes))
	for _, ns := range st.Nodes {
		r := []string{ns.Node, strconv.Itoa(ns.Plans)}
		for _, s := range statusStates {
			r = append(r, count(ns.States[string(s)]))
		}
		r = append(r, listOf(ns.Held), listOf(ns.OpenAsks))
		rows = append(rows, r)
	}
	return writeTable(w, header, rows, wide)
}

// count is n, or "-" for none.
// plural returns "1 node", "2 nodes", "0 nodes": n and noun, with an "s"
// unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func count(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// listOf is "n: a, b", or "-" for none.
func listOf(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strconv.Itoa(len(s)) + ": " + strings.Join(s, ", ")
}
