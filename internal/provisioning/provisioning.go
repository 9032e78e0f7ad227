// Package provisioning answers the provisioner's read-only verb
// mesh-provisioner.provisioning (spec 11): what is registered, needed,
// applied and collected, and the plans, provisions and refusals, narrowed
// by node and module (for collect also by contributor and collection);
// and the status of each node (counts of its plans and provisions per
// state, its held modules), kept counted as keys change; and which nodes'
// placement, wants and haves differ from an asker's sums of them
// (digests, kept summed as keys change: see package digest).
//
// [Answer] is the pure step: a [Request] and the buckets' keys in, a [Reply]
// out, with every key out of its bucket's shape and every value that does
// not decode listed under odd with why. [Start] answers the verb
// on the bus from watched copies of the buckets (never key by key per
// request), each followed only while requests read it.
// [DropNeeds] deletes the leftovers of the retired needs state.
package provisioning

import (
	"encoding/json"
)

// The whats a [Request] may ask for.
const (
	WhatRegistry   = "registry"
	WhatNeeds      = "needs"
	WhatApplied    = "applied"
	WhatCollect    = "collect"
	WhatPlans      = "plans"
	WhatProvisions = "provisions"
	WhatRefused    = "refused"
	// WhatStatus answers one entry per node (key the node, value a
	// [NodeStatus]): its plans, provisions per state and held modules,
	// counted as the keys change, paged by After and Reply.Next.
	WhatStatus = "status"
	// WhatDigests answers which nodes' placement, wants and haves differ
	// from the asker's: Sums gives the asker's sum of each group of nodes
	// (see package digest), Seen the last revision of each bucket it read
	// before asking; the answer has one entry per group whose sum differs
	// (key the group, three digits; value its nodes and their sums, a JSON
	// object), paged by After and Reply.Next, and the keys of no node
	// under Odd. Apply asks it to read only the nodes that differ.
	WhatDigests = "digests"
)

// Whats lists every what the verb answers, in the spec's order.
var Whats = []string{WhatRegistry, WhatNeeds, WhatApplied, WhatCollect, WhatPlans, WhatProvisions, WhatRefused, WhatStatus, WhatDigests}

// Request is the JSON body of a request on mesh-provisioner.provisioning.
// What defaults to "registry". Every other field narrows the answer when
// set: Node and Module by the key's node and module (for provisions the
// consumer, for registry the answering module, for collect the
// contributor); Contributor and Collection narrow collect by their decoded
// names.
type Request struct {
	What        string `json:"what,omitempty"`
	Node        string `json:"node,omitempty"`
	Module      string `json:"module,omitempty"`
	Contributor string `json:"contributor,omitempty"`
	Collection  string `json:"collection,omitempty"`
	// After, for status, starts the answer after this node's name (for
	// digests, after this group): the Next of the page before.
	After string `json:"after,omitempty"`
	// Sums, for digests, is the asker's sum of each group of nodes, one
	// per group ([digest.Groups]), "" for a group with no node.
	Sums []string `json:"sums,omitempty"`
	// Seen, for digests, is the last revision (stream sequence) of each of
	// mesh-controller_placement, mesh-assigner_wants and node-engine_have
	// as the asker read it: the verb answers once its copies have taken
	// every write up to it.
	Seen map[string]uint64 `json:"seen,omitempty"`
}

// Reply is the JSON body of the verb's answer. Entries and Odd are sorted
// by key and never null. Error is set, and What may be empty, when the
// request was not answered (not valid JSON, an unknown what): the verb
// never stays silent.
type Reply struct {
	What    string  `json:"what"`
	Entries []Entry `json:"entries"`
	Odd     []Odd   `json:"odd"`
	Error   string  `json:"error,omitempty"`
	// Next, for status and digests, is set when more nodes follow: ask
	// again with it as After.
	Next string `json:"next,omitempty"`
}

// Entry is one key of an answer and its value as stored (for needs, the
// item of the plan it is derived from).
type Entry struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// Odd is a key out of its bucket's shape, or whose value does not decode,
// and why.
type Odd struct {
	Key string `json:"key"`
	Why string `json:"why"`
}
