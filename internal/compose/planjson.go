package compose

import "github.com/mesh-provisioner/mesh-provisioner/mesh"

// A composition encodes every plan it composes to compare it with the
// stored plan's bytes, and most plans are said again unchanged: appendPlan
// writes the bytes of json.Marshal without reflection for the plans whose
// strings JSON writes as they are (printable ASCII but " \ < > &, which
// json.Marshal escapes); any other plan is left to encoding/json.
// TestAppendPlanIsMarshal fills every field of mesh.Plan, a field added
// later included, and compares the two.

// appendPlan appends the JSON of p, byte for byte what json.Marshal gives,
// and reports whether it could: false (and b as it was) when a string of p
// needs escaping.
func appendPlan(b []byte, p *mesh.Plan) ([]byte, bool) {
	start := len(b)
	b = append(b, `{"node":`...)
	b, ok := appendPlain(b, p.Node)
	b = append(b, `,"module":`...)
	b, ok = appendPlainAnd(b, p.Module, ok)
	b = append(b, `,"fp":`...)
	b, ok = appendPlainAnd(b, p.Fingerprint, ok)
	b = append(b, `,"manifest":`...)
	b, ok = appendPlainAnd(b, p.Manifest, ok)
	b = append(b, `,"dirs":`...)
	if p.Dirs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, d := range p.Dirs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b, ok = appendPlainAnd(b, d.Name, ok)
			if d.Unknown != "" {
				b = append(b, `,"unknown":`...)
				b, ok = appendPlainAnd(b, d.Unknown, ok)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"ports":`...)
	if p.Ports == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, port := range p.Ports {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b, ok = appendPlainAnd(b, port.Name, ok)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"secrets":`...)
	b, ok = appendPlainList(b, p.Secrets, ok)
	b = append(b, `,"config":`...)
	b, ok = appendPlainList(b, p.Config, ok)
	b = append(b, `,"contributes":`...)
	if p.Contributes == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, c := range p.Contributes {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"collection":`...)
			b, ok = appendPlainAnd(b, c.Collection, ok)
			b = append(b, `,"item":`...)
			b, ok = appendPlainAnd(b, c.Item, ok)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"provisions":`...)
	if p.Provisions == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, pp := range p.Provisions {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"provision":`...)
			b, ok = appendPlainAnd(b, pp.Provision, ok)
			b = append(b, `,"local":`...)
			b, ok = appendPlainAnd(b, pp.Local, ok)
			b = append(b, `,"provider":`...)
			b, ok = appendPlainAnd(b, pp.Provider, ok)
			b = append(b, `,"provider-module":`...)
			b, ok = appendPlainAnd(b, pp.ProviderModule, ok)
			b = append(b, `,"credential":`...)
			b, ok = appendPlainAnd(b, pp.Credential, ok)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(p.Templates) > 0 {
		b = append(b, `,"templates":[`...)
		for i, t := range p.Templates {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"dir":`...)
			b, ok = appendPlainAnd(b, t.Dir, ok)
			b = append(b, `,"file":`...)
			b, ok = appendPlainAnd(b, t.File, ok)
			b = append(b, `,"text":`...)
			b, ok = appendPlainAnd(b, t.Text, ok)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(p.Reload) > 0 {
		b = append(b, `,"reload":`...)
		b, ok = appendPlainList(b, p.Reload, ok)
	}
	b = append(b, '}')
	if !ok {
		return b[:start], false
	}
	return b, true
}

// appendPlain appends s quoted, and reports whether JSON writes it as it
// is: printable ASCII but the five bytes json.Marshal escapes.
func appendPlain(b []byte, s string) ([]byte, bool) {
	ok := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x80, c == '"', c == '\\', c == '<', c == '>', c == '&':
			ok = false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), ok
}

// appendPlainAnd is appendPlain when ok holds so far.
func appendPlainAnd(b []byte, s string, ok bool) ([]byte, bool) {
	b, plain := appendPlain(b, s)
	return b, ok && plain
}

// appendPlainList appends a list of strings ("null" for nil).
func appendPlainList(b []byte, list []string, ok bool) ([]byte, bool) {
	if list == nil {
		return append(b, "null"...), ok
	}
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b, ok = appendPlainAnd(b, s, ok)
	}
	return append(b, ']'), ok
}
