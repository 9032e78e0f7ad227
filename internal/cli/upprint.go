package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func printResult(out io.Writer, r *compose.Result) {
	if !r.Changed() && len(r.Held) == 0 && len(r.Problems) == 0 {
		return
	}
	if r.Node == "" { // keys re-judged on a provider's entry or have, or an ask's record
		keys := make([]string, 0, len(r.Provisions)+len(r.Retired))
		for _, k := range r.Retired {
			keys = append(keys, k+" retired")
		}
		for k, p := range r.Provisions {
			if !slices.Contains(r.Retired, k) { // a key retired in this judging is said once, as retired
				keys = append(keys, k+" "+string(p.State))
			}
		}
		sort.Strings(keys)
		fmt.Fprintf(out, "judged     %s\n", someOf(keys, 3))
		for _, p := range r.Problems {
			fmt.Fprintf(out, "           warrant refused: %s\n", p)
		}
		return
	}
	fmt.Fprintf(out, "composed %-10s plans %d written %d removed, provisions %d changed, %d retiring, %d held, %d problems (%v)\n",
		r.Node, len(r.Plans), len(r.PlansRemoved), len(r.Provisions), len(r.Retiring), len(r.Held), len(r.Problems),
		(r.Compose + r.Judge).Round(time.Microsecond))
}

// kept reads what the seat keeps: every plan, provision and refusal as
// stored, by the names of keptBuckets; the provisions from provisions when
// it is not nil (see readKept).
func kept(ctx context.Context, js jetstream.JetStream, provisions *bus.Copy) (map[string]map[string]json.RawMessage, error) {
	all := map[string]map[string]json.RawMessage{}
	for _, b := range keptBuckets {
		ans, err := readKept(ctx, js, b.bucket, provisionsCopy(b.bucket, provisions))
		if err != nil {
			return nil, err
		}
		m := map[string]json.RawMessage{}
		for _, it := range ans.Items {
			m[it.Key] = asJSON(it.Value)
		}
		all[b.name] = m
	}
	return all, nil
}

// keptBuckets are the buckets of what the seat keeps, by the names up
// prints them under, in the order it prints them.
var keptBuckets = []struct{ name, bucket string }{
	{"plans", mesh.PlansBucket}, {"provisions", mesh.ProvisionsBucket}, {"refused", mesh.RefusedBucket},
}

// printKept prints what the seat keeps: one JSON object
// {"plans":{..},"provisions":{..},"refused":{..}}, or tables. The JSON is
// written one bucket at a time as it is read, so that no more than one
// bucket's values are held at once. The provisions are taken from
// provisions when it is not nil (a copy waitQuiet followed: up no longer
// writes, so that it is read again only if it has not caught up with the
// bucket's last write within a few seconds). hint is as [printSummary]'s.
func printKept(ctx context.Context, out io.Writer, js jetstream.JetStream, hint, output string, provisions *bus.Copy) error {
	if output == "json" {
		w := bufio.NewWriter(out)
		w.WriteString("{")
		for i, b := range keptBuckets {
			ans, err := readKept(ctx, js, b.bucket, provisionsCopy(b.bucket, provisions))
			if err != nil {
				return err
			}
			sort.Slice(ans.Items, func(i, j int) bool { return ans.Items[i].Key < ans.Items[j].Key })
			if i > 0 {
				w.WriteString(",")
			}
			if err := writeKeptJSON(w, b.name, ans.Items); err != nil {
				return err
			}
		}
		w.WriteString("\n}\n")
		return w.Flush()
	}
	all, err := kept(ctx, js, provisions)
	if err != nil {
		return err
	}
	for _, what := range []string{"plans", "provisions", "refused"} {
		kind := getKinds[what]
		items := make([]getItem, 0, len(all[what]))
		for k, v := range all[what] {
			items = append(items, getItem{Key: k, Value: v})
		}
		sort.Slice(items, func(i, j int) bool { return items[i].Key < items[j].Key })
		fmt.Fprintf(out, "\n%s (%d)\n", strings.ToUpper(what), len(items))
		if err := writeGetTable(out, what, kind, getAnswer{Items: items}, false); err != nil {
			return err
		}
	}
	return writeSummary(ctx, out, js, all, hint, nil)
}

// provisionsCopy is provisions for the provisions bucket, else nil.
func provisionsCopy(bucket string, provisions *bus.Copy) *bus.Copy {
	if bucket == mesh.ProvisionsBucket {
		return provisions
	}
	return nil
}

// readKept reads every key of bucket as readBucket does, from followed
// instead when it is not nil and it catches up with the bucket's last
// write (stream sequence) within caughtUpWait.
func readKept(ctx context.Context, js jetstream.JetStream, bucket string, followed *bus.Copy) (getAnswer, error) {
	if followed != nil && caughtUp(ctx, js, followed) {
		var ans getAnswer
		ans.Items = make([]getItem, 0, followed.Len())
		followed.Range(func(key string, it bus.Item) bool {
			ans.Items = append(ans.Items, getItem{Key: key, Value: it.Value})
			return true
		})
		return ans, nil
	}
	return readBucket(ctx, js, bucket, func(string, []byte) (bool, string) { return true, "" })
}

