// Package mesh holds the values that travel on a mesh's bus, the names of
// the buckets and subjects they travel on, and the shapes of their keys.
//
// It is the vocabulary of the product (SPEC.md): a seat composes a [Plan]
// per placed module and a [Provision] per requirement; a provider answers
// with an [Entry]; a key that is no longer needed is [Retiring] and its
// retirement waits on an operator's [Warrant] for an [Ask]. Field names in
// JSON are the spec's, exactly.
//
// Package mesh uses the standard library only and does no I/O.
package mesh
