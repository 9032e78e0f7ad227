package mesh

// Module is the provisioner's own module name; its states are the buckets
// named "mesh-provisioner_<state>".
const Module = "mesh-provisioner"

// VaultModule is the module that provides every credential provision.
const VaultModule = "mesh-vault"

// Buckets the provisioner reads, written by other parts of the mesh (or by
// "apply" from a mesh file).
const (
	PlacementBucket = "mesh-controller_placement" // key <node>: [Placement]
	WantsBucket     = "mesh-assigner_wants"       // key want.<node>.<module>: [Want]
	ModulesBucket   = "mesh-indexer_modules"      // key <module>: [ModuleRecord]
	ManifestsBucket = "mesh-indexer_manifests"    // key <digest token>: [ManifestRecord]
	BuildsBucket    = "mesh-builder_builds"       // key <module>.<fp>: [Build]
	HaveBucket      = "node-engine_have"          // key <node>.<module> or <node>: [Have]
)

// Buckets the provisioner keeps.
const (
	PlansBucket      = "mesh-provisioner_plans"      // key <node>.<module>: [Plan], seat only
	ProvisionsBucket = "mesh-provisioner_provisions" // key [ProvisionKey]: [Provision], seat only
	RefusedBucket    = "mesh-provisioner_refused"    // key <node>.<module>: [Refusal], seat only
	RegistryBucket   = "mesh-provisioner_registry"   // key <kind>: registry answer, seat only
	AppliedBucket    = "mesh-provisioner_applied"    // key <node>.<module>: what a client applied
	CollectBucket    = "mesh-provisioner_collect"    // key <node>.<collection>.<contributor>
	NeedsBucket      = "mesh-provisioner_needs"      // retired; leftovers deleted at start
	SeatBucket       = "mesh-provisioner_seat"       // key holder: [Lease]
	ClientsBucket    = "mesh-provisioner_clients"    // key <node>: [Lease] of the node's client (an addition to spec 2.2)
	RecordsBucket    = "mesh-asks_records"           // key <ask id>: [Record], written by the ask router
)

// AskHeader is the header of the delete marker with which the seat deletes
// a provision key retired on the operator's yes: the id of the ask that
// yes answered (an addition to spec 6). A reader of that one key learns
// which record to read for why the key is gone, with no read of every
// record.
const AskHeader = "Mesh-Ask"

// BoundBucket returns the bucket "<provider>_bound" in which a provider that
// keeps entries writes one [Entry] per provision key it answers.
func BoundBucket(provider string) string { return provider + "_bound" }

// Subjects.
const (
	// ProvisioningSubject is the read-only verb of spec section 11.
	ProvisioningSubject = "mesh-provisioner.provisioning"
	// AsksSubject is where the provisioner publishes its asks.
	AsksSubject = "asks.mesh-provisioner"
	// RetireVerb names the act an operator's warrant approves (spec 6).
	RetireVerb = "mesh-provisioner.retire"
)

// AsksSubjectOf returns "asks.<module>", where module publishes its asks.
func AsksSubjectOf(module string) string { return "asks." + module }

// HolderKey is the one key of [SeatBucket].
const HolderKey = "holder"

// UnkeepSubject is the seat's verb that clears an operator's "no" from a
// retiring key, so that the key is asked again: request [UnkeepRequest],
// reply [UnkeepReply]. Only an operator's user may publish on it.
const UnkeepSubject = "mesh-provisioner.unkeep"

// UnkeepRequest asks the seat, on [UnkeepSubject], to clear the kept
// answer of the retiring provision Key; By names the operator.
type UnkeepRequest struct {
	Key string `json:"key"`
	By  string `json:"by,omitempty"`
}

// UnkeepReply is the seat's answer: the warrant it cleared, or why it
// cleared nothing.
type UnkeepReply struct {
	Key     string   `json:"key"`
	Cleared *Warrant `json:"cleared,omitempty"`
	Error   string   `json:"error,omitempty"`
}
