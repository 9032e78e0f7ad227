package vault

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// planReader reads the one field the vault keeps of a plan (value at
// <node>.<module> in mesh-provisioner_plans, written by the seat): its
// secrets. It reads a plan with a JSON tokenizer, in one pass, skipping
// every other field, and falls back to encoding/json for a plan it does
// not read as encoding/json would (see secrets). It is safe for
// concurrent use.
type planReader struct {
	// mu holds the one tokenizer, kept for reuse: plans are read on one
	// goroutine (the plans copy's), so it is never waited for.
	mu sync.Mutex
	d  *planDecoder
}

type planDecoder struct {
	buf bytes.Buffer
	dec *jsontext.Decoder
}

// errNotPlain says that a plan value is not one the tokenizer reads as
// encoding/json would decode it: not a syntactically valid object, its
// secrets named twice or in another case, or not a list of strings.
var errNotPlain = errors.New("vault: not a plain plan value")

// secrets returns the secrets the plan value names (none when it names
// none), or the error of encoding/json when it does not decode.
func (r *planReader) secrets(value []byte) ([]string, error) {
	r.mu.Lock()
	if r.d == nil {
		r.d = &planDecoder{dec: jsontext.NewDecoder(&bytes.Buffer{})}
	}
	d := r.d
	// A bytes.Buffer is read in place: the value is not copied.
	d.buf = *bytes.NewBuffer(value)
	d.dec.Reset(&d.buf, jsontext.AllowDuplicateNames(true))
	secrets, err := readSecrets(d.dec)
	d.buf = bytes.Buffer{}
	r.mu.Unlock()
	if err == nil {
		return secrets, nil
	}
	var p struct {
		Secrets []string `json:"secrets"`
	}
	err = json.Unmarshal(value, &p)
	return p.Secrets, err
}

// readSecrets reads the top-level object from dec and returns its
// secrets, or an error wrapping errNotPlain.
func readSecrets(dec *jsontext.Decoder) ([]string, error) {
	if dec.PeekKind() != '{' {
		return nil, errNotPlain
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, errors.Join(errNotPlain, err)
	}
	var secrets []string
	seen := false
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return nil, errors.Join(errNotPlain, err)
		}
		if string(name) != `"secrets"` {
			// encoding/json matches a name in any case, unescaped.
			if foldsToSecrets(name) {
				return nil, errNotPlain
			}
			if err := dec.SkipValue(); err != nil {
				return nil, errors.Join(errNotPlain, err)
			}
			continue
		}
		if seen {
			return nil, errNotPlain
		}
		seen = true
		if secrets, err = readNames(dec); err != nil {
			return nil, err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, errors.Join(errNotPlain, err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, errNotPlain
	}
	return secrets, nil
}

// foldsToSecrets reports whether the quoted name, not "secrets" as
// written, would be matched by encoding/json to it.
func foldsToSecrets(quoted []byte) bool {
	name := quoted[1 : len(quoted)-1]
	plain := true
	for _, c := range name {
		if c >= utf8.RuneSelf || c == '\\' {
			plain = false
			break
		}
	}
	if plain && len(name) != len("secrets") {
		return false
	}
	if bytes.IndexByte(name, '\\') >= 0 {
		unquoted, err := jsontext.AppendUnquote(nil, quoted)
		if err != nil {
			return true
		}
		name = unquoted
	}
	return bytes.EqualFold(name, []byte("secrets"))
}

// readNames reads a list of strings from dec (null is none; an empty list
// is an empty list, as encoding/json decodes it); anything else is not
// plain.
func readNames(dec *jsontext.Decoder) ([]string, error) {
	switch dec.PeekKind() {
	case 'n':
		if _, err := dec.ReadToken(); err != nil {
			return nil, errors.Join(errNotPlain, err)
		}
		return nil, nil
	case '[':
	default:
		return nil, errNotPlain
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, errors.Join(errNotPlain, err)
	}
	names := []string{}
	for dec.PeekKind() != ']' {
		if dec.PeekKind() != '"' {
			return nil, errNotPlain
		}
		quoted, err := dec.ReadValue()
		if err != nil {
			return nil, errors.Join(errNotPlain, err)
		}
		if bytes.IndexByte(quoted, '\\') < 0 {
			names = append(names, string(quoted[1:len(quoted)-1]))
			continue
		}
		name, err := jsontext.AppendUnquote(nil, quoted)
		if err != nil {
			return nil, errors.Join(errNotPlain, err)
		}
		names = append(names, string(name))
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, errors.Join(errNotPlain, err)
	}
	return names, nil
}
