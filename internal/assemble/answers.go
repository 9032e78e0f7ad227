package assemble

import (
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// answerReader reads, of a provision value (mesh-provisioner_provisions,
// written by the seat), what [Settle.Quiet] keeps of it: the module of
// its provider and whether it is retiring. It reads the two fields with the
// provider kit's head reader ([jsonhead.HeadReader]: a tokenizer kept for
// reuse, every other field skipped, each provider value decoded once as a
// [mesh.Ref]): up follows every provision of the mesh, and encoding/json
// spent about 280 bytes on each. A value the head reader does not read
// plainly (one of the two names given twice, in another case or escaped, a
// field that does not decode, a provider whose node is not a string, text
// after the object, bytes that are not UTF-8) is decoded whole instead
// ([jsonhead.Unmarshal]), so that the answer is always what decoding into
// [mesh.Provision]'s provider and state would give. Names are matched
// exactly, as the providers' kits match them (spec 2): a provider that
// reads {"MODULE":..} names no module, and its key is none of theirs. Safe
// for concurrent use (reads wait for each other).
type answerReader struct {
	heads jsonhead.HeadReader
}

// read returns the module of the provision's provider and true when value
// decodes (as [jsonhead.Unmarshal] decodes it into the fields provider and
// state of a [mesh.Provision]) and its state is not retiring; "" and false
// otherwise.
func (r *answerReader) read(value []byte) (module string, answered bool) {
	h, err := r.heads.Read(value, jsonhead.HeadProvider|jsonhead.HeadState, nil)
	if err != nil { // jsonhead.ErrNotPlain (there is no self)
		return decodeAnswer(value)
	}
	if h.State == mesh.Retiring {
		return "", false
	}
	return h.Provider.Module, true
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
