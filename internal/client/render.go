package client

import (
	"errors"
	"fmt"
	"strings"
)

// Lookup resolves one placeholder ${kind:name} (name is empty for
// ${kind}) to its value, or returns an error that says why it cannot.
type Lookup func(kind, name string) (string, error)

// Unresolved is a placeholder that could not be resolved, and why.
type Unresolved struct {
	Placeholder string // as written, for example "${port:http}"
	Why         string
	// Waits is true when the value comes once another party writes it (a
	// provider's entry not yet provided, a key not yet written): no fault.
	Waits bool
}

// RenderError is returned by [Render] when any placeholder cannot be
// resolved: it lists every one of them (each once, in the order they first
// appear), never only the first.
type RenderError struct {
	Unresolved []Unresolved
}

// Waits is true when every unresolved placeholder waits for another
// party's write (see [Unresolved.Waits]).
func (e *RenderError) Waits() bool {
	for _, u := range e.Unresolved {
		if !u.Waits {
			return false
		}
	}
	return true
}

// Error lists every unresolved placeholder with its why on one line.
func (e *RenderError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %d placeholder(s) not resolved:", len(e.Unresolved))
	for i, u := range e.Unresolved {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s: %s", u.Placeholder, u.Why)
	}
	return b.String()
}

// Render returns template with every placeholder ${kind:name} (or ${kind})
// replaced by what lookup resolves it to. Kind is [a-z0-9-]+; name runs to
// the first "}" and may hold ":" (${shell:zsh:normal} is kind shell, name
// zsh:normal). "$$" stands for a literal "$". A placeholder is resolved
// once however often it appears. When any placeholder cannot be resolved
// (lookup fails, the kind is not a valid name, a "${" is not closed) it
// returns "" and a [*RenderError] that lists each one with why: a
// placeholder is never left blank.
func Render(template string, lookup Lookup) (string, error) {
	var out strings.Builder
	var bad []Unresolved
	seen := map[string]string{}
	failed := map[string]bool{}
	for i := 0; i < len(template); {
		c := template[i]
		if c != '$' || i+1 >= len(template) {
			out.WriteByte(c)
			i++
			continue
		}
		switch template[i+1] {
		case '$':
			out.WriteByte('$')
			i += 2
			continue
		case '{':
		default:
			out.WriteByte(c)
			i++
			continue
		}
		end := strings.IndexByte(template[i:], '}')
		if end < 0 {
			bad = append(bad, Unresolved{Placeholder: template[i:], Why: whyUnclosed})
			break
		}
		ph := template[i : i+end+1]
		i += end + 1
		if v, ok := seen[ph]; ok {
			out.WriteString(v)
			continue
		}
		if failed[ph] {
			continue
		}
		kind, name, _ := strings.Cut(ph[2:len(ph)-1], ":")
		if !validKind(kind) {
			failed[ph] = true
			bad = append(bad, Unresolved{Placeholder: ph, Why: whyBadKind(kind)})
			continue
		}
		v, err := lookup(kind, name)
		if err != nil {
			failed[ph] = true
			bad = append(bad, Unresolved{Placeholder: ph, Why: err.Error(), Waits: errors.As(err, new(waitsError))})
			continue
		}
		seen[ph] = v
		out.WriteString(v)
	}
	if len(bad) > 0 {
		return "", &RenderError{Unresolved: bad}
	}
	return out.String(), nil
}

func validKind(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
