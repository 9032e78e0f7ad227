package web

import (
	"sort"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// nodeSum is what the summary shows of one node, kept as changes come.
type nodeSum struct {
	States   map[mesh.State]int // its provisions (the node consumes) per state
	Provides int                // provisions whose provider is on the node
	Plans    int                // its plan keys
	Held     int                // its refusals
	Asks     int                // open asks about its provisions
}

func (s *nodeSum) empty() bool {
	return len(s.States) == 0 && s.Provides == 0 && s.Plans == 0 && s.Held == 0 && s.Asks == 0
}

// keySet is a set of keys.
type keySet map[string]struct{}

func (s keySet) sorted() []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// index keeps, beside the page's decoded values, what a view needs without
// reading every value: per node its sums and keys, per module its keys, and
// the mesh's counts. Every method is called with the page's lock held.
type index struct {
	nodes    map[string]*nodeSum
	sorted   []string  // the node names, sorted; nil when a node came or went
	terms    []termRef // the search's names, sorted; nil when a name came or went
	keys     []string  // the provision keys, sorted; nil when a key came or went
	states   map[mesh.State]int
	openAsks int

	byState     map[mesh.State]keySet // state -> provision keys in it
	consumes    map[string]keySet     // node -> provision keys of that node
	provides    map[string]keySet     // node -> provision keys whose provider is on it
	byModule    map[string]keySet     // module -> provision keys it consumes or provides
	byProvision map[string]keySet     // provision name or local name -> provision keys
	planned     map[string]keySet     // module -> nodes with a plan of it
	plansOf     map[string]keySet     // node -> modules it has a plan of
	heldOf      map[string]keySet     // node -> refusal keys
	heldMod     map[string]keySet     // module -> refusal keys
	asksOf      map[string]keySet     // node -> open ask ids about its provisions
}

func newIndex() index {
	return index{
		nodes: map[string]*nodeSum{}, states: map[mesh.State]int{}, byState: map[mesh.State]keySet{},
		consumes: map[string]keySet{}, provides: map[string]keySet{}, byModule: map[string]keySet{},
		byProvision: map[string]keySet{},
		planned:     map[string]keySet{}, plansOf: map[string]keySet{}, heldOf: map[string]keySet{},
		heldMod: map[string]keySet{}, asksOf: map[string]keySet{},
	}
}

// node returns the sum of node, making it (and so the node known).
func (x *index) node(node string) *nodeSum {
	s, ok := x.nodes[node]
	if !ok {
		s = &nodeSum{States: map[mesh.State]int{}}
		x.nodes[node] = s
		x.sorted, x.terms = nil, nil
	}
	return s
}

// settle forgets node when nothing is left of it.
func (x *index) settle(node string) {
	if s, ok := x.nodes[node]; ok && s.empty() {
		delete(x.nodes, node)
		x.sorted, x.terms = nil, nil
	}
}

// nodeNames returns the known nodes, sorted. The slice is the index's own.
func (x *index) nodeNames() []string {
	if x.sorted == nil {
		x.sorted = make([]string, 0, len(x.nodes))
		for n := range x.nodes {
			x.sorted = append(x.sorted, n)
		}
		sort.Strings(x.sorted)
	}
	return x.sorted
}

// add adds key to the set of m at at, making the set when it is new, and
// reports whether it did.
func add(m map[string]keySet, at, key string) bool {
	s, ok := m[at]
	if !ok {
		s = keySet{}
		m[at] = s
	}
	s[key] = struct{}{}
	return !ok
}

// drop drops key from the set of m at at, dropping the set when it is left
// empty, and reports whether it did.
func drop(m map[string]keySet, at, key string) bool {
	if s, ok := m[at]; ok {
		delete(s, key)
		if len(s) == 0 {
			delete(m, at)
			return true
		}
	}
	return false
}

// addName is add to a map of the names a search finds (modules,
// provisions): a name that comes makes the search's index again.
func (x *index) addName(m map[string]keySet, at, key string) {
	if add(m, at, key) {
		x.terms = nil
	}
}

// dropName is drop from a map of the names a search finds: a name that
// goes makes the search's index again.
func (x *index) dropName(m map[string]keySet, at, key string) {
	if drop(m, at, key) {
		x.terms = nil
	}
}

// provisionNames returns the node and consumer module of a provision key,
// from the key when it is in shape, else from the value.
func provisionNames(key string, p mesh.Provision) (node, consumer string) {
	if k, err := mesh.ParseProvisionKey(key); err == nil {
		return k.Node, k.Consumer
	}
	return p.Consumer.Node, p.Consumer.Module
}

// provisionKeys returns every provision key, sorted, given the page's
// provisions, sorted again only after a key came or went. The slice is the
// index's own.
func (x *index) provisionKeys(provs map[string]mesh.Provision) []string {
	if x.keys == nil {
		x.keys = make([]string, 0, len(provs))
		for k := range provs {
			x.keys = append(x.keys, k)
		}
		sort.Strings(x.keys)
	}
	return x.keys
}

// provisionWords returns a provision's name and its local name, when it
// has another: the names a search finds it by besides its nodes, modules
// and state.
func provisionWords(p mesh.Provision) []string {
	var out []string
	if p.Provision != "" {
		out = append(out, p.Provision)
	}
	if p.Local != "" && p.Local != p.Provision {
		out = append(out, p.Local)
	}
	return out
}

func (x *index) addProvision(key string, p mesh.Provision) {
	node, consumer := provisionNames(key, p)
	if node != "" {
		x.node(node).States[p.State]++
		add(x.consumes, node, key)
	}
	x.states[p.State]++
	if x.byState[p.State] == nil {
		x.byState[p.State] = keySet{}
		x.terms = nil
	}
	x.byState[p.State][key] = struct{}{}
	for _, name := range provisionWords(p) {
		x.addName(x.byProvision, name, key)
	}
	if p.Provider.Node != "" {
		x.node(p.Provider.Node).Provides++
		add(x.provides, p.Provider.Node, key)
	}
	if consumer != "" {
		x.addName(x.byModule, consumer, key)
	}
	if p.Provider.Module != "" {
		x.addName(x.byModule, p.Provider.Module, key)
	}
}

func (x *index) dropProvision(key string, p mesh.Provision) {
	node, consumer := provisionNames(key, p)
	if s, ok := x.nodes[node]; ok {
		if s.States[p.State]--; s.States[p.State] <= 0 {
			delete(s.States, p.State)
		}
		drop(x.consumes, node, key)
		x.settle(node)
	}
	if x.states[p.State]--; x.states[p.State] <= 0 {
		delete(x.states, p.State)
	}
	if s := x.byState[p.State]; s != nil {
		delete(s, key)
		if len(s) == 0 {
			delete(x.byState, p.State)
			x.terms = nil
		}
	}
	for _, name := range provisionWords(p) {
		x.dropName(x.byProvision, name, key)
	}
	if s, ok := x.nodes[p.Provider.Node]; ok {
		s.Provides--
		drop(x.provides, p.Provider.Node, key)
		x.settle(p.Provider.Node)
	}
	x.dropName(x.byModule, consumer, key)
	x.dropName(x.byModule, p.Provider.Module, key)
}

func (x *index) addPlan(_ string, k mesh.NodeModule) {
	x.node(k.Node).Plans++
	x.addName(x.planned, k.Module, k.Node)
	add(x.plansOf, k.Node, k.Module)
}

func (x *index) dropPlan(_ string, k mesh.NodeModule) {
	if s, ok := x.nodes[k.Node]; ok {
		s.Plans--
		x.settle(k.Node)
	}
	x.dropName(x.planned, k.Module, k.Node)
	drop(x.plansOf, k.Node, k.Module)
}

// refusalNames returns the node and module of a refusal key, or the
// value's.
func refusalNames(key string, r mesh.Refusal) (node, module string) {
	if k, err := mesh.ParseRefusalKey(key); err == nil {
		return k.Node, k.Module
	}
	return r.Node, r.Module
}

func (x *index) addRefusal(key string, r mesh.Refusal) {
	node, module := refusalNames(key, r)
	x.node(node).Held++
	add(x.heldOf, node, key)
	x.addName(x.heldMod, module, key)
}

func (x *index) dropRefusal(key string, r mesh.Refusal) {
	node, module := refusalNames(key, r)
	if s, ok := x.nodes[node]; ok {
		s.Held--
		drop(x.heldOf, node, key)
		x.settle(node)
	}
	x.dropName(x.heldMod, module, key)
}

// askNode returns the node an open ask is about ("" when it is not about a
// provision key, or not open).
func askNode(r mesh.Record) (node string, open bool) {
	if r.State != mesh.RecordOpen {
		return "", false
	}
	if k, ok := strings.CutPrefix(r.Ask.About, "provision."); ok {
		if pk, err := mesh.ParseProvisionKey(k); err == nil {
			return pk.Node, true
		}
	}
	return "", true
}

func (x *index) addRecord(id string, r mesh.Record) {
	node, open := askNode(r)
	if !open {
		return
	}
	x.openAsks++
	if node != "" {
		x.node(node).Asks++
		add(x.asksOf, node, id)
	}
}

func (x *index) dropRecord(id string, r mesh.Record) {
	node, open := askNode(r)
	if !open {
		return
	}
	x.openAsks--
	if s, ok := x.nodes[node]; ok && node != "" {
		s.Asks--
		drop(x.asksOf, node, id)
		x.settle(node)
	}
}
