// Package intern keeps one copy of strings that repeat across many decoded
// values, each decoded by JSON into a string of its own: the node, module,
// provider, provision and state names of provisions and their whys (the
// kit's provisions, the seat's state), and, in the seat's state, the
// closed sets other writers' values repeat (placements' module names,
// wants' and haves' fingerprints, haves' phases and healths, entries'
// states). A component that holds thousands of values keeps each such
// string once.
//
// A Table is not safe for concurrent use: each owner keeps its own, under
// its own lock.
package intern

import "github.com/mesh-provisioner/mesh-provisioner/mesh"

// Max is how many distinct strings a [Table] holds before it starts anew,
// so that a long-running owner whose names come and go never grows it
// without bound (the strings already handed out stay valid; only later
// ones are no longer shared with them).
const Max = 1 << 18

// Table keeps one copy of each string it has been given. The zero value is
// ready to use.
type Table struct {
	m    map[string]string
	refs map[mesh.Ref]*mesh.Ref
}

// String returns the table's copy of s, taking s as that copy when the
// table has none.
func (t *Table) String(s string) string {
	if s == "" {
		return ""
	}
	if c, ok := t.m[s]; ok {
		return c
	}
	if t.m == nil || len(t.m) >= Max {
		t.m = make(map[string]string)
	}
	t.m[s] = s
	return s
}

// Len returns how many strings the table holds.
func (t *Table) Len() int { return len(t.m) }

// Ref interns both names of r.
func (t *Table) Ref(r mesh.Ref) mesh.Ref {
	return mesh.Ref{Module: t.String(r.Module), Node: t.String(r.Node)}
}

// SharedRef returns the table's one shared copy of r, its names interned,
// made when the table has none: many values (provisions of one provider)
// can point at it instead of holding a Ref each. Past [Max] distinct refs
// the copies start anew (those handed out stay valid). A shared copy is
// read-only.
func (t *Table) SharedRef(r mesh.Ref) *mesh.Ref {
	if c, ok := t.refs[r]; ok {
		return c
	}
	if t.refs == nil || len(t.refs) >= Max {
		t.refs = make(map[mesh.Ref]*mesh.Ref)
	}
	c := new(mesh.Ref)
	*c = t.Ref(r)
	t.refs[*c] = c
	return c
}

// Provision interns the names of p that repeat across provisions: its
// provision and local, consumer and provider, state and why. The keys it
// depends on, its reference, ask and warrant are left as they are (mostly
// one key's own).
func (t *Table) Provision(p *mesh.Provision) {
	p.Provision = t.String(p.Provision)
	p.Local = t.String(p.Local)
	p.Consumer = t.Ref(p.Consumer)
	p.Provider = t.Ref(p.Provider)
	p.State = mesh.State(t.String(string(p.State)))
	p.Why = t.String(p.Why)
}
