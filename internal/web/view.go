package web

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/why"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// PageSize is the most rows a section of the page shows at once; the rest
// is reached by its pager.
const PageSize = 50

// query is what a view shows, read from the request's URL: the mesh's
// summary when it names nothing, else a search (q), a node, a module or a
// key, and per section its page (the parameter <section>-page, from 1).
type query struct {
	Q, Node, Module, Key string
	Pages                map[string]int
}

// maxSearch is the longest search the page takes, in bytes: each word is
// a term checked against every key the narrowest term finds.
const maxSearch = 256

func parseQuery(v url.Values) query {
	q := query{Q: strings.TrimSpace(v.Get("q")), Node: v.Get("node"), Module: v.Get("module"),
		Key: v.Get("key"), Pages: map[string]int{}}
	if len(q.Q) > maxSearch {
		q.Q = strings.ToValidUTF8(q.Q[:maxSearch], "")
	}
	for name, vals := range v {
		if sec, ok := strings.CutSuffix(name, "-page"); ok && len(vals) > 0 {
			if n, err := strconv.Atoi(vals[0]); err == nil && n > 1 {
				q.Pages[sec] = n
			}
		}
	}
	return q
}

// values returns the query as URL values.
func (q query) values() url.Values {
	v := url.Values{}
	for name, s := range map[string]string{"q": q.Q, "node": q.Node, "module": q.Module, "key": q.Key} {
		if s != "" {
			v.Set(name, s)
		}
	}
	for sec, n := range q.Pages {
		v.Set(sec+"-page", strconv.Itoa(n))
	}
	return v
}

// pageLink returns the link to this view with section at page n.
func (q query) pageLink(section string, n int) string {
	v := q.values()
	if n <= 1 {
		v.Del(section + "-page")
	} else {
		v.Set(section+"-page", strconv.Itoa(n))
	}
	return "/?" + v.Encode()
}

func nodeLink(node string) string   { return "/?" + url.Values{"node": {node}}.Encode() }
func moduleLink(mod string) string  { return "/?" + url.Values{"module": {mod}}.Encode() }
func keyLink(key string) string     { return "/?" + url.Values{"key": {key}}.Encode() }
func searchLink(q string) string    { return "/?" + url.Values{"q": {q}}.Encode() }
func stateLink(s mesh.State) string { return searchLink("state:" + string(s)) }

type stateCount struct {
	State mesh.State
	N     int
	Link  string // a search of the keys in that state (of the node, when a node's)
}

// states orders the states on the page.
var states = []mesh.State{mesh.Failed, mesh.Retiring, mesh.Asked, mesh.Waits, mesh.Provided}

// countStates returns n's counts in the page's order, states the page does
// not know last; scope ("node:X " or "") narrows the count's search link.
func countStates(n map[mesh.State]int, scope string) []stateCount {
	var out []stateCount
	for _, s := range states {
		if n[s] > 0 {
			out = append(out, stateCount{s, n[s], searchLink(scope + "state:" + string(s))})
		}
	}
	var other []stateCount
	for s, c := range n { // a state the page does not know is shown too
		if c > 0 && !known(s) {
			other = append(other, stateCount{s, c, searchLink(scope + "state:" + string(s))})
		}
	}
	sort.Slice(other, func(i, j int) bool { return other[i].State < other[j].State })
	return append(out, other...)
}

func known(s mesh.State) bool {
	for _, k := range states {
		if k == s {
			return true
		}
	}
	return false
}

// summary is the line over every view: the mesh's totals.
type summary struct {
	Nodes, Provisions, Plans, Held, Asks int
	Counts                               []stateCount
	Seat                                 string // what is said of the seat; empty when it is not known
	NoSeat                               bool   // no seat holds the lease
	Reading                              bool   // the page's copies have not read every key yet
	Now                                  time.Time
}

type nodeRow struct {
	Node string
	nodeSum
	Counts []stateCount
}

