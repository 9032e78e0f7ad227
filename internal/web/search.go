package web

import (
	"sort"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A search is words: field terms (state:S, node:N, module:M, key:K) and
// plain words. It is answered from the page's index, never by reading
// every key: each term names the index sets that hold every key it can
// match (a state's keys, a node's own and those it provides, a module's,
// the keys of the names a word starts), the term whose sets are smallest
// is read, and each of its keys is kept when it meets every term. A search
// so costs what its narrowest term finds, not what the mesh holds.
//
// A plain word matches a name (a node, a module, a provision or its local
// name, a state) that starts with it, or whose part after a '-', '_' or
// '.' does: "node-004" finds node-0040 to node-0049, "0042" node-0042,
// "cache" the keys of every cache, "fail" every failed key. A key matches
// a plain word when one of its names does (its node, its consumer module,
// its provision, its provider's module or node, its state). A word with a
// '.' in it, and key:K, match the keys that start with it.

// nameKind is what a name of the search's index names.
type nameKind uint8

const (
	nodeName nameKind = iota
	moduleName
	provisionName
	stateName
)

// termRef is one term of the search's index: a name, or one of its parts
// after a separator, and the name it leads to.
type termRef struct {
	term string
	kind nameKind
	name string
}

// nameParts returns name and each of its parts that follows a '-', '_' or
// '.'.
func nameParts(name string) []string {
	out := []string{name}
	for i := 0; i < len(name)-1; i++ {
		if c := name[i]; c == '-' || c == '_' || c == '.' {
			out = append(out, name[i+1:])
		}
	}
	return out
}

// wordStarts reports whether w starts name or one of its parts.
func wordStarts(name, w string) bool {
	if strings.HasPrefix(name, w) {
		return true
	}
	for i := 0; i < len(name)-1; i++ {
		if c := name[i]; (c == '-' || c == '_' || c == '.') && strings.HasPrefix(name[i+1:], w) {
			return true
		}
	}
	return false
}

// termList returns the search's index of names, sorted by term, made
// again when a name came or went. The slice is the index's own.
func (x *index) termList() []termRef {
	if x.terms != nil {
		return x.terms
	}
	terms := []termRef{}
	put := func(kind nameKind, name string) {
		for _, t := range nameParts(name) {
			terms = append(terms, termRef{t, kind, name})
		}
	}
	for n := range x.nodes {
		put(nodeName, n)
	}
	for m := range x.byModule {
		put(moduleName, m)
	}
	for m := range x.planned {
		if _, ok := x.byModule[m]; !ok {
			put(moduleName, m)
		}
	}
	for m := range x.heldMod {
		if _, ok := x.byModule[m]; !ok && x.planned[m] == nil {
			put(moduleName, m)
		}
	}
	for p := range x.byProvision {
		put(provisionName, p)
	}
	for s := range x.byState {
		put(stateName, string(s))
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].term < terms[j].term })
	x.terms = terms
	return terms
}

