package meshfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// ParseFile reads the mesh file at path and parses it with [Parse], the
// path naming it in messages. It returns the read error wrapped, or what
// Parse returns.
func ParseFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("meshfile: %w", err)
	}
	return Parse(path, data)
}

// Parse validates the mesh file text data as a whole, name naming it in
// messages. It returns the valid [File], or a [*Errors] holding every
// problem found, each with its line: a text that is not YAML, unknown keys,
// duplicate keys in any mapping, bad names, a node or module used but not
// declared, duplicates in lists, a want naming no build, a module placed
// twice on a node, a want or have of a module not placed on its node, and
// manifest fields that are unknown, of the wrong type or hold unknown
// values. Problems that do not refuse the file are in [File.Warnings].
// Parse does no I/O and never panics.
func Parse(name string, data []byte) (*File, error) {
	p := &parser{}
	f := &File{
		Name:      name,
		Placement: map[string][]string{},
		Wants:     map[string]map[string]string{},
		Haves:     map[string]map[string]mesh.Have{},
		lines:     lines{},
	}
	if root := p.document(data); root != nil {
		p.file(f, root)
	}
	if len(p.errs) == 0 {
		p.errs = f.Oversize(DefaultMaxPayload)
	}
	sortErrors(p.errs)
	sortErrors(p.warns)
	if len(p.errs) > 0 {
		return nil, &Errors{File: name, List: p.errs}
	}
	f.Warnings = p.warns
	return f, nil
}

func sortErrors(list []Error) {
	sort.SliceStable(list, func(i, j int) bool { return list[i].Line < list[j].Line })
}

// parser collects the problems of one file while it walks its YAML nodes.
type parser struct {
	errs, warns []Error
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) {
	p.errs = append(p.errs, Error{Line: line(n), Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) warnf(n *yaml.Node, format string, args ...any) {
	p.warns = append(p.warns, Error{Line: line(n), Msg: fmt.Sprintf(format, args...)})
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document decodes data into its one YAML document and returns the
// document's content, or nil after saying why there is none.
func (p *parser) document(data []byte) (root *yaml.Node) {
	defer func() {
		if r := recover(); r != nil {
			p.errs = append(p.errs, Error{Msg: fmt.Sprintf("not YAML: the decoder failed: %v", r)})
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errs = append(p.errs, Error{Msg: "the file is empty: a mesh file lists nodes, modules and placement"})
		} else {
			p.yamlError(err, data)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errf(&extra, "a second YAML document: a mesh file is one document")
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err, data)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		p.errs = append(p.errs, Error{Msg: "the file is empty: a mesh file lists nodes, modules and placement"})
		return nil
	}
	sizes := map[*yaml.Node]int{}
	if n := p.expanded(doc.Content[0], sizes); n > maxExpanded {
		p.errs = append(p.errs, Error{Msg: fmt.Sprintf("aliases expand the file to more than %d values", maxExpanded)})
		return nil
	}
	if len(p.errs) > 0 {
		return nil
	}
	return doc.Content[0]
}

// maxExpanded bounds how many values a file may hold once its aliases are
// followed, so that a few aliases cannot make the walk take forever.
const maxExpanded = 1 << 20

// expanded returns how many values n holds with its aliases followed
// (capped just above maxExpanded), saying an alias that names a node
// holding it. sizes holds the anchored nodes counted so far, -1 while one
// is being counted: only an anchored node is reached more than once (an
// alias names an anchor; any other node has its parent alone), so only
// those are remembered.
func (p *parser) expanded(n *yaml.Node, sizes map[*yaml.Node]int) int {
	if n == nil {
		return 0
	}
	if n.Anchor != "" {
		if s, ok := sizes[n]; ok {
			if s < 0 {
				p.errf(n, "an alias names a value that holds it")
				return maxExpanded + 1
			}
			return s
		}
		sizes[n] = -1
	}
	total := 1
	if n.Kind == yaml.AliasNode {
		total += p.expanded(n.Alias, sizes)
	}
	for _, c := range n.Content {
		total += p.expanded(c, sizes)
		if total > maxExpanded {
			total = maxExpanded + 1
			break
		}
	}
	if n.Anchor != "" {
		sizes[n] = total
	}
	return total
}

// parserProblems are the problems the YAML library's parser (not its
// scanner) reports: go.yaml.in/yaml/v3 names their line counted from 0
// (the line where the collection in question starts when that is not the
// first, else where the problem is found), and no line at all for one on
// the first line; its scanner's problems it names counted from 1. The two
// sets of texts are apart (parserc.go and scannerc.go); the table of
// TestParseErrors checks lines of both.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// yamlError turns the YAML library's error text about data into an Error
// with its line (counted from 1) when the text gives one, or when it is
// one of [parserProblems]; a problem found at the end of the text is at
// its last line.
func (p *parser) yamlError(err error, data []byte) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil {
			line, msg = n, m[2]
		}
	}
	if parserProblems[msg] {
		line++
	}
	if last := bytes.Count(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) + 1; line > last {
		line = last
	}
	p.errs = append(p.errs, Error{Line: line, Msg: "not YAML: " + msg})
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// kindName says what a node is, in the words of an error message.
func kindName(n *yaml.Node) string {
	if n == nil {
		return "missing"
	}
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "empty"
		case "!!bool":
			return "a boolean"
		case "!!int", "!!float":
			return "a number"
		}
		return "text"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a YAML document"
}

// pair is one key and its value in a mapping.
type pair struct {
	key  string
	k, v *yaml.Node
}

// mapping returns the pairs of the mapping n (none for an empty value),
// saying a node that is not a mapping, a key that is not text, a merge key
// and every duplicate key; a duplicate's pair is left out.
func (p *parser) mapping(n *yaml.Node, what string) []pair {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errf(n, "%s is %s; want a mapping", what, kindName(n))
		return nil
	}
	seen := map[string]int{}
	var out []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			p.errf(n.Content[i], "%s: a key is %s; want text", what, kindName(k))
			continue
		}
		if k.Tag == "!!merge" {
			p.errf(k, "%s: merge keys (<<) are not supported; write the keys out", what)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.errf(k, "%s: duplicate key %q (first at line %d)", what, k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, pair{key: k.Value, k: k, v: v})
	}
	return out
}

