// Package jsonhead reads a few top-level fields of a JSON value in one pass
// of a tokenizer (go-json-experiment's jsontext), every other field
// skipped without being decoded, for readers that must agree with what
// the whole decode, [Unmarshal], would decode: the heads of provisions
// ([HeadReader]: the provider kit's, and up's answers) and the vault's
// secrets of plans. Where a value might be read
// otherwise (a name escaped, or in another case), the caller is told, and
// decodes the value whole. [Decode] is that whole decode for readers that
// must also say a value whose names are the spec's in another case (the
// seat's).
package jsonhead

import (
	"bytes"
	"errors"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// exact is encoding/json's behaviour (go-json-experiment's v1 options) with
// one change: an object's names match a field's only when spelled exactly.
var exact = json.JoinOptions(jsonv1.DefaultOptionsV1(), json.MatchCaseInsensitiveNames(false))

// Unmarshal decodes value into v as encoding/json's Unmarshal does, except
// that an object's name matches a struct field's JSON name only when it is
// that name exactly, once its escapes are undone (the spec's field names
// are exact: "Provider" or {"MODULE":..} is no provider, and such a name is
// left unread as any unknown name is). Duplicate names are let through, as
// encoding/json lets them: each is decoded in turn into the same place, so
// the last string, number or list is taken, but objects are merged
// ({"consumer":{"module":"a"},"consumer":{"node":"b"}} is consumer a on
// b). It returns an error, as encoding/json would, for a value that is not
// valid JSON or does not fit v.
func Unmarshal(value []byte, v any) error {
	return json.Unmarshal(value, v, exact)
}

// Reader holds one tokenizer, kept for reuse across reads. It is safe for
// concurrent use; reads wait for each other.
type Reader struct {
	mu  sync.Mutex
	buf bytes.Buffer
	dec *jsontext.Decoder
}

// Read calls read with a tokenizer over value. Duplicate names are let
// through the tokenizer, for read to judge (encoding/json takes the last
// of a name given twice). It returns read's error.
func (r *Reader) Read(value []byte, read func(dec *jsontext.Decoder) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dec == nil {
		r.dec = jsontext.NewDecoder(&bytes.Buffer{})
	}
	// A bytes.Buffer is read in place: the value is not copied.
	r.buf = *bytes.NewBuffer(value)
	r.dec.Reset(&r.buf, jsontext.AllowDuplicateNames(true))
	err := read(r.dec)
	r.buf = bytes.Buffer{}
	return err
}

// Names reads a list of strings from dec: null is none (nil), and a list
// is its strings (empty, not nil, when it has none, as encoding/json
// decodes it). Anything else, null in the list included, is an error.
func Names(dec *jsontext.Decoder) ([]string, error) {
	switch dec.PeekKind() {
	case 'n':
		_, err := dec.ReadToken()
		return nil, err
	case '[':
	default:
		return nil, errors.New("not a list")
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, err
	}
	names := []string{}
	for dec.PeekKind() != ']' {
		if dec.PeekKind() != '"' {
			return nil, errors.New("not a list of strings")
		}
		quoted, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		if bytes.IndexByte(quoted, '\\') < 0 {
			names = append(names, string(quoted[1:len(quoted)-1]))
			continue
		}
		name, err := jsontext.AppendUnquote(nil, quoted)
		if err != nil {
			return nil, err
		}
		names = append(names, string(name))
	}
	_, err := dec.ReadToken()
	return names, err
}

// Folds reports whether the quoted object name (as the tokenizer gives it,
// quotes included) matches one of names (unquoted) as encoding/json would
// match it: spelled exactly, escaped, or in another case. It is true for
// an exact spelling too: a reader that must tell a name not spelled
// exactly tests the exact spelling first. [Unmarshal] reads an escaped name
// as the name and ignores one in another case; a reader that meets such a
// name decodes the value whole with it, so that a value it cannot decode
// is said. A name whose escapes do not unquote is reported as folding.
func Folds(quoted []byte, names ...[]byte) bool {
	name := quoted[1 : len(quoted)-1]
	plain := true // ASCII, unescaped
	for _, c := range name {
		if c >= utf8.RuneSelf || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		// An ASCII name folds only to a name of its own length.
		same := false
		for _, n := range names {
			same = same || len(n) == len(name)
		}
		if !same {
			return false
		}
	} else if bytes.IndexByte(name, '\\') >= 0 {
		unquoted, err := jsontext.AppendUnquote(nil, quoted)
		if err != nil {
			return true
		}
		name = unquoted
	}
	for _, n := range names {
		if bytes.EqualFold(name, n) {
			return true
		}
	}
	return false
}
