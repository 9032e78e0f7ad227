package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newGetCmd) }

// getKind is one thing "get WHAT" shows. Each file that adds a kind puts it
// into getKinds in its init.
type getKind struct {
	// short says in a few words what the kind shows, for the help.
	short string
	// read returns the kind's items narrowed by q: every item under its key
	// as stored, and every odd key (out of shape, or a value that does not
	// decode) with why. Notes are said on stderr (a bucket that does not
	// exist yet).
	read func(ctx context.Context, q *getQuery) (getAnswer, error)
	// bucket is the bucket a kind read from one is read from ("" for a
	// kind the seat's verb answers), and check sorts each of its keys for
	// q: keep reports whether it is asked for; a non-empty why makes it
	// odd. Only such kinds take KEY and --watch.
	bucket string
	check  func(q *getQuery) func(key string, value []byte) (keep bool, why string)
	// header names the table's columns; row gives an item's cells.
	header []string
	row    func(it getItem) []string
}

// getKinds holds every kind "get" knows, by the word that names it.
var getKinds = map[string]getKind{}

// getQuery is what "get" was asked: the bus to read and the narrowing.
type getQuery struct {
	bus          *busFlags
	node, module string
	// contributor and collection narrow collect (see getverb.go).
	contributor, collection string
	// key is the one key asked for (get KIND KEY), "" for all; state
	// narrows provisions to one state (--state).
	key, state string
	// filtered, for get KIND KEY, says why the key was read but not
	// shown ("ace.gitea.database.main is provided, not asked"); "" when
	// it was shown or not read.
	filtered string
	// nc and js are the connection the command dialed: js for kinds that
	// read buckets, nc for kinds that ask a verb.
	nc *nats.Conn
	js jetstream.JetStream
}

// getItem is one key and its value as stored.
type getItem struct {
	Key   string
	Value []byte
}

// getOdd is a key that is out of its bucket's shape or whose value does
// not decode, said instead of dropped.
type getOdd struct {
	Key, Why string
	Value    []byte
}

// getAnswer is what a kind read.
type getAnswer struct {
	Items []getItem
	Odd   []getOdd
	Notes []string
}

func init() {
	getKinds["plans"] = getKind{
		short:  "each placed module's plan on its node (" + mesh.PlansBucket + ")",
		bucket: mesh.PlansBucket,
		check:  checkPlan,
		header: []string{"NODE", "MODULE", "FP", "DIRS", "PORTS", "SECRETS", "CONFIG", "CONTRIBUTES", "PROVISIONS"},
		row:    planRow,
	}
	getKinds["provisions"] = getKind{
		short:  "every provision between a consumer and a provider, with its state and why (" + mesh.ProvisionsBucket + ")",
		bucket: mesh.ProvisionsBucket,
		check:  checkProvision,
		header: []string{"NODE", "KEY", "STATE", "FOR", "PROVIDER", "WHY"},
		row:    provisionRow,
	}
	getKinds["refused"] = getKind{
		short:  "the modules held, with why (" + mesh.RefusedBucket + ")",
		bucket: mesh.RefusedBucket,
		check:  checkRefusal,
		header: []string{"NODE", "MODULE", "WHY", "SINCE"},
		row:    refusalRow,
	}
}