// caughtUpWait is how long readKept waits for a followed copy to catch up
// with its bucket before reading the bucket anew (a variable for tests).
var caughtUpWait = 5 * time.Second

// caughtUp reports whether c has taken its bucket's last write (the
// stream's last sequence, read now), waiting up to caughtUpWait.
func caughtUp(ctx context.Context, js jetstream.JetStream, c *bus.Copy) bool {
	str, err := js.Stream(ctx, "KV_"+c.Bucket())
	if err != nil {
		return false
	}
	last := str.CachedInfo().State.LastSeq
	ctx, cancel := context.WithTimeout(ctx, caughtUpWait)
	defer cancel()
	return c.Seen() >= last || assemble.PollUntil(ctx, func() bool { return c.Seen() >= last }) == nil
}

// writeKeptJSON writes one member of printKept's JSON object: "name" and
// the object of items (sorted by key), each value as it is stored (a value
// that is not JSON as a string), indented as json.Encoder with
// SetIndent("", "  ") indents the whole object.
func writeKeptJSON(w *bufio.Writer, name string, items []getItem) error {
	buf := appendQuoted([]byte("\n  "), name)
	buf = append(buf, ": {"...)
	for i, it := range items {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, "\n    "...)
		buf = appendQuoted(buf, it.Key)
		buf = append(buf, ": "...)
		buf = appendIndented(buf, asJSON(it.Value), "    ", "  ")
		if len(buf) >= 64<<10 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if len(items) > 0 {
		buf = append(buf, "\n  "...)
	}
	buf = append(buf, '}')
	_, err := w.Write(buf)
	return err
}

// printSummary prints per node how many provisions are in each state and
// which modules are held, and the asks open with the command that lists
// them (hint: the flags reaching the bus as the operator, from
// [operatorFlags]): only the nodes whose row differs from shown
// (node -> row as last printed, updated; nil prints every node).
func printSummary(ctx context.Context, out io.Writer, js jetstream.JetStream, hint string, shown map[string]string) error {
	all, err := kept(ctx, js, nil)
	if err != nil {
		return err
	}
	return writeSummary(ctx, out, js, all, hint, shown)
}

// writeSummary is printSummary over what the seat keeps, already read.
func writeSummary(ctx context.Context, out io.Writer, js jetstream.JetStream, all map[string]map[string]json.RawMessage, hint string, shown map[string]string) error {
	type row struct {
		plans  int
		states map[mesh.State]int
		held   []string
	}
	rows := map[string]*row{}
	get := func(n string) *row {
		if rows[n] == nil {
			rows[n] = &row{states: map[mesh.State]int{}}
		}
		return rows[n]
	}
	for k := range all["plans"] {
		n, _, _ := strings.Cut(k, ".")
		get(n).plans++
	}
	for k, v := range all["provisions"] {
		var p mesh.Provision
		if json.Unmarshal(v, &p) != nil {
			continue
		}
		n, _, _ := strings.Cut(k, ".")
		get(n).states[p.State]++
	}
	for k := range all["refused"] {
		n, m, _ := strings.Cut(k, ".")
		r := get(n)
		r.held = append(r.held, m)
	}
	nodes := make([]string, 0, len(rows))
	for n := range rows {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var table [][]string
	for _, n := range nodes {
		r := rows[n]
		sort.Strings(r.held)
		held := "-"
		if len(r.held) > 0 {
			held = strings.Join(r.held, ", ")
		}
		cells := []string{n, fmt.Sprint(r.plans), fmt.Sprint(r.states[mesh.Provided]), fmt.Sprint(r.states[mesh.Asked]),
			fmt.Sprint(r.states[mesh.Waits]), fmt.Sprint(r.states[mesh.Failed]), fmt.Sprint(r.states[mesh.Retiring]), held}
		text := strings.Join(cells, "\t")
		if shown != nil {
			if shown[n] == text {
				continue // unchanged since last printed
			}
			shown[n] = text
		}
		table = append(table, cells)
	}
	var gone []string
	for n := range shown {
		if rows[n] == nil {
			gone = append(gone, n)
			delete(shown, n)
		}
	}
	sort.Strings(gone)
	if len(table) > 0 {
		fmt.Fprintln(out)
		if err := writeTable(out, []string{"NODE", "PLANS", "PROVIDED", "ASKED", "WAITS", "FAILED", "RETIRING", "HELD"}, table, false); err != nil {
			return err
		}
	}
	for _, n := range gone {
		fmt.Fprintf(out, "%s: nothing kept any more\n", n)
	}
	ans, err := readBucket(ctx, js, mesh.RecordsBucket, func(_ string, v []byte) (bool, string) {
		var r mesh.Record
		return json.Unmarshal(v, &r) == nil && r.State == mesh.RecordOpen, ""
	})
	if err != nil {
		return err
	}
	if n := len(ans.Items); n > 0 {
		fmt.Fprintf(out, "%s open for the operator: mesh-provisioner asks %s\n", plural(n, "ask"), hint)
	} else {
		fmt.Fprintln(out, "no asks open")
	}
	return nil
}
