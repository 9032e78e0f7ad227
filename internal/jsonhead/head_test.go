package jsonhead

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// headValues are provision values, as the seat writes them and odd, that
// seed FuzzHeadReader (the kit's and the cli's tables hold more).
var headValues = []string{
	`{"provision":"database","local":"","consumer":{"module":"keycloak","node":"control"},"provider":{"module":"postgres","node":"control"},"state":"asked","why":"w","depends-on":["control.keycloak.credential.postgres_database"],"at":"2026-12-01T05:25:12.856591144Z"}`,
	`{"provider":{"module":"mesh-vault","node":"control"},"state":"provided","reference":{"id":"x","generation":3}}`,
	`{"provider":{"module":"mesh-vault","node":5},"state":"provided"}`,
	`{"provider":{"module":"mesh-vault","node":{}},"state":"provided"}`,
	`{"state":"retiring","state":null}`,
	`{"provider":{"module":"mesh-vault","node":"control"},"provider":null}`,
	`{"provider":{"module":"mesh-vault","node":"control"},"provider":{}}`,
	`{"provider":{"MODULE":"mesh-vault","node":"control"},"reference":"x","depends-on":[1]}`,
	`{"Provider":{"module":"mesh-vault"},"st\u0061te":"retiring","reference":null,"reference":{}}`,
	`{"provider":{"module":"p","node":"n"}} {}`,
	`null`,
}

// headAllFields are every set of fields a HeadReader may be asked for.
var headAllFields = HeadProvider | HeadState | HeadReference | HeadDependsOn

// FuzzHeadReader checks, for every set of fields, that a head read is what
// Unmarshal decodes of the value into a struct of those fields of a
// mesh.Provision (as the kit and up's followAnswers decode it whole), and
// that a value it does not read is said not plain (or the reader's own
// provider's).
func FuzzHeadReader(f *testing.F) {
	for _, v := range headValues {
		f.Add([]byte(v))
	}
	var r HeadReader
	self := mesh.Ref{Module: "mesh-vault", Node: "control"}
	f.Fuzz(func(t *testing.T, value []byte) {
		want, werrs := decodeHead(value)
		for fields := HeadFields(0); fields <= headAllFields; fields++ {
			for _, self := range []*mesh.Ref{nil, &self} {
				h, err := r.Read(value, fields, self)
				if err != nil {
					if !errors.Is(err, ErrNotPlain) && (err != ErrSelf || self == nil) {
						t.Fatalf("Read(%q, %b, %v) = %v; want an error wrapping ErrNotPlain or ErrSelf", value, fields, self, err)
					}
					continue
				}
				for i, werr := range werrs {
					if fields&(1<<i) != 0 && werr != nil {
						t.Fatalf("Read(%q, %b, %v) = %+v, but Unmarshal does not decode it: %v", value, fields, self, h, werr)
					}
				}
				if want := headOf(want, fields); !sameHead(h, want) {
					t.Fatalf("Read(%q, %b, %v) = %+v; Unmarshal decodes %+v", value, fields, self, h, want)
				}
			}
		}
	})
}

// decodeHead decodes value's four fields with Unmarshal, each alone into a
// struct of that field (encoding/json decodes fields independently: a
// struct of several decodes when each of them does, to the same values),
// with the error of each.
func decodeHead(value []byte) (Head, [4]error) {
	var (
		h    Head
		errs [4]error
		p    struct {
			Provider mesh.Ref `json:"provider"`
		}
		s struct {
			State mesh.State `json:"state"`
		}
		ref struct {
			Reference *mesh.Reference `json:"reference"`
		}
		d struct {
			DependsOn []string `json:"depends-on"`
		}
	)
	errs[0] = Unmarshal(value, &p)
	errs[1] = Unmarshal(value, &s)
	errs[2] = Unmarshal(value, &ref)
	errs[3] = Unmarshal(value, &d)
	h.Provider, h.State, h.Reference, h.DependsOn = p.Provider, s.State, ref.Reference, d.DependsOn
	return h, errs
}

// headOf returns the fields of h a HeadReader reads.
func headOf(p Head, fields HeadFields) Head {
	var h Head
	if fields&HeadProvider != 0 {
		h.Provider = p.Provider
	}
	if fields&HeadState != 0 {
		h.State = p.State
	}
	if fields&HeadReference != 0 {
		h.Reference = p.Reference
	}
	if fields&HeadDependsOn != 0 {
		h.DependsOn = p.DependsOn
	}
	return h
}

// sameHead reports whether a and b read the same (the references by
// value; a list of no names is not none).
func sameHead(a, b Head) bool {
	return a.Provider == b.Provider && a.State == b.State &&
		(a.DependsOn == nil) == (b.DependsOn == nil) && slices.Equal(a.DependsOn, b.DependsOn) &&
		(a.Reference == nil) == (b.Reference == nil) && (a.Reference == nil || *a.Reference == *b.Reference)
}

// TestHeadReaderNotPlain checks that the values a review found read
// otherwise than Unmarshal decodes them (a node that is not a string, a
// name given twice) are said not plain.
func TestHeadReaderNotPlain(t *testing.T) {
	var r HeadReader
	for _, v := range headValues[2:7] {
		if h, err := r.Read([]byte(v), HeadProvider|HeadState, nil); !errors.Is(err, ErrNotPlain) {
			t.Errorf("Read(%s) = %+v, %v; want an error wrapping ErrNotPlain", v, h, err)
		}
	}
}

// TestHeadReaderKeepsProviders fills the providers kept to their bound and
// reads one more: it is read and kept, and the bound holds (one kept is
// let go, not all of them).
func TestHeadReaderKeepsProviders(t *testing.T) {
	var r HeadReader
	r.refs = make(map[string]mesh.Ref, refsMax)
	for i := range refsMax {
		r.refs[fmt.Sprintf(`{"module":"redis","node":"node-%05d"}`, i)] = mesh.Ref{Module: "redis", Node: fmt.Sprintf("node-%05d", i)}
	}
	h, err := r.Read([]byte(`{"provider":{"module":"redis","node":"another"},"state":"asked"}`), HeadProvider|HeadState, nil)
	if want := (mesh.Ref{Module: "redis", Node: "another"}); err != nil || h.Provider != want {
		t.Fatalf("Read = %+v, %v; want provider %+v", h, err, want)
	}
	if len(r.refs) != refsMax {
		t.Errorf("%d providers kept; want %d (the bound)", len(r.refs), refsMax)
	}
	if _, ok := r.refs[`{"module":"redis","node":"another"}`]; !ok {
		t.Errorf("the provider read last is not kept")
	}
}

// TestHeadReaderAllocations holds a plain value's provider and state, its
// provider met before, to no allocation.
func TestHeadReaderAllocations(t *testing.T) {
	var r HeadReader
	value := []byte(headValues[0])
	if _, err := r.Read(value, HeadProvider|HeadState, nil); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { r.Read(value, HeadProvider|HeadState, nil) }); n != 0 {
		t.Errorf("Read of a plain value's provider and state: %v allocations; want 0", n)
	}
}
