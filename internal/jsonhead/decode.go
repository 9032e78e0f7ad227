package jsonhead

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// strict is [Unmarshal]'s decode with unknown names refused, and errors
// reported at once (v2's, not encoding/json's): a value with none (every
// value the mesh's own writers write) is decoded in one pass.
var strict = json.JoinOptions(exact, json.RejectUnknownMembers(true), jsonv1.ReportErrorsWithLegacySemantics(false))

// NameError is returned by [Decode] for a value that has an object name
// that is none of the names of its place in v's type exactly, but is one of
// them in another case (as encoding/json would match it): "STATE" where the
// spec's name is "state". Path is the name's place in the value, as a JSON
// pointer (RFC 6901) of the object that holds it ("" for the top, or
// "/consumer"); Name is the name as written (its escapes undone) and Field
// the spec's name it folds to.
type NameError struct {
	Path, Name, Field string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("the name %q%s is not the spec's %q (names are exact)", e.Name, where(e.Path), e.Field)
}

func where(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path
}

// Decode sets what v points to to its zero value, then decodes value into
// it as [Unmarshal] does (the spec's names matched exactly, any other name
// left unread), and says whether a name was left
// unread that is one of v's names in another case. It returns an error, as
// Unmarshal would, for a value that is not valid JSON or does not fit v
// (what v holds then is as Unmarshal leaves it); else, when a name of the
// value folds to one of v's without being it, a *[NameError] for the first
// such name, v holding the value decoded exactly; else nil. v must be a
// non-nil pointer.
//
// A value whose names are all v's (at every depth) is decoded in one pass,
// at Unmarshal's cost. One with any other name is decoded a second time,
// and its names read once more to find one that folds.
func Decode(value []byte, v any) error {
	rv := reflect.ValueOf(v).Elem()
	rv.SetZero()
	if json.Unmarshal(value, v, strict) == nil {
		return nil
	}
	// An unknown name, or a value that does not decode: decode again,
	// letting unknown names through (and with encoding/json's errors), into
	// v zeroed again (the first decode stopped part of the way).
	rv.SetZero()
	if err := json.Unmarshal(value, v, exact); err != nil {
		return err
	}
	dec := jsontext.NewDecoder(bytes.NewReader(value), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	return folded(dec, rv.Type(), "")
}

// folded reads the next value of dec as a value of type t and returns a
// *NameError for its first object name (at any depth) that folds to a name
// of its place in t without being it.
func folded(dec *jsontext.Decoder, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch dec.PeekKind() {
	case '{':
		if t.Kind() != reflect.Struct || unmarshals(t) {
			return dec.SkipValue()
		}
		fields := fieldsOf(t)
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for dec.PeekKind() != '}' {
			quoted, err := dec.ReadValue()
			if err != nil {
				return err
			}
			name := quoted[1 : len(quoted)-1]
			if bytes.IndexByte(name, '\\') >= 0 {
				if name, err = jsontext.AppendUnquote(nil, quoted); err != nil {
					// Invalid UTF-8 escaped: read as U+FFFD, so no
					// name of the spec's.
					if err := dec.SkipValue(); err != nil {
						return err
					}
					continue
				}
			}
			if ft, ok := fields.types[string(name)]; ok {
				if err := folded(dec, ft, path+"/"+pointerToken(string(name))); err != nil {
					return err
				}
				continue
			}
			for _, f := range fields.names {
				if bytes.EqualFold(name, []byte(f)) {
					return &NameError{Path: path, Name: string(name), Field: f}
				}
			}
			if err := dec.SkipValue(); err != nil {
				return err
			}
		}
		_, err := dec.ReadToken()
		return err
	case '[':
		if (t.Kind() != reflect.Slice && t.Kind() != reflect.Array) || unmarshals(t) {
			return dec.SkipValue()
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for i := 0; dec.PeekKind() != ']'; i++ {
			if err := folded(dec, t.Elem(), fmt.Sprintf("%s/%d", path, i)); err != nil {
				return err
			}
		}
		_, err := dec.ReadToken()
		return err
	}
	return dec.SkipValue()
}

func pointerToken(name string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

// unmarshals reports whether t (or a pointer to it) decodes itself: its
// names are its own, not fields'.
func unmarshals(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	for _, i := range []reflect.Type{
		reflect.TypeFor[json.Unmarshaler](), reflect.TypeFor[json.UnmarshalerFrom](),
		reflect.TypeFor[interface{ UnmarshalJSON([]byte) error }](),
		reflect.TypeFor[interface{ UnmarshalText([]byte) error }](),
	} {
		if t.Implements(i) || p.Implements(i) {
			return true
		}
	}
	return false
}

// fields are the JSON names of a struct type's fields, with the type of
// each.
type fields struct {
	names []string
	types map[string]reflect.Type
}

var fieldCache sync.Map // reflect.Type -> *fields

// fieldsOf returns the JSON names of struct type t as encoding/json reads
// them: a field's tag name, else its Go name; "-" left out; an embedded
// struct without a tag name inlined.
func fieldsOf(t reflect.Type) *fields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*fields)
	}
	f := &fields{types: map[string]reflect.Type{}}
	addFields(f, t)
	fieldCache.Store(t, f)
	return f
}

func addFields(f *fields, t reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := sf.Type
		if sf.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(f, ft)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, ok := f.types[name]; !ok {
			f.names = append(f.names, name)
		}
		f.types[name] = ft
	}
}