// provRow is one provision key.
type provRow struct {
	Key       string
	Node      string
	Consumer  string
	Provision string // the provision name, with its local name when it has one
	Provider  mesh.Ref
	State     mesh.State
	Why       string
	At        time.Time
	Ask       string
	Kept      string // who kept the key with "no", when a warrant says so
	DependsOn []string
}

type askRow struct {
	mesh.Ask
	Provision string // the key the ask is about, when it is a provision
}

type heldRow struct {
	Key string
	mesh.Refusal
}

type planRow struct {
	Key, Node, Module string
	Held              string // the refusal's why when the module is held
}

type oddRow struct {
	Bucket, Key, Why string
}

// stepRow is one step of a key's why walk.
type stepRow struct {
	why.Step
	Link string // the step's key's own view, when the page shows it
}

// keyView is what the page shows of one key: a provision's fields, or a
// plan's and its refusal, and the why walk.
type keyView struct {
	Key       string
	Prov      *provRow
	Ask       *askRow // the provision's open ask
	Plan      *planRow
	Refusal   *heldRow
	Unknown   bool // neither a provision, a plan nor a refusal
	Retired   *retiredRow
	Odd       []oddRow // the key in a bucket whose value is odd (it does not decode)
	WalkError string   // why the walk could not be made
}

// retiredRow is what the key view says of a key the seat deleted on the
// operator's yes (the walk's first two steps): what became of it, and the
// ask answered yes that removed it, who answered and when.
type retiredRow struct {
	Says   string    // what became of the key
	Ask    string    // the ask's id
	Answer string    // the answer: its option, who gave it, when, the ask's headline
	At     time.Time // when the answer was given
}

// retiredOf returns what steps, the walk of key, say of it retired, or
// nil when they do not say it was.
func retiredOf(key string, steps []why.Step) *retiredRow {
	if len(steps) < 2 || steps[0].Key != key || steps[0].State != why.StateRetired || steps[1].What != why.StepAsk {
		return nil
	}
	return &retiredRow{Says: steps[0].Says, Ask: steps[1].Key, Answer: steps[1].Says, At: steps[1].Since}
}

func newProvRow(key string, pv mesh.Provision) provRow {
	node, consumer := provisionNames(key, pv)
	name := pv.Provision
	if pv.Local != "" && pv.Local != pv.Provision {
		name += " (" + pv.Local + ")"
	}
	r := provRow{Key: key, Node: node, Consumer: consumer, Provision: name, Provider: pv.Provider,
		State: pv.State, Why: pv.Why, At: pv.At, Ask: pv.Ask, DependsOn: pv.DependsOn}
	if w := pv.Warrant; w != nil && w.Option == "no" {
		r.Kept = fmt.Sprintf("kept by %s at %s", w.By.Who, w.At.UTC().Format(time.RFC3339))
	}
	return r
}

func newAskRow(r mesh.Record) askRow {
	a := askRow{Ask: r.Ask}
	if k, ok := strings.CutPrefix(r.Ask.About, "provision."); ok {
		a.Provision = k
	}
	return a
}

// window returns the page n (from 1) of total rows: the bounds of its
// slice and the page it is (n past the last page is the last).
func window(total, n int) (from, to, page, pages int) {
	pages = max(1, (total+PageSize-1)/PageSize)
	page = min(max(n, 1), pages)
	from = (page - 1) * PageSize
	to = min(from+PageSize, total)
	return from, to, page, pages
}

// term is one word of a search: a field:value pair (state, node, module,
// key) or a plain word, in lower case (see search.go).
type term struct{ field, value string }

func parseTerms(q string) []term {
	var out []term
	for _, w := range strings.Fields(q) {
		if f, v, ok := strings.Cut(w, ":"); ok && (f == "state" || f == "node" || f == "module" || f == "key") {
			out = append(out, term{f, v})
		} else {
			out = append(out, term{"", strings.ToLower(w)})
		}
	}
	return out
}