// object returns the fields of the mapping n by key, saying every key not
// among known.
func (p *parser) object(n *yaml.Node, what string, known ...string) map[string]*yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		p.errf(n, "%s is %s; want a mapping with %s", what, kindName(n), strings.Join(known, ", "))
		return nil
	}
	out := map[string]*yaml.Node{}
	for _, kv := range p.mapping(n, what) {
		if !contains(known, kv.key) {
			p.errf(kv.k, "%s: unknown field %q (known: %s)", what, kv.key, strings.Join(known, ", "))
			continue
		}
		out[kv.key] = kv.v
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// list returns the items of the list n (none for an empty value), saying a
// node that is not a list.
func (p *parser) list(n *yaml.Node, what string) []*yaml.Node {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errf(n, "%s is %s; want a list", what, kindName(n))
		return nil
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		out[i] = deref(c)
	}
	return out
}

// text returns the scalar n as text. Empty values (YAML null: "~",
// "null" or nothing after the colon), booleans, lists and mappings are
// said: a field that holds text holds text or is left out.
func (p *parser) text(n *yaml.Node, what string) (string, bool) {
	n = deref(n)
	if n == nil {
		p.errf(n, "%s is missing", what)
		return "", false
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		p.errf(n, "%s is empty (YAML null); want text: write it, or leave the field out", what)
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!bool" {
		p.errf(n, "%s is %s; want text", what, kindName(n))
		return "", false
	}
	return n.Value, true
}

// name returns the scalar n as a valid name (a node, module, provision,
// local, fp ... name), saying one that is not.
func (p *parser) name(n *yaml.Node, what string) (string, bool) {
	s, ok := p.text(n, what)
	if !ok {
		return "", false
	}
	if !mesh.ValidName(s) {
		p.errf(n, "%s %q is not a valid name (lower-case [a-z0-9][a-z0-9-]*)", what, s)
		return s, false
	}
	if len(s) > MaxName {
		p.errf(n, "%s %.20q... is %d bytes, longer than a name may be (%d bytes)", what, s, len(s), MaxName)
		return s, false
	}
	return s, true
}

