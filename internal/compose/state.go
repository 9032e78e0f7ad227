package compose

import (
	"errors"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// State is what a composition reads: the mesh as the seat's watched copies
// hold it. Implementations must answer from memory and must not change
// while a composition runs; compose never writes through it.
//
// Methods that can meet a value that does not decode return its error, so
// that the composition can say why; a missing value is (zero, false, nil).
type State interface {
	// Placed returns the modules placed on node (mesh-controller_placement),
	// in order, and an error when the node's placement does not decode.
	Placed(node string) ([]string, error)
	// NodesOf returns the nodes module is placed on, sorted.
	NodesOf(module string) []string
	// Want returns the fingerprint that want.<node>.<module> names; a want
	// marked removed is no want.
	Want(node, module string) (fp string, ok bool, err error)
	// Have returns the have of module on node (node-engine_have).
	Have(node, module string) (mesh.Have, bool, error)
	// Build returns the build <module>.<fp> (mesh-builder_builds).
	Build(module, fp string) (mesh.Build, bool)
	// Newest returns the module's build with the latest At.
	Newest(module string) (mesh.Build, bool)
	// Trunk returns the digest of the module's trunk manifest
	// (mesh-indexer_modules).
	Trunk(module string) (string, bool)
	// Manifest returns the decoded manifest of a digest
	// (mesh-indexer_manifests), [ErrNoManifest] when none is kept, or the
	// error that decoding or validating it gave.
	Manifest(digest string) (*mesh.Manifest, error)
	// Entry returns the provider's entry at key in <provider>_bound.
	Entry(provider, key string) (mesh.Entry, bool, error)
	// Lost returns the entry the provider kept at key before it was
	// deleted or purged, and whether one is known: a lost entry reads
	// differently from one never given.
	Lost(provider, key string) (mesh.Entry, bool)
	// Provision returns the seat's provision at key
	// (mesh-provisioner_provisions).
	Provision(key string) (mesh.Provision, bool)
	// ProvisionsOf returns the provision keys whose node is node, sorted.
	// Compose reads the slices the State returns and never changes them.
	ProvisionsOf(node string) []string
	// DependentsOf returns the provision keys whose depends-on names key.
	DependentsOf(key string) []string
	// Plan returns the bytes of the plan at <node>.<module>.
	Plan(key string) ([]byte, bool)
	// PlansOf returns the plan keys of node, sorted.
	PlansOf(node string) []string
	// Refusal returns the refusal at <node>.<module>.
	Refusal(key string) (mesh.Refusal, bool)
	// RefusalsOf returns the refusal keys of node, sorted.
	RefusalsOf(node string) []string
	// Record returns the ask router's record of an ask (mesh-asks_records).
	Record(id string) (mesh.Record, bool)
}

// ErrNoManifest is returned by [State.Manifest] for a digest whose manifest
// is not kept in mesh-indexer_manifests.
var ErrNoManifest = errors.New("compose: manifest not known")
