package web

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/why"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A screen is one view of the page as parts: the summary line, sections of
// rows (items) with a pager, and a key's fields. The event stream sends a
// part again when its frame (title, count, pager, which items it holds)
// changed, and otherwise only the items that changed.
type screen struct {
	Version uint64
	Q       query
	Crumbs  []crumb // where the view is: the mesh, a node, a key
	Parts   []part
	// Missing names what the view asks about that the page holds nothing
	// of ("key", "node", "module"); empty when the view shows what it asks.
	// The first response of such a view is 404 (503 while the page is
	// still reading the bus).
	Missing string
}

type crumb struct{ Text, Link string }

// part is one part of a screen; its element carries data-id="<ID>", each
// item's data-id="<ID>/<item id>".
type part struct {
	ID    string
	Kind  string // summary, key, nodes, provs, asks, held, plans, modules, steps, odd
	Title string
	Count int // rows in every page
	Items []item
	Pager pager
	Empty string // said when there is no row
	Data  any    // a summary's or key's values
	HTML  template.HTML
	frame string
}

type item struct {
	ID   string
	Row  any
	HTML template.HTML
}

type pager struct {
	Page, Pages, From, To int
	Prev, Next            string
}

// moduleRow is a module a search found.
type moduleRow struct {
	Module      string
	Keys, Nodes int
}

// section makes a part of kind holding the page of rows asked for in q.
func section[T any](q query, id, kind, title, empty string, rows []T, itemID func(T) string) part {
	return paged(q, id, kind, title, empty, len(rows), func(i int) (string, any) { return itemID(rows[i]), rows[i] })
}

// paged makes a part of kind of n rows, making only the rows of the page
// asked for in q: at returns row i and its item id.
func paged(q query, id, kind, title, empty string, n int, at func(i int) (string, any)) part {
	from, to, page, pages := window(n, q.Pages[id])
	pt := part{ID: id, Kind: kind, Title: title, Count: n, Empty: empty,
		Pager: pager{Page: page, Pages: pages, From: from + 1, To: to}}
	if page > 1 {
		pt.Pager.Prev = q.pageLink(id, page-1)
	}
	if page < pages {
		pt.Pager.Next = q.pageLink(id, page+1)
	}
	for i := from; i < to; i++ {
		iid, row := at(i)
		pt.Items = append(pt.Items, item{ID: id + "/" + iid, Row: row})
	}
	return pt
}

// provsPart is a part of the provision keys (sorted), of which only the
// page's rows are made.
func (p *Page) provsPart(q query, id, title, empty string, keys []string) part {
	return paged(q, id, "provs", title, empty, len(keys), func(i int) (string, any) {
		return keys[i], newProvRow(keys[i], p.provs[keys[i]])
	})
}

// nodesPart is a part of the nodes (sorted), of which only the page's rows
// are made.
func (p *Page) nodesPart(q query, id, title, empty string, nodes []string) part {
	return paged(q, id, "nodes", title, empty, len(nodes), func(i int) (string, any) {
		return nodes[i], p.nodeRow(nodes[i])
	})
}