// keyName checks a mapping key that names a node or module.
func (p *parser) keyName(kv pair, what string) bool {
	if !mesh.ValidName(kv.key) {
		p.errf(kv.k, "%s %q is not a valid name (lower-case [a-z0-9][a-z0-9-]*)", what, kv.key)
		return false
	}
	if len(kv.key) > MaxName {
		p.errf(kv.k, "%s %.20q... is %d bytes, longer than a name may be (%d bytes)", what, kv.key, len(kv.key), MaxName)
		return false
	}
	return true
}

// moduleInfo is what the checks of placement, wants and haves need of a
// declared module (declared even if its builds have problems, so that one
// problem is said once).
type moduleInfo struct {
	fps []string
}

// ref is a requirement of a manifest, checked once every module, node and
// placement is known (see meet).
type ref struct {
	n, item, provision, on *yaml.Node // its from, the item, its provision and on
	consumer, fp           string     // the module and build whose manifest requires it
	req                    mesh.Requirement
}

// file walks the top-level mapping.
func (p *parser) file(f *File, root *yaml.Node) {
	root = deref(root)
	if root.Kind != yaml.MappingNode {
		p.errf(root, "the file is %s; a mesh file is a mapping with mesh, nodes, modules, placement, wants and haves", kindName(root))
		return
	}
	sections := map[string]*yaml.Node{}
	for _, kv := range p.mapping(root, "the file") {
		switch kv.key {
		case "mesh":
			if name, ok := p.name(kv.v, "mesh name"); ok {
				f.Mesh = name
			}
		case "nodes", "modules", "placement", "wants", "haves":
			sections[kv.key] = kv.v
		default:
			p.errf(kv.k, "unknown key %q (known: mesh, nodes, modules, placement, wants, haves)", kv.key)
		}
	}
	if sections["nodes"] == nil {
		p.errf(root, "no nodes: a mesh file lists its nodes under nodes")
	}
	p.nodes(f, sections["nodes"])
	if n := sections["nodes"]; n != nil && len(f.Nodes) == 0 && len(p.errs) == 0 {
		p.errf(n, "nodes lists no node")
	}
	var refs []ref
	modules := p.modules(f, sections["modules"], &refs)
	p.placement(f, modules, sections["placement"])
	p.wants(f, modules, sections["wants"])
	p.haves(f, modules, sections["haves"])
	p.meet(f, modules, refs)
}

func (p *parser) nodes(f *File, n *yaml.Node) {
	seen := map[string]int{}
	for _, item := range p.list(n, "nodes") {
		node, ok := p.name(item, "node")
		if !ok {
			continue
		}
		if first, dup := seen[node]; dup {
			p.errf(item, "node %q listed twice (first at line %d)", node, first)
			continue
		}
		seen[node] = item.Line
		f.Nodes = append(f.Nodes, node)
		f.Placement[node] = []string{}
	}
}

// node checks a mapping key naming a node of the file.
func (p *parser) node(f *File, kv pair, section string) bool {
	if !p.keyName(kv, section+": node") {
		return false
	}
	if !f.HasNode(kv.key) {
		p.errf(kv.k, "%s: node %q is not in nodes", section, kv.key)
		return false
	}
	return true
}