// namesStarted returns the names (each once) that w starts, or one of
// whose parts it starts, of kind when only is true, else of every kind.
func (x *index) namesStarted(w string) []termRef {
	terms := x.termList()
	i := sort.Search(len(terms), func(i int) bool { return terms[i].term >= w })
	var out []termRef
	seen := map[termRef]bool{}
	for ; i < len(terms) && strings.HasPrefix(terms[i].term, w); i++ {
		r := termRef{kind: terms[i].kind, name: terms[i].name}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// setsOf returns the index sets of the keys a name names.
func (x *index) setsOf(r termRef) []keySet {
	switch r.kind {
	case nodeName:
		return []keySet{x.consumes[r.name], x.provides[r.name]}
	case moduleName:
		return []keySet{x.byModule[r.name]}
	case provisionName:
		return []keySet{x.byProvision[r.name]}
	default:
		return []keySet{x.byState[mesh.State(r.name)]}
	}
}

// keyPrefixSets returns the sets that hold every key starting with k: the
// own keys of the node k names before its first '.', or of every node k
// starts.
func (x *index) keyPrefixSets(k string) []keySet {
	if node, _, ok := strings.Cut(k, "."); ok {
		return []keySet{x.consumes[node]}
	}
	nodes := x.nodeNames()
	var out []keySet
	for i := sort.SearchStrings(nodes, k); i < len(nodes) && strings.HasPrefix(nodes[i], k); i++ {
		out = append(out, x.consumes[nodes[i]])
	}
	return out
}

// termSets returns the index sets that hold every key t can match.
func (x *index) termSets(t term) []keySet {
	switch t.field {
	case "state":
		return []keySet{x.byState[mesh.State(t.value)]}
	case "node":
		return []keySet{x.consumes[t.value], x.provides[t.value]}
	case "module":
		return []keySet{x.byModule[t.value]}
	case "key":
		return x.keyPrefixSets(t.value)
	}
	if strings.Contains(t.value, ".") {
		return x.keyPrefixSets(t.value)
	}
	var out []keySet
	for _, r := range x.namesStarted(t.value) {
		out = append(out, x.setsOf(r)...)
	}
	return out
}

// foundKeys is what a search found: how many keys, and the keys of the
// page asked for (rows From to From+len(Keys)-1, from 0, sorted).
type foundKeys struct {
	N, From int
	Keys    []string
}

// found returns the provision keys that meet every term, reading only the
// keys of the term whose index sets are smallest, and of them the page
// asked for (from 1). An answer of under an eighth of the mesh's keys is
// read from those sets and sorted; a larger one is read in the order of
// the page's sorted list of every key, so that it is never sorted anew,
// and when one field term's one set is the answer (state:, module:) its
// count is the set's and only the keys up to the page are read.
func (p *Page) found(terms []term, page int) foundKeys {
	if len(terms) == 0 {
		return foundKeys{}
	}
	var best []keySet
	var bestTerm term
	size := -1
	for _, t := range terms {
		sets := p.idx.termSets(t)
		n := 0
		for _, s := range sets {
			n += len(s)
		}
		if size < 0 || n < size {
			best, bestTerm, size = sets, t, n
		}
	}
	if size*8 >= len(p.provs) && size > PageSize {
		return p.foundInOrder(terms, best, bestTerm, page)
	}
	var keys []string
	var seen map[string]struct{} // a key in two of the sets is read once
	if len(best) > 1 {
		seen = make(map[string]struct{}, size)
	}
	for _, set := range best {
		for key := range set {
			if seen != nil {
				if _, dup := seen[key]; dup {
					continue
				}
				seen[key] = struct{}{}
			}
			p.searchRead++
			if pv, ok := p.provs[key]; ok && matches(terms, key, pv) {
				keys = append(keys, key)
			}
		}
	}
	sort.Strings(keys)
	from, to, _, _ := window(len(keys), page)
	return foundKeys{N: len(keys), From: from, Keys: keys[from:to]}
}

// foundInOrder reads a large answer in the order of every key: the keys
// of the sets that meet every term, counted, those of the page kept.
func (p *Page) foundInOrder(terms []term, sets []keySet, t term, page int) foundKeys {
	all := p.idx.provisionKeys(p.provs)
	in := func(key string) bool {
		for _, s := range sets {
			if has(s, key) {
				pv, ok := p.provs[key]
				return ok && matches(terms, key, pv)
			}
		}
		return false
	}
	if len(terms) == 1 && len(sets) == 1 && (t.field == "state" || t.field == "module") {
		// Every key of the set meets the term: the count is known, and the
		// page is read up to its last row.
		n := len(sets[0])
		from, to, _, _ := window(n, page)
		f := foundKeys{N: n, From: from}
		i := 0
		for _, key := range all {
			if i >= to {
				break
			}
			p.searchRead++
			if has(sets[0], key) {
				if i >= from {
					f.Keys = append(f.Keys, key)
				}
				i++
			}
		}
		return f
	}
	collect := func(from int) foundKeys {
		f := foundKeys{From: from}
		for _, key := range all {
			p.searchRead++
			if in(key) {
				if f.N >= from && f.N < from+PageSize {
					f.Keys = append(f.Keys, key)
				}
				f.N++
			}
		}
		return f
	}
	f := collect((max(page, 1) - 1) * PageSize)
	if from, _, _, _ := window(f.N, page); from != f.From { // past the last page: read the last
		f = collect(from)
	}
	return f
}

// foundNames returns the names of kind that every word starts (or one of
// their parts), sorted: the nodes or modules a search's plain words name.
func (x *index) foundNames(kind nameKind, words []string) []string {
	if len(words) == 0 {
		return nil
	}
	var out []string
	for _, r := range x.namesStarted(words[0]) {
		if r.kind != kind {
			continue
		}
		all := true
		for _, w := range words[1:] {
			all = all && wordStarts(r.name, w)
		}
		if all {
			out = append(out, r.name)
		}
	}
	sort.Strings(out)
	return out
}

// matches reports whether a provision meets every term.
func matches(terms []term, key string, p mesh.Provision) bool {
	node, consumer := provisionNames(key, p)
	for _, t := range terms {
		var ok bool
		switch t.field {
		case "state":
			ok = string(p.State) == t.value
		case "node":
			ok = node == t.value || p.Provider.Node == t.value
		case "module":
			ok = consumer == t.value || p.Provider.Module == t.value
		case "key":
			ok = strings.HasPrefix(key, t.value)
		default:
			if strings.Contains(t.value, ".") {
				ok = strings.HasPrefix(key, t.value)
				break
			}
			for _, name := range []string{node, consumer, p.Provision, p.Local, p.Provider.Module, p.Provider.Node, string(p.State)} {
				if name != "" && wordStarts(name, t.value) {
					ok = true
					break
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
