package vault

import (
	"errors"
	"io"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
)

// planReader reads the one field the vault keeps of a plan (value at
// <node>.<module> in mesh-provisioner_plans, written by the seat): its
// secrets. It reads a plan with a JSON tokenizer, in one pass, skipping
// every other field, and falls back to the whole decode
// ([jsonhead.Unmarshal]: encoding/json's, with the spec's names matched
// exactly) for a plan it does not read as plain (see secrets). It is safe
// for concurrent use.
type planReader struct {
	// tok is the tokenizer, kept for reuse: plans are read on one
	// goroutine (the plans copy's), so it is never waited for.
	tok jsonhead.Reader
}

// errNotPlain says that a plan value is not one the tokenizer reads as
// the whole decode would: not a syntactically valid object, its secrets
// named twice, escaped or in another case, or not a list of strings.
var errNotPlain = errors.New("vault: not a plain plan value")

// secrets returns the secrets the plan value names (none when it names
// none, "Secrets" in another case included), or the error of the whole
// decode when it does not decode.
func (r *planReader) secrets(value []byte) ([]string, error) {
	var secrets []string
	err := r.tok.Read(value, func(dec *jsontext.Decoder) (err error) {
		secrets, err = readSecrets(dec)
		return err
	})
	if err == nil {
		return secrets, nil
	}
	var p struct {
		Secrets []string `json:"secrets"`
	}
	err = jsonhead.Unmarshal(value, &p)
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
			// An escaped name may be "secrets"; one in another case
			// is left to the whole decode too (which ignores it), so
			// that a plan that does not decode is said.
			if jsonhead.Folds(name, secretsName) {
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
		if secrets, err = jsonhead.Names(dec); err != nil {
			return nil, errors.Join(errNotPlain, err)
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

// secretsName is the one name a plan's reader reads, unquoted.
var secretsName = []byte("secrets")