// keysOf returns the keys of set whose provision keep keeps, sorted.
func (p *Page) keysOf(set keySet, keep func(string, mesh.Provision) bool) []string {
	out := make([]string, 0, len(set))
	for key := range set {
		if pv, ok := p.provs[key]; ok && (keep == nil || keep(key, pv)) {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

func (p *Page) nodeRow(node string) nodeRow {
	s := p.idx.nodes[node]
	if s == nil {
		return nodeRow{Node: node}
	}
	return nodeRow{Node: node, nodeSum: *s, Counts: countStates(s.States, "node:"+node+" ")}
}

func (p *Page) askRows(ids keySet) []askRow {
	var out []askRow
	for id, r := range p.records {
		if r.State != mesh.RecordOpen || ids != nil && !has(ids, id) {
			continue
		}
		out = append(out, newAskRow(r))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Expires.Equal(out[j].Expires) {
			return out[i].Expires.Before(out[j].Expires)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func has(s keySet, k string) bool { _, ok := s[k]; return ok }

func (p *Page) heldRows(keys []string) []heldRow {
	out := make([]heldRow, 0, len(keys))
	for _, k := range keys {
		if r, ok := p.refusals[k]; ok {
			out = append(out, heldRow{k, r})
		}
	}
	return out
}

func (p *Page) planRow(key string, k mesh.NodeModule) planRow {
	r := planRow{Key: key, Node: k.Node, Module: k.Module}
	if ref, ok := p.refusals[key]; ok {
		r.Held = ref.Why
	}
	return r
}

// summaryOf returns the mesh's totals.
func (p *Page) summaryOf() summary {
	now := p.cfg.Now()
	return summary{Nodes: len(p.idx.nodes), Provisions: len(p.provs), Plans: len(p.plans),
		Held: len(p.refusals), Asks: p.idx.openAsks, Counts: countStates(p.idx.states, ""),
		Seat: p.seat.says(now), NoSeat: p.seat.known && p.seat.err == "" && !p.seat.Held, Reading: !p.ready(), Now: now}
}

// build makes the screen of q from one reading of the page's state, its
// rows not yet rendered. A key's walk is made after the reading, outside
// the page's lock.
func (p *Page) build(ctx context.Context, q query) screen {
	p.mu.Lock()
	sc := screen{Version: p.version, Q: q, Crumbs: []crumb{{"mesh", "/"}}}
	sc.Parts = append(sc.Parts, part{ID: "summary", Kind: "summary", Data: p.summaryOf()})
	var walkKey string
	switch {
	case q.Key != "":
		walkKey = q.Key
		sc.Parts = append(sc.Parts, p.keyPart(&sc, q.Key))
	case q.Node != "":
		p.nodeParts(&sc, q)
	case q.Module != "":
		p.moduleParts(&sc, q)
	case q.Q != "":
		sc.Crumbs = append(sc.Crumbs, crumb{"search " + q.Q, searchLink(q.Q)})
		p.searchParts(&sc, q)
	default:
		p.meshParts(&sc, q)
	}
	p.mu.Unlock()
	if walkKey != "" {
		walk, steps := p.walkPart(ctx, q, walkKey)
		sc.Parts = append(sc.Parts, walk)
		for i := range sc.Parts {
			// A key the seat no longer keeps, retired on the operator's
			// yes: the view says so (200), not that there is no such key.
			kv, ok := sc.Parts[i].Data.(keyView)
			if r := retiredOf(walkKey, steps); ok && kv.Unknown && r != nil {
				kv.Unknown, kv.Retired = false, r
				sc.Parts[i].Data = kv
				sc.Missing = ""
			}
		}
	}
	return sc
}

func (p *Page) meshParts(sc *screen, q query) {
	sc.Parts = append(sc.Parts,
		section(q, "asks", "asks", "Open asks", "No ask is open.", p.askRows(nil), func(a askRow) string { return a.ID }))
	if len(p.refusals) > 0 {
		keys := make([]string, 0, len(p.refusals))
		for k := range p.refusals {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		sc.Parts = append(sc.Parts, section(q, "held", "held", "Held modules", "", p.heldRows(keys), func(h heldRow) string { return h.Key }))
	}
	sc.Parts = append(sc.Parts, p.nodesPart(q, "nodes", "Nodes", "No node has a plan or provision yet.", p.idx.nodeNames()))
	if len(p.odd) > 0 {
		var odd []oddRow
		for k, why := range p.odd {
			bucket, key, _ := strings.Cut(k, " ")
			odd = append(odd, oddRow{bucket, key, why})
		}
		sort.Slice(odd, func(i, j int) bool { return odd[i].Bucket+" "+odd[i].Key < odd[j].Bucket+" "+odd[j].Key })
		sc.Parts = append(sc.Parts, section(q, "odd", "odd", "Odd keys", "", odd, func(o oddRow) string { return o.Bucket + " " + o.Key }))
	}
}

// missingPart is the part of a view whose node or module (what) the page
// holds nothing of.
func missingPart(sc *screen, what, name, says string) part {
	sc.Missing = what
	return part{ID: "missing", Kind: "missing", Title: "No such " + what, Data: name, Empty: says}
}

func (p *Page) nodeParts(sc *screen, q query) {
	n := q.Node
	if _, ok := p.idx.nodes[n]; !ok {
		sc.Parts = append(sc.Parts, missingPart(sc, "node", n, "No plan, provision or refusal names this node."))
		return
	}
	sc.Crumbs = append(sc.Crumbs, crumb{"node " + n, nodeLink(n)})
	sc.Parts = append(sc.Parts, section(q, "node", "nodes", "Node "+n, "No plan or provision names this node.",
		func() []nodeRow {
			if _, ok := p.idx.nodes[n]; ok {
				return []nodeRow{p.nodeRow(n)}
			}
			return nil
		}(), func(r nodeRow) string { return r.Node }))
	var plans []planRow
	for _, mod := range p.idx.plansOf[n].sorted() {
		key := mesh.NodeModule{Node: n, Module: mod}.String()
		plans = append(plans, p.planRow(key, mesh.NodeModule{Node: n, Module: mod}))
	}
	sc.Parts = append(sc.Parts, section(q, "plans", "plans", "Plans", "No plan on this node.", plans, func(r planRow) string { return r.Key }))
	if held := p.idx.heldOf[n]; len(held) > 0 {
		sc.Parts = append(sc.Parts, section(q, "held", "held", "Held modules", "", p.heldRows(held.sorted()), func(h heldRow) string { return h.Key }))
	}
	if ids := p.idx.asksOf[n]; len(ids) > 0 {
		sc.Parts = append(sc.Parts, section(q, "asks", "asks", "Open asks", "", p.askRows(ids), func(a askRow) string { return a.ID }))
	}
	sc.Parts = append(sc.Parts,
		p.provsPart(q, "consumes", "Provisions of its modules", "Its modules consume nothing.", p.keysOf(p.idx.consumes[n], nil)),
		p.provsPart(q, "provides", "Provided by its modules", "Its modules provide nothing.", p.keysOf(p.idx.provides[n], nil)))
}

func (p *Page) moduleParts(sc *screen, q query) {
	m := q.Module
	if len(p.idx.byModule[m]) == 0 && len(p.idx.planned[m]) == 0 && len(p.idx.heldMod[m]) == 0 {
		sc.Parts = append(sc.Parts, missingPart(sc, "module", m, "No plan, provision or refusal names this module."))
		return
	}
	sc.Crumbs = append(sc.Crumbs, crumb{"module " + m, moduleLink(m)})
	sc.Parts = append(sc.Parts, p.nodesPart(q, "planned", "Nodes with a plan of "+m, "No node has a plan of this module.",
		p.idx.planned[m].sorted()))
	keys := p.idx.byModule[m]
	sc.Parts = append(sc.Parts,
		p.provsPart(q, "consumes", "What it consumes", "It consumes nothing.",
			p.keysOf(keys, func(k string, pv mesh.Provision) bool { _, c := provisionNames(k, pv); return c == m })),
		p.provsPart(q, "provides", "What it provides", "It provides nothing.",
			p.keysOf(keys, func(_ string, pv mesh.Provision) bool { return pv.Provider.Module == m })))
}

func (p *Page) searchParts(sc *screen, q query) {
	terms := parseTerms(q.Q)
	var words []string // the plain words that may name a node or module
	for _, t := range terms {
		if t.field == "" && !strings.Contains(t.value, ".") {
			words = append(words, t.value)
		}
	}
	if len(words) > 0 && len(words) == len(terms) {
		if nodes := p.idx.foundNames(nodeName, words); len(nodes) > 0 {
			sc.Parts = append(sc.Parts, p.nodesPart(q, "found-nodes", "Nodes", "", nodes))
		}
		var mods []moduleRow
		for _, m := range p.idx.foundNames(moduleName, words) {
			mods = append(mods, moduleRow{Module: m, Keys: len(p.idx.byModule[m]), Nodes: len(p.idx.planned[m])})
		}
		if len(mods) > 0 {
			sc.Parts = append(sc.Parts, section(q, "found-modules", "modules", "Modules", "", mods, func(r moduleRow) string { return r.Module }))
		}
	}
	f := p.found(terms, q.Pages["found"])
	sc.Parts = append(sc.Parts, paged(q, "found", "provs", "Provisions", "No provision matches.", f.N, func(i int) (string, any) {
		key := f.Keys[i-f.From]
		return key, newProvRow(key, p.provs[key])
	}))
}

// keyPart is what the page shows of one key.
func (p *Page) keyPart(sc *screen, key string) part {
	kv := keyView{Key: key}
	if pv, ok := p.provs[key]; ok {
		r := newProvRow(key, pv)
		kv.Prov = &r
		if _, ok := p.idx.nodes[r.Node]; ok {
			sc.Crumbs = append(sc.Crumbs, crumb{"node " + r.Node, nodeLink(r.Node)})
		}
		if rec, ok := p.records[pv.Ask]; ok && rec.State == mesh.RecordOpen {
			a := newAskRow(rec)
			kv.Ask = &a
		}
	} else if k, err := mesh.ParseNodeModule(key); err == nil {
		if _, ok := p.idx.nodes[k.Node]; ok { // a crumb only to a node the page shows
			sc.Crumbs = append(sc.Crumbs, crumb{"node " + k.Node, nodeLink(k.Node)})
		}
		if _, ok := p.plans[key]; ok {
			r := p.planRow(key, k)
			kv.Plan = &r
		}
		if r, ok := p.refusals[key]; ok {
			kv.Refusal = &heldRow{key, r}
		}
	}
	for _, bucket := range []string{mesh.ProvisionsBucket, mesh.PlansBucket, mesh.RefusedBucket, mesh.RecordsBucket} {
		if why, ok := p.odd[bucket+" "+key]; ok {
			kv.Odd = append(kv.Odd, oddRow{bucket, key, why})
		}
	}
	kv.Unknown = kv.Prov == nil && kv.Plan == nil && kv.Refusal == nil && len(kv.Odd) == 0
	if kv.Unknown {
		sc.Missing = "key"
	}
	sc.Crumbs = append(sc.Crumbs, crumb{key, keyLink(key)})
	return part{ID: "key", Kind: "key", Data: kv}
}

// walkPart is the why walk of key, one row per step, and the steps.
func (p *Page) walkPart(ctx context.Context, q query, key string) (part, []why.Step) {
	steps, err := p.walk(ctx, key)
	var rows []stepRow
	for _, s := range steps {
		r := stepRow{Step: s}
		if s.What == why.StepProvision || s.What == why.StepPlan || s.What == why.StepRefusal {
			r.Link = keyLink(s.Key)
		}
		rows = append(rows, r)
	}
	empty := "No step."
	if err != nil {
		empty = "No walk: " + err.Error()
	}
	return paged(q, "why", "steps", "Why", empty, len(rows), func(i int) (string, any) {
		return fmt.Sprintf("%d %s %s", i, rows[i].What, rows[i].Key), rows[i] // a walk may pass a key twice
	}), steps
}

// rowData is what an item's template gets.
type rowData struct {
	ID    string
	R     any
	Token string
	Now   time.Time
}

// render renders every part and item of sc.
func (p *Page) renderScreen(sc *screen, now time.Time) error {
	for i := range sc.Parts {
		pt := &sc.Parts[i]
		for j := range pt.Items {
			it := &pt.Items[j]
			b, err := execute("row-"+pt.Kind, rowData{ID: it.ID, R: it.Row, Token: p.token, Now: now})
			if err != nil {
				return err
			}
			it.HTML = template.HTML(b)
		}
		b, err := execute("part", partData{part: pt, Token: p.token, Now: now})
		if err != nil {
			return err
		}
		pt.HTML = template.HTML(b)
		var f strings.Builder
		fmt.Fprintf(&f, "%s|%s|%d|%+v|%s|", pt.Kind, pt.Title, pt.Count, pt.Pager, pt.Empty)
		for _, it := range pt.Items {
			f.WriteString(it.ID)
			f.WriteByte(0)
		}
		if len(pt.Items) == 0 {
			f.WriteString(string(pt.HTML)) // a summary or key is its own frame
		}
		pt.frame = f.String()
	}
	return nil
}

type partData struct {
	*part
	Token string
	Now   time.Time
}

// execute runs the template name over data. Times are rendered absolute
// (the script shows them as ages), so that a row's HTML changes only when
// the row does.
func execute(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("web: render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// delta is what the event stream sends after a change: the parts and
// items whose HTML changed, each by its data-id. A screen whose parts
// changed (another set of sections) is sent whole, as "content".
type delta struct {
	Version uint64      `json:"v"`
	Content string      `json:"content,omitempty"`
	Parts   []deltaPart `json:"parts,omitempty"`
}

type deltaPart struct {
	ID   string `json:"id"`
	HTML string `json:"html"`
}

// diff returns what turns old into sc.
func diff(old, sc *screen) delta {
	d := delta{Version: sc.Version}
	same := old != nil && len(old.Parts) == len(sc.Parts)
	for i := 0; same && i < len(sc.Parts); i++ {
		same = old.Parts[i].ID == sc.Parts[i].ID
	}
	if !same {
		var b strings.Builder
		for _, pt := range sc.Parts {
			b.WriteString(string(pt.HTML))
		}
		d.Content = b.String()
		return d
	}
	for i, pt := range sc.Parts {
		was := old.Parts[i]
		if was.frame != pt.frame {
			d.Parts = append(d.Parts, deltaPart{pt.ID, string(pt.HTML)})
			continue
		}
		for j, it := range pt.Items {
			if was.Items[j].HTML != it.HTML {
				d.Parts = append(d.Parts, deltaPart{it.ID, string(it.HTML)})
			}
		}
	}
	return d
}
