package asks

import "github.com/mesh-provisioner/mesh-provisioner/mesh"

// AnswerRequest is the request on [AnswerSubject]: the id of an open ask and
// the id of the option chosen (for a retiring key, "yes" or "no").
//
// On a mesh with accounts it carries what makes the answer the operator's
// own, which the router copies into the warrant's by (see [mesh.Identity]):
// JWT, the operator's user JWT, and Sig, the signature of the chosen
// option's binds by that user's nkey ([Answer] makes both).
type AnswerRequest struct {
	Ask    string `json:"ask"`
	Option string `json:"option"`
	JWT    string `json:"jwt,omitempty"`
	Sig    string `json:"sig,omitempty"`
}

// WithdrawRequest is the request on [WithdrawSubject]: the id of an ask the
// asker raised, and why the asker withdraws it (kept in the record's
// warrant). Both are required.
type WithdrawRequest struct {
	Ask string `json:"ask"`
	Why string `json:"why"`
}

// Reply is the router's answer to an ask published as a request and to an
// [AnswerRequest] or a [WithdrawRequest]: the record as the router now holds it, or Error with its
// Code (see [RouterError]).
type Reply struct {
	Record *mesh.Record `json:"record,omitempty"`
	Error  string       `json:"error,omitempty"`
	Code   string       `json:"code,omitempty"`
}

// ListRequest is the request on [ListSubject]. State narrows the records to
// one state ("open", "answered", "expired"); empty means "open", and "all"
// lists every record.
// Ask, when set, narrows the listing to the record of that ask, in any
// state (none when it is not recorded).
type ListRequest struct {
	State string `json:"state,omitempty"`
	Ask   string `json:"ask,omitempty"`
}

// Listing is the router's answer on [ListSubject]: the records of the state
// asked for, soonest expiry first (then by id), and every key of
// mesh-asks_records whose value does not decode, with why. On an error only
// Error and Code are set.
type Listing struct {
	Records []mesh.Record `json:"records"`
	Odd     []Odd         `json:"odd,omitempty"`
	Error   string        `json:"error,omitempty"`
	Code    string        `json:"code,omitempty"`
}

// Odd is a key of mesh-asks_records that the router could not read, and why.
type Odd struct {
	Key string `json:"key"`
	Why string `json:"why"`
}
