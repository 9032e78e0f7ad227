package web

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// view is what the page's templates render: one consistent reading of the
// page's state.
type view struct {
	Now      time.Time
	User     string
	Token    string
	Version  uint64
	Total    int
	Counts   []stateCount
	Asks     []askView
	Refusals []mesh.Refusal
	Nodes    []nodeView
	Odd      []oddView
}

type stateCount struct {
	State mesh.State
	N     int
}

type nodeView struct {
	Node   string
	Counts []stateCount
	Rows   []provRow
}

// provRow is one provision key of a node.
type provRow struct {
	Key       string
	Consumer  string
	Provision string // the provision name, with its local name when it has one
	Provider  mesh.Ref
	State     mesh.State
	Why       string
	At        time.Time
	Ask       string
	Kept      string // who kept the key with "no", when a warrant says so
}

type askView struct {
	mesh.Ask
	Provision string // the key the ask is about, when it is a provision
}

type oddView struct {
	Bucket, Key, Why string
}

// states orders the states on the page.
var states = []mesh.State{mesh.Failed, mesh.Retiring, mesh.Asked, mesh.Waits, mesh.Provided}

func countStates(rows []provRow) []stateCount {
	n := map[mesh.State]int{}
	for _, r := range rows {
		n[r.State]++
	}
	var out []stateCount
	for _, s := range states {
		if n[s] > 0 {
			out = append(out, stateCount{s, n[s]})
		}
		delete(n, s)
	}
	for s, c := range n { // a state the page does not know is shown too
		out = append(out, stateCount{s, c})
	}
	return out
}

// read takes one reading of the page's state.
func (p *Page) read() view {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := view{Now: p.cfg.Now().UTC(), User: p.cfg.User, Token: p.token, Version: p.version, Total: len(p.provs)}
	byNode := map[string][]provRow{}
	var all []provRow
	for key, pv := range p.provs {
		node := pv.Consumer.Node
		if k, err := mesh.ParseProvisionKey(key); err == nil {
			node = k.Node
		}
		name := pv.Provision
		if pv.Local != "" && pv.Local != pv.Provision {
			name += " (" + pv.Local + ")"
		}
		r := provRow{Key: key, Consumer: pv.Consumer.Module, Provision: name, Provider: pv.Provider,
			State: pv.State, Why: pv.Why, At: pv.At, Ask: pv.Ask}
		if w := pv.Warrant; w != nil && w.Option == "no" {
			r.Kept = fmt.Sprintf("kept by %s at %s", w.By.Who, w.At.UTC().Format(time.RFC3339))
		}
		byNode[node] = append(byNode[node], r)
		all = append(all, r)
	}
	v.Counts = countStates(all)
	for node, rows := range byNode {
		sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
		v.Nodes = append(v.Nodes, nodeView{Node: node, Counts: countStates(rows), Rows: rows})
	}
	sort.Slice(v.Nodes, func(i, j int) bool { return v.Nodes[i].Node < v.Nodes[j].Node })
	for _, r := range p.records {
		if r.State != mesh.RecordOpen {
			continue
		}
		a := askView{Ask: r.Ask}
		if k, ok := strings.CutPrefix(r.Ask.About, "provision."); ok {
			a.Provision = k
		}
		v.Asks = append(v.Asks, a)
	}
	sort.Slice(v.Asks, func(i, j int) bool {
		if !v.Asks[i].Expires.Equal(v.Asks[j].Expires) {
			return v.Asks[i].Expires.Before(v.Asks[j].Expires)
		}
		return v.Asks[i].ID < v.Asks[j].ID
	})
	for _, r := range p.refusals {
		v.Refusals = append(v.Refusals, r)
	}
	sort.Slice(v.Refusals, func(i, j int) bool {
		a, b := v.Refusals[i], v.Refusals[j]
		return a.Node < b.Node || a.Node == b.Node && a.Module < b.Module
	})
	for k, why := range p.odd {
		bucket, key, _ := strings.Cut(k, " ")
		v.Odd = append(v.Odd, oddView{bucket, key, why})
	}
	sort.Slice(v.Odd, func(i, j int) bool { return v.Odd[i].Bucket+v.Odd[i].Key < v.Odd[j].Bucket+v.Odd[j].Key })
	return v
}

// age says how long ago t was, in the largest whole unit: "40s", "12m",
// "3h", "5d". A zero t is "-".
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		if d < 0 {
			d = 0
		}
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// until says how long until t: "in 6d", or "due" once past.
func until(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if !t.After(now) {
		return "due"
	}
	return "in " + age(now, now.Add(-t.Sub(now)))
}
