package kit

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// head is what the kit reads of a provision value before it knows whose
// provision it is: its provider, and what the kit keeps of a provision of
// another provider (see other).
type head struct {
	provider  mesh.Ref
	state     mesh.State
	reference *mesh.Reference
	dependsOn []string
}

// errNotPlain says that a value is not one [headReader.read] reads as the
// kit's whole decode ([jsonhead.Unmarshal], names matched exactly) would
// decode it into a [mesh.Provision], or one that may not decode: it is not
// a syntactically valid JSON object, names one of the four fields twice,
// escaped or in another case, or one of them does not decode. The caller
// decodes such a value whole, which says what is wrong with it.
var errNotPlain = errors.New("kit: not a plain provision value")

// errSelf says that a value names the reader's own provider (at least in
// the first provider field it has): the caller decodes it whole, which
// decides whose it is, so the rest is not read twice.
var errSelf = errors.New("kit: a value naming the provider itself")

// The four top-level names a head reads, as the seat writes them (quoted,
// as the tokenizer hands them over).
const (
	nameProvider  = `"provider"`
	nameState     = `"state"`
	nameReference = `"reference"`
	nameDependsOn = `"depends-on"`
)

// refsMax bounds the provider values a headReader keeps decoded (the
// distinct providers of a mesh: a few per node at most); past it the
// cache starts anew.
const refsMax = 4096

// headReader reads heads of provision values with a JSON tokenizer (one
// pass over the value, every other field skipped without being decoded).
// It is safe for concurrent use.
type headReader struct {
	// self is the provider whose values are not read past their
	// provider (see errSelf).
	self mesh.Ref

	// tok is the tokenizer, kept for reuse: a kit reads its values on one
	// goroutine (its copy's), so it is never waited for.
	tok jsonhead.Reader

	mu sync.Mutex
	// refs holds each provider value met, as its raw bytes, decoded: the
	// seat writes a provider the same way in every provision, so a
	// provider costs a map lookup.
	refs map[string]mesh.Ref
}

// read returns value's head, errSelf, or an error wrapping errNotPlain. The
// tokenizer checks the syntax of the whole value (a value cut short or
// followed by more text is not plain); the fields it skips are not
// decoded, so a value whose other fields would not decode into a
// [mesh.Provision] (an "at" that is not a time) still has a head.
func (r *headReader) read(value []byte) (head, error) {
	var h head
	err := r.tok.Read(value, func(dec *jsontext.Decoder) (err error) {
		h, err = r.fields(dec)
		return err
	})
	if err == errSelf {
		return head{}, err
	}
	if err != nil {
		return head{}, errors.Join(errNotPlain, err)
	}
	return h, nil
}

// fields reads the top-level object from dec.
func (r *headReader) fields(dec *jsontext.Decoder) (head, error) {
	var h head
	if dec.PeekKind() != '{' {
		return h, errors.New("not an object")
	}
	if _, err := dec.ReadToken(); err != nil {
		return h, err
	}
	var seen [4]bool
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return h, err
		}
		field := -1
		switch string(name) {
		case nameProvider:
			field = 0
		case nameState:
			field = 1
		case nameReference:
			field = 2
		case nameDependsOn:
			field = 3
		default:
			// An escaped name may be one of the four, and one in
			// another case is a value that is not as the seat writes
			// it: both are left to the whole decode (which reads the
			// first as the name and ignores the second).
			if jsonhead.Folds(name, headNames[:]...) {
				return h, errors.New("a field name in another case or escaped")
			}
			if err := dec.SkipValue(); err != nil {
				return h, err
			}
			continue
		}
		if seen[field] {
			return h, errors.New("a field given twice")
		}
		seen[field] = true
		if field == 3 {
			if h.dependsOn, err = jsonhead.Names(dec); err != nil {
				return h, err
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return h, err
		}
		switch field {
		case 0:
			if h.provider, err = r.ref(v); err == nil && h.provider == r.self {
				return h, errSelf
			}
		case 1:
			h.state, err = readState(v)
		case 2:
			h.reference, err = readReference(v)
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

// headNames are the four names a head reads, unquoted.
var headNames = [...][]byte{[]byte("provider"), []byte("state"), []byte("reference"), []byte("depends-on")}

// refNames are the names of a provider value, unquoted.
var refNames = [...][]byte{[]byte("module"), []byte("node")}

// ref decodes a provider value, once per distinct value. A provider value
// with a name escaped or in another case ({"MODULE":..}) is an error: the
// value is decoded whole (where "MODULE" names no module: it is no
// provider's own), so that it is said if it does not decode.
func (r *headReader) ref(v jsontext.Value) (mesh.Ref, error) {
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
	if err := jsonhead.Unmarshal(v, decoded); err != nil {
		return mesh.Ref{}, err
	}
	r.mu.Lock()
	if r.refs == nil || len(r.refs) >= refsMax {
		r.refs = map[string]mesh.Ref{}
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
	err := jsonhead.Unmarshal(v, s)
	return *s, err
}

// readReference decodes a reference value (null is none) as the whole
// decode does: its names ("id", "generation") matched exactly.
func readReference(v jsontext.Value) (*mesh.Reference, error) {
	if string(v) == "null" {
		return nil, nil
	}
	ref := new(mesh.Reference)
	err := jsonhead.Unmarshal(v, ref)
	return ref, err
}

// foldedName reports whether the object v (a valid JSON value) has a
// top-level name that [jsonhead.Folds] to one of names without being
// spelled exactly so. A value that is
// not an object has none. It is called once per distinct provider value
// (see ref), so its tokenizer is not kept.
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
		if jsonhead.Folds(name, names...) && !spelled(name, names) {
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
