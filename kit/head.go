package kit

import (
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

// errNotPlain is wrapped by headReader.read's errors for a value it does
// not read as the kit's whole decode ([jsonhead.Unmarshal], names matched
// exactly) would decode it into a [mesh.Provision] (see
// [jsonhead.ErrNotPlain]). The caller decodes such a value whole, which
// says what is wrong with it.
var errNotPlain = jsonhead.ErrNotPlain

// errSelf says that a value names the reader's own provider (at least in
// the first provider field it has): the caller decodes it whole, which
// decides whose it is, so the rest is not read twice.
var errSelf = jsonhead.ErrSelf

// headFields are the fields of a head: all four the kit keeps.
const headFields = jsonhead.HeadProvider | jsonhead.HeadState | jsonhead.HeadReference | jsonhead.HeadDependsOn

// headReader reads heads of provision values ([jsonhead.HeadReader]: one
// pass of a tokenizer, every other field skipped, each provider value
// decoded once). It is safe for concurrent use.
type headReader struct {
	// self is the provider whose values are not read past their
	// provider (see errSelf).
	self mesh.Ref

	r jsonhead.HeadReader
}

// read returns value's head, errSelf, or an error wrapping errNotPlain. The
// tokenizer checks the syntax of the whole value (a value cut short or
// followed by more text is not plain); the fields it skips are not
// decoded, so a value whose other fields would not decode into a
// [mesh.Provision] (an "at" that is not a time) still has a head.
func (r *headReader) read(value []byte) (head, error) {
	h, err := r.r.Read(value, headFields, &r.self)
	if err != nil {
		return head{}, err
	}
	return head{provider: h.Provider, state: h.State, reference: h.Reference, dependsOn: h.DependsOn}, nil
}
