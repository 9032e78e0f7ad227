package cli

import (
	"bytes"
	"errors"
	"io"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// answerReader reads, of a provision value (mesh-provisioner_provisions,
// written by the seat), what up's followAnswers keeps of it: the module of
// its provider and whether it is retiring. It reads the two fields with a
// tokenizer kept for reuse, every other field skipped, and decodes a
// provider value once per distinct value (the seat writes a provider the
// same way in every provision): up follows every provision of the mesh, and
// encoding/json spent about 280 bytes on each. A value the tokenizer does
// not read plainly (a name in another case or escaped, a field of another
// type, text after the object, bytes that are not UTF-8) is decoded whole
// instead ([jsonhead.Unmarshal]), so that the answer is always what
// decoding into [mesh.Provision]'s provider and state would give. Names are
// matched exactly, as the providers' kits match them (spec 2): a provider
// that reads {"MODULE":..} names no module, and its key is none of theirs.
// Not safe for concurrent use.
type answerReader struct {
	tok jsonhead.Reader
	// modules holds each provider value met, as its raw bytes, with its
	// module; at most answerModulesMax of them.
	modules map[string]string
}

// answerModulesMax bounds answerReader.modules: a mesh has a few providers,
// and values spelled otherwise start the map again.
const answerModulesMax = 64

// errNotPlain says a value is left to the whole decode.
var errNotPlain = errors.New("not a plain provision")

// The names answerReader reads, unquoted.
var answerNames = [...][]byte{[]byte("provider"), []byte("state")}

// read returns the module of the provision's provider and true when value
// decodes (as [jsonhead.Unmarshal] decodes it into the fields provider and
// state of a [mesh.Provision]) and its state is not retiring; "" and false
// otherwise.
func (r *answerReader) read(value []byte) (module string, answered bool) {
	retiring := false
	err := r.tok.Read(value, func(dec *jsontext.Decoder) error {
		if dec.PeekKind() != '{' {
			return errNotPlain
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for dec.PeekKind() != '}' {
			name, err := dec.ReadValue()
			if err != nil {
				return err
			}
			switch string(name) {
			case `"provider"`:
				v, err := dec.ReadValue()
				if err != nil {
					return err
				}
				if module, err = r.module(v); err != nil {
					return err
				}
			case `"state"`:
				v, err := dec.ReadValue()
				if err != nil {
					return err
				}
				switch {
				case string(v) == `"`+string(mesh.Retiring)+`"`:
					retiring = true
				case v.Kind() == 'n' || v.Kind() == '"' && bytes.IndexByte(v, '\\') < 0:
					retiring = false
				default: // escaped, or not a string
					return errNotPlain
				}
			default:
				if jsonhead.Folds(name, answerNames[:]...) {
					return errNotPlain
				}
				if err := dec.SkipValue(); err != nil {
					return err
				}
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		if _, err := dec.ReadToken(); err != io.EOF {
			return errNotPlain
		}
		return nil
	})
	if err != nil {
		return decodeAnswer(value)
	}
	if retiring {
		return "", false
	}
	return module, true
}

// module returns the module of a provider value, decoded once per distinct
// value.
func (r *answerReader) module(v jsontext.Value) (string, error) {
	if m, ok := r.modules[string(v)]; ok {
		return m, nil
	}
	var ref struct {
		Module string `json:"module"`
	}
	if err := jsonhead.Unmarshal(v, &ref); err != nil {
		return "", err
	}
	if r.modules == nil || len(r.modules) >= answerModulesMax {
		r.modules = map[string]string{}
	}
	r.modules[string(v)] = ref.Module
	return ref.Module, nil
}

// decodeAnswer is answerReader.read by the whole decode.
func decodeAnswer(value []byte) (module string, answered bool) {
	var p struct {
		Provider mesh.Ref   `json:"provider"`
		State    mesh.State `json:"state"`
	}
	if err := jsonhead.Unmarshal(value, &p); err != nil || p.State == mesh.Retiring {
		return "", false
	}
	return p.Provider.Module, true
}
