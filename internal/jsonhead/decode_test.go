package jsonhead

import (
	"errors"
	"reflect"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestDecode decodes values whose names are exact, unknown, escaped and in
// another case, at the top and deeper: only a name in another case is a
// *NameError, and v holds what Unmarshal decodes either way.
func TestDecode(t *testing.T) {
	for _, c := range []struct {
		name, value string
		into        func() any
		fold        *NameError // nil: no NameError
		bad         bool       // an error that is not a NameError
	}{
		{name: "exact", value: `{"state":"provided","vault-name":"x","generation":3}`, into: newEntry},
		{name: "unknown", value: `{"state":"provided","since":"then","extra":{"STATE":1}}`, into: newEntry},
		{name: "escaped", value: `{"st\u0061te":"failed","why":"w"}`, into: newEntry},
		{name: "upper", value: `{"STATE":"provided","Vault-Name":"x","Generation":3}`, into: newEntry,
			fold: &NameError{Name: "STATE", Field: "state"}},
		{name: "one of many", value: `{"state":"provided","vault-name":"x","Generation":3}`, into: newEntry,
			fold: &NameError{Name: "Generation", Field: "generation"}},
		{name: "escaped upper", value: `{"St\u0061te":"provided"}`, into: newEntry,
			fold: &NameError{Name: "State", Field: "state"}},
		{name: "kelvin", value: `{"state":"provided","connection":{"K":"v"},"WAI\u212aS":"x"}`, into: newEntry},
		{name: "inner", value: `{"provision":"p","consumer":{"Module":"gitea","node":"ace"},"at":"2026-12-01T09:41:36Z"}`,
			into: newProvision, fold: &NameError{Path: "/consumer", Name: "Module", Field: "module"}},
		{name: "in a list", value: `{"modules":[{"module":"a"},{"MODULE":"b"}]}`, into: newPlacement,
			fold: &NameError{Path: "/modules/1", Name: "MODULE", Field: "module"}},
		{name: "map keys are data", value: `{"state":"provided","connection":{"State":"x","HOST":"h"}}`, into: newEntry},
		{name: "not JSON", value: `{"state":`, into: newEntry, bad: true},
		{name: "wrong type", value: `{"state":3}`, into: newEntry, bad: true},
		{name: "wrong type after an unknown name", value: `{"x":1,"generation":"3"}`, into: newEntry, bad: true},
	} {
		got := c.into()
		err := Decode([]byte(c.value), got)
		var ne *NameError
		switch {
		case c.bad:
			if err == nil || errors.As(err, &ne) {
				t.Errorf("%s: Decode(%s) = %v; want an error of JSON, not of names", c.name, c.value, err)
			}
			continue
		case c.fold == nil && err != nil:
			t.Errorf("%s: Decode(%s) = %v; want nil", c.name, c.value, err)
		case c.fold != nil && (!errors.As(err, &ne) || *ne != *c.fold):
			t.Errorf("%s: Decode(%s) = %v; want %v", c.name, c.value, err, c.fold)
		}
		want := c.into()
		if err := Unmarshal([]byte(c.value), want); err != nil {
			t.Fatalf("%s: Unmarshal(%s) = %v", c.name, c.value, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Decode(%s) decoded %+v; want %+v (Unmarshal)", c.name, c.value, got, want)
		}
	}
}

func newEntry() any     { return &mesh.Entry{} }
func newProvision() any { return &mesh.Provision{} }
func newPlacement() any { return &mesh.Placement{} }

// TestDecodeOverAValue: a value decoded into a variable that held another
// holds only what the new one says, on the path that decodes once as on
// the one that decodes twice.
func TestDecodeOverAValue(t *testing.T) {
	for _, value := range []string{`{"why":"w"}`, `{"why":"w","other":1}`, `{"why":"w","STATE":"x"}`} {
		e := mesh.Entry{State: mesh.Provided, Generation: 4, Connection: map[string]string{"a": "b"}}
		_ = Decode([]byte(value), &e)
		if !reflect.DeepEqual(e, mesh.Entry{Why: "w"}) {
			t.Errorf("Decode(%s) over a value = %+v; want only its why", value, e)
		}
	}
}

// FuzzDecode: Decode agrees with Unmarshal on every input (the same value
// decoded, an error for the same inputs, a NameError only for one that
// decodes), into a provision (nested objects, a list, a time) and an
// entry (a map).
func FuzzDecode(f *testing.F) {
	f.Add(`{"STATE":"provided","Vault-Name":"x","Generation":3}`)
	f.Add(`{"provision":"p","consumer":{"Module":"gitea","node":"ace"},"depends-on":["a"],"at":"2026-12-01T09:41:36Z"}`)
	f.Add(`{"st\u0061te":"failed","why":"w","connection":{"K":"v"},"x":[{"a":1}]}`)
	f.Fuzz(func(t *testing.T, value string) {
		for _, into := range []func() any{newProvision, newEntry} {
			got, want := into(), into()
			err := Decode([]byte(value), got)
			werr := Unmarshal([]byte(value), want)
			var ne *NameError
			switch {
			case (err == nil) != (werr == nil) && !errors.As(err, &ne):
				t.Fatalf("Decode(%q) = %v; Unmarshal = %v", value, err, werr)
			case errors.As(err, &ne) && werr != nil:
				t.Fatalf("Decode(%q) = %v; Unmarshal = %v", value, err, werr)
			case werr == nil && !reflect.DeepEqual(got, want):
				t.Fatalf("Decode(%q) decoded %+v; Unmarshal %+v", value, got, want)
			}
		}
	})
}