// newGetCmd returns "get WHAT [KEY]": read what the seat keeps.
func newGetCmd() *cobra.Command {
	var bf busFlags
	var q getQuery
	var output string
	var watch bool
	cmd := &cobra.Command{
		Use:   "get " + strings.Join(kindNames(), "|") + " [KEY]",
		Short: "Show what the mesh keeps: " + strings.Join(kindNames(), ", "),
		Long:  getLong(),
		Args:  cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return writeKinds(cmd.OutOrStdout())
			}
			kind, ok := getKinds[args[0]]
			if !ok {
				return usageError{fmt.Errorf("get: unknown %q; want one of %s", args[0], strings.Join(kindNames(), ", "))}
			}
			if err := checkOutput(output, "table", "wide", "json", "yaml"); err != nil {
				return err
			}
			if q.node != "" && !mesh.ValidName(q.node) {
				return usageError{fmt.Errorf("get: --node %q is no node's name (lower-case [a-z0-9][a-z0-9-]*), so it would narrow to nothing", q.node)}
			}
			if len(args) == 2 {
				if kind.bucket == "" {
					return usageError{fmt.Errorf("get %s takes no KEY: only plans, provisions and refused are read by key", args[0])}
				}
				if !validKey(args[1]) {
					return usageError{fmt.Errorf("get %s: %q is no key (tokens of [-_=a-zA-Z0-9] joined by dots)", args[0], args[1])}
				}
				q.key = args[1]
			}
			if q.state != "" && args[0] != "provisions" {
				return usageError{fmt.Errorf("get %s: --state narrows provisions only", args[0])}
			}
			if q.state != "" && !known(mesh.State(q.state)) {
				return usageError{fmt.Errorf("get: --state %q; want one of asked, provided, failed, waits, retiring", q.state)}
			}
			if watch && kind.bucket == "" {
				return usageError{fmt.Errorf("get %s: --watch follows plans, provisions and refused only", args[0])}
			}
			bf.ownNode = q.node
			nc, js, err := bf.connect("get")
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			defer nc.Close()
			q.bus, q.nc, q.js = &bf, nc, js
			var ans getAnswer
			err = bf.retry(cmd.Context(), "get "+args[0], func(ctx context.Context) (err error) {
				ans, err = readKind(ctx, kind, &q)
				return err
			})
			if err != nil {
				return fmt.Errorf("get %s: %w", args[0], err)
			}
			sort.Slice(ans.Items, func(i, j int) bool { return ans.Items[i].Key < ans.Items[j].Key })
			sort.Slice(ans.Odd, func(i, j int) bool { return ans.Odd[i].Key < ans.Odd[j].Key })
			for _, n := range ans.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "get:", n)
			}
			bf.sayNoSeat(cmd.Context(), js, cmd.ErrOrStderr(), "get")
			switch {
			case q.key != "" && len(ans.Items) == 0 && len(ans.Odd) == 0 && !watch && q.filtered != "":
				return fmt.Errorf("get %s %s: %s", args[0], q.key, q.filtered)
			case q.key != "" && len(ans.Items) == 0 && len(ans.Odd) == 0 && !watch:
				return fmt.Errorf("get %s %s: no such key in %s", args[0], q.key, kind.bucket)
			case output == "json" || output == "yaml":
				err = writeGetData(cmd.OutOrStdout(), cmd.ErrOrStderr(), output, ans)
			default:
				err = writeGetTable(cmd.OutOrStdout(), args[0], kind, ans, output == "wide")
			}
			if err != nil || !watch {
				return err
			}
			return watchKind(cmd.Context(), cmd.OutOrStdout(), kind, &q, output)
		},
	}
	cmd.Flags().StringVar(&q.node, "node", "", "only this node's keys (provisions: those whose consumer is on it, not those it provides)")
	cmd.Flags().StringVar(&q.module, "module", "", "only this module's keys (provisions: those it consumes or provides)")
	cmd.Flags().StringVar(&q.state, "state", "", "provisions: only those in this state (asked, provided, failed, waits, retiring)")
	cmd.Flags().StringVar(&q.contributor, "contributor", "", "collect: only this contributor's items")
	cmd.Flags().StringVar(&q.collection, "collection", "", "collect: only the items of this collection (its name, e.g. shell:zsh:normal)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table (fits the terminal, $COLUMNS or 120; keys whole, other cells cut), wide (whole cells), json or yaml (an object: key -> value as stored)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after what is there, print each change as it happens (plans, provisions, refused), until Ctrl-C")
	bf.add(cmd)
	bf.addTimeout(cmd)
	return cmd
}

// validKey reports whether key can be a key of a bucket: tokens of
// [-_=a-zA-Z0-9] joined by single dots (no wildcard).
func validKey(key string) bool {
	if key == "" {
		return false
	}
	for _, tok := range strings.Split(key, ".") {
		if tok == "" {
			return false
		}
		for _, r := range tok {
			if !(r == '-' || r == '_' || r == '=' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return false
			}
		}
	}
	return true
}

