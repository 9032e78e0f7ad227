package meshfile

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// manifestFields are the fields of a manifest (spec 3), in the order the
// messages list them.
var manifestFields = []string{"module", "requires", "provides", "dirs", "ports", "secrets", "config", "contributes", "state", "reads", "templates", "reload"}

// manifest decodes a manifest written in YAML into a [mesh.Manifest],
// saying every problem with its line; what names it in messages.
func (p *parser) manifest(module, what string, n *yaml.Node, refs *[]ref) (*mesh.Manifest, bool) {
	before := len(p.errs)
	n = deref(n)
	fields := p.object(n, what, manifestFields...)
	if fields == nil {
		return nil, false
	}
	m := &mesh.Manifest{}
	if v := fields["module"]; v == nil {
		p.errf(n, "%s: module is missing; want %q", what, module)
	} else if s, ok := p.name(v, what+": module"); ok && s != module {
		p.errf(v, "%s: module is %q; want %q, the name it is listed under", what, s, module)
	} else {
		m.Module = s
	}

	pairs := map[string]int{} // "provision/local" -> line, to say a requirement listed twice
	for i, item := range p.list(fields["requires"], what+": requires") {
		w := fmt.Sprintf("%s: requires[%d]", what, i)
		obj := p.object(item, w, "provision", "from", "local", "on")
		if obj == nil {
			continue
		}
		var r mesh.Requirement
		r.Provision = p.required(item, obj["provision"], w+" provision")
		r.From = p.required(item, obj["from"], w+" from")
		r.Local = p.optional(obj["local"], w+" local")
		r.On = p.optional(obj["on"], w+" on")
		id := r.Provision + "/" + r.Local
		if first, dup := pairs[id]; dup && r.Provision != "" {
			p.errf(item, "%s: %s listed twice (first at line %d); tell them apart with local", w, describe(r.Provision, r.Local), first)
		} else {
			pairs[id] = item.Line
		}
		if r.From != "" {
			*refs = append(*refs, ref{n: obj["from"], item: item, provision: obj["provision"], on: obj["on"], consumer: module, req: r})
		}
		m.Requires = append(m.Requires, r)
	}

	names := p.seen()
	for i, item := range p.list(fields["provides"], what+": provides") {
		w := fmt.Sprintf("%s: provides[%d]", what, i)
		obj := p.object(item, w, "name", "credential", "answered-by")
		if obj == nil {
			continue
		}
		var o mesh.Offer
		o.Name = p.required(item, obj["name"], w+" name")
		names(obj["name"], w, o.Name)
		o.Credential = p.oneOf(item, obj["credential"], w+" credential", []string{mesh.CredentialOwn, mesh.CredentialShared, mesh.CredentialNone}, false)
		o.AnsweredBy = p.oneOf(item, obj["answered-by"], w+" answered-by", []string{"helper"}, false)
		m.Provides = append(m.Provides, o)
	}

	names = p.seen()
	for i, item := range p.list(fields["dirs"], what+": dirs") {
		w := fmt.Sprintf("%s: dirs[%d]", what, i)
		obj := p.object(item, w, "name", "unknown")
		if obj == nil {
			continue
		}
		var d mesh.Dir
		d.Name = p.required(item, obj["name"], w+" name")
		names(obj["name"], w, d.Name)
		d.Unknown = p.oneOf(item, obj["unknown"], w+" unknown", []string{mesh.UnknownProgram, mesh.UnknownSweep}, false)
		m.Dirs = append(m.Dirs, d)
	}

	names = p.seen()
	for i, item := range p.list(fields["ports"], what+": ports") {
		w := fmt.Sprintf("%s: ports[%d]", what, i)
		obj := p.object(item, w, "name")
		if obj == nil {
			continue
		}
		pt := mesh.Port{Name: p.required(item, obj["name"], w+" name")}
		names(obj["name"], w, pt.Name)
		m.Ports = append(m.Ports, pt)
	}

	names = p.seen()
	for i, item := range p.list(fields["secrets"], what+": secrets") {
		w := fmt.Sprintf("%s: secrets[%d]", what, i)
		if s, ok := p.name(item, w); ok {
			names(item, w, s)
			m.Secrets = append(m.Secrets, s)
		}
	}

	names = p.seen()
	for i, item := range p.list(fields["config"], what+": config") {
		w := fmt.Sprintf("%s: config[%d]", what, i)
		s, ok := p.text(item, w)
		if !ok {
			continue
		}
		if s == "" {
			p.errf(item, "%s is empty; want the name of a configuration value", w)
			continue
		}
		names(item, w, s)
		m.Config = append(m.Config, s)
	}

	for i, item := range p.list(fields["contributes"], what+": contributes") {
		w := fmt.Sprintf("%s: contributes[%d]", what, i)
		obj := p.object(item, w, "collection", "item")
		if obj == nil {
			continue
		}
		var c mesh.Contribution
		if v := obj["collection"]; v == nil {
			p.errf(item, "%s collection is missing", w)
		} else if s, ok := p.text(v, w+" collection"); ok && s == "" {
			p.errf(v, "%s collection is empty", w)
		} else {
			c.Collection = s
		}
		if v := obj["item"]; v == nil {
			p.errf(item, "%s item is missing", w)
		} else {
			c.Item, _ = p.text(v, w+" item")
		}
		m.Contributes = append(m.Contributes, c)
	}

	names = p.seen()
	for i, item := range p.list(fields["state"], what+": state") {
		w := fmt.Sprintf("%s: state[%d]", what, i)
		v := item
		if item.Kind == yaml.MappingNode {
			obj := p.object(item, w, "name")
			if obj == nil {
				continue
			}
			if v = obj["name"]; v == nil {
				p.errf(item, "%s name is missing", w)
				continue
			}
		} else if item.Kind != yaml.ScalarNode {
			p.errf(item, "%s is %s; want a name or {name: ..}", w, kindName(item))
			continue
		}
		if s, ok := p.name(v, w); ok {
			names(v, w, s)
			m.State = append(m.State, mesh.StateName(s))
		}
	}

	names = p.seen()
	for i, item := range p.list(fields["reads"], what+": reads") {
		w := fmt.Sprintf("%s: reads[%d]", what, i)
		s, ok := p.text(item, w)
		if !ok {
			continue
		}
		mod, state, found := strings.Cut(s, ".")
		if !found || !mesh.ValidName(mod) || !mesh.ValidName(state) {
			p.errf(item, "%s %q is not a read <module>.<state> (such as mesh-provisioner.plans)", w, s)
			continue
		}
		names(item, w, s)
		m.Reads = append(m.Reads, s)
	}

	for i, item := range p.list(fields["templates"], what+": templates") {
		w := fmt.Sprintf("%s: templates[%d]", what, i)
		obj := p.object(item, w, "dir", "file", "text")
		if obj == nil {
			continue
		}
		var t mesh.Template
		t.Dir = p.required(item, obj["dir"], w+" dir")
		for _, f := range []struct {
			name string
			to   *string
		}{{"file", &t.File}, {"text", &t.Text}} {
			if v := obj[f.name]; v == nil {
				p.errf(item, "%s %s is missing", w, f.name)
			} else if s, ok := p.text(v, w+" "+f.name); ok && s == "" {
				p.errf(v, "%s %s is empty", w, f.name)
			} else {
				*f.to = s
			}
		}
		m.Templates = append(m.Templates, t)
	}

	for i, item := range p.list(fields["reload"], what+": reload") {
		if s, ok := p.text(item, fmt.Sprintf("%s: reload[%d]", what, i)); ok {
			m.Reload = append(m.Reload, s)
		}
	}

	if len(p.errs) > before {
		return nil, false
	}
	if err := m.Validate(); err != nil {
		p.errf(n, "%s: %v", what, err)
		return nil, false
	}
	return m, true
}

// seen returns a function that says a name listed twice in one list of a
// manifest.
func (p *parser) seen() func(n *yaml.Node, what, name string) {
	lines := map[string]int{}
	return func(n *yaml.Node, what, name string) {
		if name == "" {
			return
		}
		if first, dup := lines[name]; dup {
			p.errf(n, "%s: %q listed twice (first at line %d)", what, name, first)
			return
		}
		lines[name] = line(n)
	}
}

// required returns the name in v, saying a missing one at parent's line
// and an empty one (YAML null) at its own.
func (p *parser) required(parent, v *yaml.Node, what string) string {
	if v == nil {
		p.errf(parent, "%s is missing", what)
		return ""
	}
	s, ok := p.name(v, what)
	if !ok {
		return ""
	}
	return s
}

// optional returns the name in v, or "" when the field is left out; an
// empty one (YAML null) is said.
func (p *parser) optional(v *yaml.Node, what string) string {
	if v == nil {
		return ""
	}
	s, ok := p.name(v, what)
	if !ok {
		return ""
	}
	return s
}

// describe names a requirement in messages: "database" or "database
// (local main)".
func describe(provision, local string) string {
	if local == "" {
		return provision
	}
	return provision + " (local " + local + ")"
}