func (p *parser) modules(f *File, n *yaml.Node, refs *[]ref) map[string]*moduleInfo {
	modules := map[string]*moduleInfo{}
	for _, kv := range p.mapping(n, "modules") {
		ok := p.keyName(kv, "module")
		if why := access.ReservedModule(kv.key); ok && why != "" {
			p.errf(kv.k, "module %q may not have that name: %s (each module gets a bus user of its own name)", kv.key, why)
			ok = false
		}
		info := &moduleInfo{}
		if ok {
			modules[kv.key] = info
		}
		m := Module{Name: kv.key, Line: kv.k.Line}
		what := "module " + kv.key
		fields := p.object(kv.v, what, "builds")
		if fields == nil {
			continue
		}
		if fields["builds"] == nil || isNull(fields["builds"]) {
			p.errf(kv.k, "%s has no builds", what)
			continue
		}
		items := p.list(fields["builds"], what+": builds")
		seen := map[string]int{}
		for _, item := range items {
			b, ok := p.build(kv.key, item, seen, refs)
			if b.Fingerprint != "" {
				info.fps = append(info.fps, b.Fingerprint)
			}
			if ok {
				m.Builds = append(m.Builds, b)
				f.lines.at(mesh.ModulesBucket, kv.key, kv.k.Line)
				f.lines.at(mesh.BuildsBucket, mesh.BuildKey{Module: kv.key, Fingerprint: b.Fingerprint}.String(), b.Line)
				f.lines.at(mesh.ManifestsBucket, mesh.ManifestKey(b.Digest), b.manifestLine)
			}
		}
		if len(items) == 0 && deref(fields["builds"]).Kind == yaml.SequenceNode {
			p.errf(fields["builds"], "%s has no builds", what)
		}
		f.Modules = append(f.Modules, m)
	}
	return modules
}

// build decodes one item of a module's builds. A build whose fp is good is
// returned with it even when its manifest is not, so that wants naming it
// are not said again.
func (p *parser) build(module string, item *yaml.Node, seen map[string]int, refs *[]ref) (Build, bool) {
	what := "module " + module + ": build"
	fields := p.object(item, what, "fp", "manifest")
	if fields == nil {
		return Build{}, false
	}
	b := Build{Line: item.Line}
	ok := true
	if fields["fp"] == nil {
		p.errf(item, "%s has no fp", what)
		ok = false
	} else if fp, good := p.name(fields["fp"], what+" fp"); good {
		if first, dup := seen[fp]; dup {
			p.errf(fields["fp"], "module %s: build %q listed twice (first at line %d)", module, fp, first)
			return Build{}, false
		}
		seen[fp] = fields["fp"].Line
		b.Fingerprint = fp
		b.Line = fields["fp"].Line
		what = "module " + module + " build " + fp
	} else {
		ok = false
	}
	if fields["manifest"] == nil || isNull(fields["manifest"]) {
		p.errf(item, "%s has no manifest", what)
		return b, false
	}
	from := len(*refs)
	m, good := p.manifest(module, what+": manifest", fields["manifest"], refs)
	for i := from; i < len(*refs); i++ {
		(*refs)[i].fp = b.Fingerprint
	}
	if !good || !ok {
		return b, false
	}
	text := marshal(m)
	if _, err := mesh.ParseManifest(text); err != nil {
		p.errf(fields["manifest"], "%s: %v", what, err)
		return b, false
	}
	b.Manifest, b.JSON, b.Digest = m, text, mesh.Digest(text)
	b.manifestLine = line(fields["manifest"])
	return b, true
}

func (p *parser) placement(f *File, modules map[string]*moduleInfo, n *yaml.Node) {
	for _, kv := range p.mapping(n, "placement") {
		good := p.node(f, kv, "placement")
		where := "placement of " + kv.key
		seen := map[string]int{}
		for _, item := range p.list(kv.v, where) {
			m, ok := p.name(item, where+": module")
			if !ok {
				continue
			}
			if modules[m] == nil {
				p.errf(item, "%s: module %q is not in modules", where, m)
				continue
			}
			if first, dup := seen[m]; dup {
				p.errf(item, "module %q placed twice on %s (first at line %d)", m, kv.key, first)
				continue
			}
			seen[m] = item.Line
			if good {
				f.Placement[kv.key] = append(f.Placement[kv.key], m)
				f.lines.at(mesh.PlacementBucket, kv.key, kv.k.Line)
			}
		}
	}
}

// placedModule checks a mapping key of wants or haves naming a module
// placed on node.
func (p *parser) placedModule(f *File, modules map[string]*moduleInfo, node string, goodNode bool, kv pair, what string) bool {
	if !p.keyName(kv, what+": module") {
		return false
	}
	if modules[kv.key] == nil {
		p.errf(kv.k, "%s: module %q is not in modules", what, kv.key)
		return false
	}
	if goodNode && !f.Placed(node, kv.key) {
		p.errf(kv.k, "%s: module %q is not placed on %s", what, kv.key, node)
		return false
	}
	return goodNode
}