func kindNames() []string {
	names := make([]string, 0, len(getKinds))
	for k := range getKinds {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// readKind reads what kind shows for q: from its bucket (the keys of q's
// patterns), or through its read.
func readKind(ctx context.Context, kind getKind, q *getQuery) (getAnswer, error) {
	if kind.bucket == "" {
		return kind.read(ctx, q)
	}
	leader := q.js
	if q.bus != nil {
		leader = q.bus.leader(ctx, q.js)
	}
	return readBucketKeys(ctx, q.js, leader, kind.bucket, q.patterns(), kind.check(q))
}

func getLong() string {
	var b strings.Builder
	b.WriteString("Get shows what the mesh keeps, sorted by key, narrowed by --node and --module.\n")
	b.WriteString("For provisions --node keeps the keys of that node (their consumer's node), and --module the keys\n")
	b.WriteString("whose consumer or provider is that module.\n")
	b.WriteString("A key out of its bucket's shape or a value that does not decode is listed as odd, never hidden.\n\n")
	for _, k := range kindNames() {
		fmt.Fprintf(&b, "  %-12s %s\n", k, getKinds[k].short)
	}
	return b.String()
}

// writeKinds lists the kinds "get" shows, one a line with what it shows.
func writeKinds(w io.Writer) error {
	fmt.Fprintln(w, "get KIND shows one of:")
	for _, k := range kindNames() {
		fmt.Fprintf(w, "  %-12s %s\n", k, getKinds[k].short)
	}
	return nil
}

// writeGetTable writes the items as a table, then the odd keys. Unless
// wide, long cells are cut so that a line fits 120 columns.
func writeGetTable(w io.Writer, what string, kind getKind, ans getAnswer, wide bool) error {
	if len(ans.Items) == 0 && len(ans.Odd) == 0 {
		_, err := fmt.Fprintf(w, "no %s\n", what)
		return err
	}
	if len(ans.Items) > 0 {
		rows := make([][]string, len(ans.Items))
		for i, it := range ans.Items {
			rows[i] = kind.row(it)
		}
		if err := writeTable(w, kind.header, rows, wide); err != nil {
			return err
		}
	}
	if len(ans.Odd) > 0 {
		if len(ans.Items) > 0 {
			fmt.Fprintln(w)
		}
		rows := make([][]string, len(ans.Odd))
		for i, o := range ans.Odd {
			rows[i] = []string{o.Key, o.Why}
		}
		return writeTable(w, []string{"ODD KEY", "WHY"}, rows, wide)
	}
	return nil
}

// writeGetData writes one object, key -> value as stored (indented; a
// value that is not JSON as a JSON string), keys sorted, as JSON or, for
// output "yaml", as YAML; it says the odd keys on errw.
func writeGetData(w, errw io.Writer, output string, ans getAnswer) error {
	obj := map[string]json.RawMessage{}
	for _, it := range ans.Items {
		obj[it.Key] = asJSON(it.Value)
	}
	// Odd keys stay out of the object, whose values are all of their
	// kind; each is said on stderr with its why and value.
	for _, o := range ans.Odd {
		fmt.Fprintf(errw, "get: odd key %s: %s (value %s)\n", o.Key, o.Why, asJSON(o.Value))
	}
	b, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		return fmt.Errorf("get: encode: %w", err)
	}
	if output == "yaml" {
		return writeYAML(w, b)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func asJSON(v []byte) json.RawMessage {
	if json.Valid(v) {
		return v
	}
	s, _ := json.Marshal(string(v))
	return s
}

// readBucket reads every key of bucket and sorts each with check: keep
// reports whether the key is asked for; a non-empty why makes it odd.
// A bucket that does not exist yet is no error: it is said in the notes.
func readBucket(ctx context.Context, js jetstream.JetStream, bucket string, check func(key string, value []byte) (keep bool, why string)) (getAnswer, error) {
	return readBucketKeys(ctx, js, js, bucket, []string{">"}, check)
}

// readBucketKeys reads the keys of bucket that match patterns (">" for every
// key, "<node>" and "<node>.>" for a node's) as readBucket does: the server
// sends only the matching keys, so a node's keys cost what they are, not
// what the bucket is. What the watch read is completed from the stream's
// leader through leader (see lookup.Read), unless it is nil.
func readBucketKeys(ctx context.Context, js, leader jetstream.JetStream, bucket string, patterns []string, check func(key string, value []byte) (keep bool, why string)) (getAnswer, error) {
	var ans getAnswer
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		ans.Notes = append(ans.Notes, fmt.Sprintf("bucket %s does not exist yet (has the seat run?)", bucket))
		return ans, nil
	} else if err != nil {
		return ans, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	err = lookup.Read(ctx, leader, kv, patterns, func(key string, value []byte, _ uint64) {
		keep, why := check(key, value)
		switch {
		case why != "":
			ans.Odd = append(ans.Odd, getOdd{Key: key, Why: why, Value: value})
		case keep:
			ans.Items = append(ans.Items, getItem{Key: key, Value: value})
		}
	})
	if err != nil {
		return ans, fmt.Errorf("read %s: %w", bucket, err)
	}
	return ans, nil
}

// nodeKeys are the key patterns of q's node ("<node>.>": its keys, and
// the odd keys under its name), or ">" when q names no node. One pattern,
// which a node's client may read (a consumer filtered to "<node>.>"); a
// key out of shape that is not under "<node>." is listed only when get is
// not narrowed by node.
func (q *getQuery) nodeKeys() []string {
	if q.node == "" {
		return []string{">"}
	}
	return []string{q.node + ".>"}
}

// patterns are the key patterns a bucket kind reads for q: the one key
// asked for, or [getQuery.nodeKeys].
func (q *getQuery) patterns() []string {
	if q.key != "" {
		return []string{q.key}
	}
	return q.nodeKeys()
}

// decode decodes a stored value strictly, its names exact (spec 2,
// [jsonhead.Decode]), saying why it does not, or why its names are not the
// spec's.
func decode(value []byte, v any) string {
	if err := jsonhead.Decode(value, v); err != nil {
		var name *jsonhead.NameError
		if errors.As(err, &name) {
			return "value not as written: " + err.Error()
		}
		return "value does not decode: " + err.Error()
	}
	return ""
}

func matches(filter string, values ...string) bool {
	if filter == "" {
		return true
	}
	for _, v := range values {
		if v == filter {
			return true
		}
	}
	return false
}

// checkNodeModule sorts the keys of a bucket keyed <node>.<module> whose
// values name their node and module, narrowed by q; v returns a fresh
// value and the node and module it names.
func checkNodeModule(q *getQuery, v func(value []byte) (node, module, why string)) func(key string, value []byte) (bool, string) {
	return func(key string, value []byte) (bool, string) {
		k, err := mesh.ParseNodeModule(key)
		if err != nil {
			return false, "key out of shape: " + err.Error()
		}
		if !matches(q.node, k.Node) || !matches(q.module, k.Module) {
			return false, ""
		}
		node, module, why := v(value)
		if why != "" {
			return false, why
		}
		if node != k.Node || module != k.Module {
			return false, fmt.Sprintf("value is of %s on %s, not of its key", module, node)
		}
		return true, ""
	}
}

func checkPlan(q *getQuery) func(key string, value []byte) (bool, string) {
	return checkNodeModule(q, func(value []byte) (string, string, string) {
		var p mesh.Plan
		why := decode(value, &p)
		return p.Node, p.Module, why
	})
}

func checkRefusal(q *getQuery) func(key string, value []byte) (bool, string) {
	// The module token of a refusal key is escaped: a module held for a
	// name that is not valid has a refusal too.
	return func(key string, value []byte) (bool, string) {
		k, err := mesh.ParseRefusalKey(key)
		if err != nil {
			return false, "key out of shape: " + err.Error()
		}
		if !matches(q.node, k.Node) || !matches(q.module, k.Module) {
			return false, ""
		}
		var r mesh.Refusal
		if why := decode(value, &r); why != "" {
			return false, why
		}
		if r.Node != k.Node || r.Module != k.Module {
			return false, fmt.Sprintf("value is of %s on %s, not of its key", r.Module, r.Node)
		}
		return true, ""
	}
}

// checkProvision narrows by the key's node (the consumer's node) only, by
// module on either side, and by state: a provision is shown when its
// consumer is on the node, when its consumer or its provider is the
// module, and when its state is the one asked for.
func checkProvision(q *getQuery) func(key string, value []byte) (bool, string) {
	return func(key string, value []byte) (bool, string) {
		k, err := mesh.ParseProvisionKey(key)
		if err != nil {
			return false, "key out of shape: " + err.Error()
		}
		var p mesh.Provision
		if why := decode(value, &p); why != "" {
			return matches(q.node, k.Node) && matches(q.module, k.Consumer), why
		}
		if q.key != "" && key == q.key && !matches(q.state, string(p.State)) {
			q.filtered = fmt.Sprintf("%s is %s, not %s", key, p.State, q.state)
		}
		return matches(q.node, k.Node) && matches(q.module, k.Consumer, p.Provider.Module) && matches(q.state, string(p.State)), ""
	}
}

func planRow(it getItem) []string {
	var p mesh.Plan
	_ = json.Unmarshal(it.Value, &p) // decoded before it became an item
	provs := make([]string, len(p.Provisions))
	for i, pp := range p.Provisions {
		name := pp.Provision
		if pp.Local != "" {
			name += "." + pp.Local
		}
		provs[i] = name + " from " + pp.ProviderModule + "@" + pp.Provider
	}
	list := "-"
	if len(provs) > 0 {
		list = fmt.Sprintf("%d: %s", len(provs), strings.Join(provs, ", "))
	}
	return []string{p.Node, p.Module, p.Fingerprint,
		fmt.Sprint(len(p.Dirs)), fmt.Sprint(len(p.Ports)), fmt.Sprint(len(p.Secrets)), fmt.Sprint(len(p.Config)),
		fmt.Sprint(len(p.Contributes)), list}
}

func provisionRow(it getItem) []string {
	var p mesh.Provision
	_ = json.Unmarshal(it.Value, &p) // decoded before it became an item
	k, _ := mesh.ParseProvisionKey(it.Key)
	why := p.Why
	if why == "" {
		why = "-"
	}
	return []string{k.Node, it.Key, stateOf(p), since(p.At, clock()), p.Provider.Module + "@" + p.Provider.Node, why}
}

// clock is get's clock for how long a key has been in its state; tests
// set it.
var clock = time.Now

// stateOf is a provision's state as get shows it: a retiring key the
// operator answered is shown with the answer (kept on a no, by whom and
// when), apart from one whose ask is open or not yet raised.
func stateOf(p mesh.Provision) string {
	if p.State != mesh.Retiring {
		return string(p.State)
	}
	switch {
	case p.Warrant != nil && p.Warrant.Option == "no":
		return "kept (no by " + or(p.Warrant.By.Who, p.Warrant.By.Identity) + " " + p.Warrant.At.UTC().Format("2006-01-02 15:04Z") + ")"
	case p.Warrant != nil:
		return "retiring (" + p.Warrant.Option + " by " + or(p.Warrant.By.Who, p.Warrant.By.Identity) + " " + p.Warrant.At.UTC().Format("2006-01-02 15:04Z") + ")"
	case p.Ask != "":
		return "retiring (asked)"
	}
	return "retiring (not asked yet)"
}

// since says for how long a key has been in its state, from its at field
// ("3h"), or "-" when it has none.
func since(at, now time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return ago(now.Sub(at))
}

func refusalRow(it getItem) []string {
	var r mesh.Refusal
	_ = json.Unmarshal(it.Value, &r) // decoded before it became an item
	return []string{r.Node, r.Module, r.Why, r.Since.UTC().Format(time.RFC3339)}
}
