package jsonhead

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Head is what a [HeadReader] reads of a provision value (a value of
// mesh-provisioner_provisions, written by the seat): the fields of a
// [mesh.Provision] it was asked for, each as [Unmarshal] would decode it
// into a Provision; a field not asked for, or not in the value, is zero.
type Head struct {
	Provider  mesh.Ref
	State     mesh.State
	Reference *mesh.Reference
	DependsOn []string
}

// HeadFields is a set of the fields of a [Head], to read.
type HeadFields uint8

// The fields a [HeadReader] may read: "provider", "state", "reference" and
// "depends-on".
const (
	HeadProvider HeadFields = 1 << iota
	HeadState
	HeadReference
	HeadDependsOn
)

// ErrNotPlain is wrapped by the errors of [HeadReader.Read] for a value it
// does not read as [Unmarshal] would decode it into a [mesh.Provision], or
// one that may not decode: it is not a syntactically valid JSON object
// (bytes that are not UTF-8 included), names one of the fields read twice
// (Unmarshal merges them), escaped or in another case, or one of those
// fields does not decode. The caller decodes such a value whole, which says
// what is wrong with it.
var ErrNotPlain = errors.New("jsonhead: not a plain provision value")

// ErrSelf is returned by [HeadReader.Read] for a value whose provider (the
// first provider field it has) is the self it was given: the caller
// decodes it whole, which decides whose it is, so that the rest of it is
// not read twice.
var ErrSelf = errors.New("jsonhead: a value naming the provider itself")

// The names a head reads, as the seat writes them (quoted, as the
// tokenizer hands them over), in the order of HeadFields' bits.
var headQuoted = [...]string{`"provider"`, `"state"`, `"reference"`, `"depends-on"`}

// headNames are the names a head reads, unquoted, in the same order.
var headNames = [...][]byte{[]byte("provider"), []byte("state"), []byte("reference"), []byte("depends-on")}

// refNames are the names of a provider value, unquoted.
var refNames = [...][]byte{[]byte("module"), []byte("node")}

// refsMax bounds the provider values a HeadReader keeps decoded. The seat
// writes a provider the same way in every provision, so there are as many
// as the mesh has providers placed: a provider placed on every node of a
// mesh of 10 000 nodes is 10 000 of them. Past the bound, one value kept
// is let go for each new one (so a mesh with more still finds most of its
// providers kept).
const refsMax = 1 << 16

// HeadReader reads heads of provision values with a JSON tokenizer (one
// pass over the value, every other field skipped without being decoded),
// for readers that keep a few fields of every provision (the provider
// kit, up's followAnswers) and must agree with what [Unmarshal] would
// decode. Its zero value is ready to use; it is safe for concurrent use
// (reads wait for each other).
type HeadReader struct {
	// tok is the tokenizer, kept for reuse.
	tok Reader

	mu sync.Mutex
	// refs holds each provider value met, as its raw bytes, decoded, so
	// that a provider met before costs a map lookup and no allocation.
	refs map[string]mesh.Ref
}

// Read returns the fields of value's head, or an error wrapping
// [ErrNotPlain], or [ErrSelf] when self is not nil and is the value's
// provider. The tokenizer checks the syntax of the whole value (a value
// cut short or followed by more text is not plain); the fields not read
// are not decoded, so a value whose other fields would not decode into a
// [mesh.Provision] (an "at" that is not a time) still has a head. A value
// read without an error is read as [Unmarshal] would decode it; a caller
// that meets an error decodes the value whole.
func (r *HeadReader) Read(value []byte, fields HeadFields, self *mesh.Ref) (Head, error) {
	var h Head
	err := r.tok.Read(value, func(dec *jsontext.Decoder) (err error) {
		h, err = r.fields(dec, fields, self)
		return err
	})
	if err == ErrSelf {
		return Head{}, err
	}
	if err != nil {
		return Head{}, errors.Join(ErrNotPlain, err)
	}
	return h, nil
}

// fields reads the top-level object from dec.
func (r *HeadReader) fields(dec *jsontext.Decoder, fields HeadFields, self *mesh.Ref) (Head, error) {
	var h Head
	if dec.PeekKind() != '{' {
		return h, errors.New("not an object")
	}
	if _, err := dec.ReadToken(); err != nil {
		return h, err
	}
	var seen HeadFields
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return h, err
		}
		field := HeadFields(0)
		for i, q := range headQuoted {
			if string(name) == q {
				field = 1 << i
				break
			}
		}
		if field&fields == 0 {
			// An escaped name may be one of the fields read, and one in
			// another case is a value that is not as the seat writes
			// it: both are left to the whole decode (which reads the
			// first as the name and ignores the second).
			if folds(name, fields) {
				return h, errors.New("a field name in another case or escaped")
			}
			if err := dec.SkipValue(); err != nil {
				return h, err
			}
			continue
		}
		if seen&field != 0 {
			return h, errors.New("a field given twice")
		}
		seen |= field
		if field == HeadDependsOn {
			if h.DependsOn, err = Names(dec); err != nil {
				return h, err
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return h, err
		}
		switch field {
		case HeadProvider:
			if h.Provider, err = r.ref(v); err == nil && self != nil && h.Provider == *self {
				return h, ErrSelf
			}
		case HeadState:
			h.State, err = readState(v)
		case HeadReference:
			h.Reference, err = readReference(v)
		}
		if err != nil {
			return h, err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return h, err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return h, errors.New("text after the object")
	}
	return h, nil
}

// folds reports whether the quoted name [Folds] to one of the names of
// fields.
func folds(quoted []byte, fields HeadFields) bool {
	if fields == HeadProvider|HeadState|HeadReference|HeadDependsOn {
		return Folds(quoted, headNames[:]...)
	}
	for i, n := range headNames {
		if fields&(1<<i) != 0 && Folds(quoted, n) {
			return true
		}
	}
	return false
}

// ref decodes a provider value, once per distinct value. A provider value
// with a name escaped or in another case ({"MODULE":..}) is an error: the
// value is decoded whole (where "MODULE" names no module: it is no
// provider's own), so that it is said if it does not decode.
func (r *HeadReader) ref(v jsontext.Value) (mesh.Ref, error) {
	r.mu.Lock()
	ref, ok := r.refs[string(v)]
	r.mu.Unlock()
	if ok {
		return ref, nil
	}
	if foldedName(v, refNames[:]...) {
		return mesh.Ref{}, errors.New("a provider's name in another case or escaped")
	}
	decoded := new(mesh.Ref)
	if err := Unmarshal(v, decoded); err != nil {
		return mesh.Ref{}, err
	}
	r.mu.Lock()
	if r.refs == nil {
		r.refs = map[string]mesh.Ref{}
	}
	if len(r.refs) >= refsMax {
		for k := range r.refs { // one, the first the map yields
			delete(r.refs, k)
			break
		}
	}
	r.refs[string(v)] = *decoded
	r.mu.Unlock()
	return *decoded, nil
}

// readState decodes a state value: the spec's states without a copy, any
// other string as the whole decode does.
func readState(v jsontext.Value) (mesh.State, error) {
	for _, s := range [...]mesh.State{mesh.Asked, mesh.Provided, mesh.Failed, mesh.Waits, mesh.Retiring} {
		if len(v) == len(s)+2 && string(v[1:len(v)-1]) == string(s) && v[0] == '"' {
			return s, nil
		}
	}
	s := new(mesh.State)
	err := Unmarshal(v, s)
	return *s, err
}

// readReference decodes a reference value (null is none) as the whole
// decode does: its names ("id", "generation") matched exactly.
func readReference(v jsontext.Value) (*mesh.Reference, error) {
	if string(v) == "null" {
		return nil, nil
	}
	ref := new(mesh.Reference)
	err := Unmarshal(v, ref)
	return ref, err
}

// foldedName reports whether the object v (a valid JSON value) has a
// top-level name that [Folds] to one of names without being spelled
// exactly so. A value that is not an object has none. It is called once
// per distinct provider value (see ref), so its tokenizer is not kept.
func foldedName(v jsontext.Value, names ...[]byte) bool {
	if len(v) == 0 || v[0] != '{' {
		return false
	}
	dec := jsontext.NewDecoder(bytes.NewReader(v), jsontext.AllowDuplicateNames(true))
	if _, err := dec.ReadToken(); err != nil {
		return false
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadValue()
		if err != nil {
			return false
		}
		if Folds(name, names...) && !spelled(name, names) {
			return true
		}
		if err := dec.SkipValue(); err != nil {
			return false
		}
	}
	return false
}

// spelled reports whether quoted (a name as the tokenizer gives it) is one
// of names, quoted, exactly.
func spelled(quoted []byte, names [][]byte) bool {
	for _, n := range names {
		if len(quoted) == len(n)+2 && string(quoted[1:len(quoted)-1]) == string(n) {
			return true
		}
	}
	return false
}