func (p *parser) wants(f *File, modules map[string]*moduleInfo, n *yaml.Node) {
	for _, kv := range p.mapping(n, "wants") {
		good := p.node(f, kv, "wants")
		what := "wants of " + kv.key
		for _, mv := range p.mapping(kv.v, what) {
			placed := p.placedModule(f, modules, kv.key, good, mv, what)
			fp, ok := p.name(mv.v, fmt.Sprintf("%s: fp of %s", what, mv.key))
			if !ok {
				continue
			}
			if info := modules[mv.key]; info != nil && !contains(info.fps, fp) {
				p.errf(mv.v, "%s: %s wants build %q, which %s does not list (builds: %s)", what, mv.key, fp, mv.key, strings.Join(info.fps, ", "))
				continue
			}
			if placed {
				if f.Wants[kv.key] == nil {
					f.Wants[kv.key] = map[string]string{}
				}
				f.Wants[kv.key][mv.key] = fp
				f.lines.at(mesh.WantsBucket, mesh.WantKey{Node: kv.key, Module: mv.key}.String(), mv.k.Line)
			}
		}
	}
}

var (
	phases   = []string{mesh.PhaseRunning, mesh.PhaseStarting, mesh.PhaseStopped, mesh.PhaseFailed}
	healths  = []string{mesh.HealthOK, mesh.HealthDegraded, mesh.HealthFailed, mesh.HealthUnknown}
	haveKeys = []string{"phase", "health", "fp", "detail"}
)

func (p *parser) haves(f *File, modules map[string]*moduleInfo, n *yaml.Node) {
	for _, kv := range p.mapping(n, "haves") {
		good := p.node(f, kv, "haves")
		what := "haves of " + kv.key
		for _, mv := range p.mapping(kv.v, what) {
			placed := p.placedModule(f, modules, kv.key, good, mv, what)
			h, ok := p.have(mv.v, fmt.Sprintf("%s: %s", what, mv.key))
			if !ok {
				continue
			}
			if info := modules[mv.key]; info != nil && h.Fingerprint != "" && !contains(info.fps, h.Fingerprint) {
				p.warnf(mv.v, "%s: %s runs build %q, which %s does not list (builds: %s)", what, mv.key, h.Fingerprint, mv.key, strings.Join(info.fps, ", "))
			}
			if placed {
				if f.Haves[kv.key] == nil {
					f.Haves[kv.key] = map[string]mesh.Have{}
				}
				f.Haves[kv.key][mv.key] = h
				f.lines.at(mesh.HaveBucket, mesh.HaveKey{Node: kv.key, Module: mv.key}.String(), mv.k.Line)
			}
		}
	}
}

func (p *parser) have(n *yaml.Node, what string) (mesh.Have, bool) {
	before := len(p.errs)
	fields := p.object(n, what, haveKeys...)
	if fields == nil {
		return mesh.Have{}, false
	}
	var h mesh.Have
	h.Phase = p.oneOf(n, fields["phase"], what+": phase", phases, true)
	h.Health = p.oneOf(n, fields["health"], what+": health", healths, true)
	if v := fields["fp"]; v != nil {
		h.Fingerprint, _ = p.name(v, what+": fp")
	}
	if v := fields["detail"]; v != nil {
		h.Detail, _ = p.text(v, what+": detail")
	}
	return h, len(p.errs) == before
}

// oneOf returns the text of v, saying a value not among values and an
// empty one (YAML null); a missing v is said when required (at parent's
// line).
func (p *parser) oneOf(parent, v *yaml.Node, what string, values []string, required bool) string {
	if v == nil {
		if required {
			p.errf(parent, "%s is missing (one of %s)", what, strings.Join(values, ", "))
		}
		return ""
	}
	if isNull(v) {
		p.errf(v, "%s is empty (YAML null); want one of %s, or leave the field out", what, strings.Join(values, ", "))
		return ""
	}
	s, ok := p.text(v, what)
	if !ok {
		return ""
	}
	if !contains(values, s) {
		p.errf(v, "%s %q is not one of %s", what, s, strings.Join(values, ", "))
		return ""
	}
	return s
}
