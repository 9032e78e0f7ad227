package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// Placement is the value at <node> in [PlacementBucket]: the modules placed
// on the node, written by the controller (or by apply).
type Placement struct {
	Modules []PlacedModule `json:"modules"`
}

// PlacedModule is one item of [Placement].
type PlacedModule struct {
	Module string `json:"module"`
}

// Want is the value at want.<node>.<module> in [WantsBucket]: the build the
// module should run there. A want with Removed set names no build.
type Want struct {
	Fingerprint string `json:"fp"`
	Removed     bool   `json:"removed"`
}

// ModuleRecord is the value at <module> in [ModulesBucket]: the digest of
// the module's manifest at the trunk (its newest).
type ModuleRecord struct {
	Manifest string `json:"manifest"`
}

// ManifestRecord is the value in [ManifestsBucket] at [ManifestKey] of the
// manifest's digest: the manifest JSON text.
type ManifestRecord struct {
	JSON string `json:"json"`
}

// Build is the value at <module>.<fp> in [BuildsBucket]: a build of a module
// and the digest of its manifest. The newest build of a module is the one
// with the latest At.
type Build struct {
	Module      string    `json:"module"`
	Fingerprint string    `json:"fp"`
	Manifest    string    `json:"manifest"`
	At          time.Time `json:"at"`
}

// Phases and healths of a [Have].
const (
	PhaseRunning  = "running"
	PhaseStarting = "starting"
	PhaseStopped  = "stopped"
	PhaseFailed   = "failed"

	HealthOK       = "ok"
	HealthDegraded = "degraded"
	HealthFailed   = "failed"
	HealthUnknown  = "unknown"
)

// Have is the value at <node>.<module> (or <node>) in [HaveBucket]: what the
// node's engine says the module runs and how it fares.
type Have struct {
	Phase       string `json:"phase"`
	Health      string `json:"health"`
	Fingerprint string `json:"fp"`
	Detail      string `json:"detail,omitempty"`
	// WrittenBy is empty in a have a node's engine writes, and
	// [HaveByMeshFile] in one an apply of a mesh file writes (for a mesh
	// with no node engines): a later apply removes the haves so marked
	// that its file no longer has, and never a have without the mark.
	WrittenBy string `json:"written-by,omitempty"`
}

// HaveByMeshFile is [Have.WrittenBy] of a have written by an apply of a
// mesh file.
const HaveByMeshFile = "mesh-file"

// Digest returns the digest of a manifest JSON text: "sha256:" and the hex
// SHA-256 of the text.
func Digest(manifestJSON []byte) string {
	sum := sha256.Sum256(manifestJSON)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ManifestKey returns the key in [ManifestsBucket] of a manifest digest: the
// digest escaped as one token ("sha256=3A<hex>").
func ManifestKey(digest string) string { return token.Escape(digest) }

// Ref names a module on a node: a provision's consumer or provider.
type Ref struct {
	Module string `json:"module"`
	Node   string `json:"node"`
}

// State is the state of a [Provision].
type State string

// The states of a provision (spec 5). Every state but Provided carries a why.
const (
	Asked    State = "asked"
	Provided State = "provided"
	Failed   State = "failed"
	Waits    State = "waits"
	Retiring State = "retiring"
)

// Credential says how an offer's consumers get their credential.
const (
	CredentialOwn    = "own"    // each consumer gets its own, from the vault
	CredentialShared = "shared" // all share the provider's one value, from the vault
	CredentialNone   = "none"   // no credential (the default)
)

// CredentialProvision is the provision name of every vault credential.
const CredentialProvision = "credential"

// Plan is the value at <node>.<module> in [PlansBucket], written by the seat
// only: everything a placed module needs on its node, at the build it is
// composed at. Its bytes are written only where they differ.
type Plan struct {
	Node        string          `json:"node"`
	Module      string          `json:"module"`
	Fingerprint string          `json:"fp"`
	Manifest    string          `json:"manifest"`
	Dirs        []Dir           `json:"dirs"`
	Ports       []Port          `json:"ports"`
	Secrets     []string        `json:"secrets"`
	Config      []string        `json:"config"`
	Contributes []Contribution  `json:"contributes"`
	Provisions  []PlanProvision `json:"provisions"`
	// Templates and Reload are the manifest's (see [Template]); absent
	// when it has none.
	Templates []Template `json:"templates,omitempty"`
	Reload    []string   `json:"reload,omitempty"`
}

// PlanProvision is one requirement of a [Plan], resolved to its provider.
type PlanProvision struct {
	Provision      string `json:"provision"`
	Local          string `json:"local"`
	Provider       string `json:"provider"` // the provider's node
	ProviderModule string `json:"provider-module"`
	Credential     string `json:"credential"`
}

// Reference is what a provided key refers to: the vault name and generation
// of its provider's entry.
type Reference struct {
	ID         string `json:"id"`
	Generation int64  `json:"generation"`
}

// Warrant is an operator's chosen option for a retiring key's ask, as the
// seat writes it into the key.
type Warrant struct {
	Ask    string    `json:"ask"`
	Option string    `json:"option"`
	By     Identity  `json:"by"`
	At     time.Time `json:"at"`
}

// Provision is the value at a [ProvisionKey] in [ProvisionsBucket], written
// by the seat only. State comes from the provider's outcome; Why says what
// it waits for whenever State is not Provided.
type Provision struct {
	Provision string     `json:"provision"`
	Local     string     `json:"local"`
	Consumer  Ref        `json:"consumer"`
	Provider  Ref        `json:"provider"`
	State     State      `json:"state"`
	Why       string     `json:"why,omitempty"`
	DependsOn []string   `json:"depends-on,omitempty"`
	Reference *Reference `json:"reference,omitempty"`
	Ask       string     `json:"ask,omitempty"`
	Warrant   *Warrant   `json:"warrant,omitempty"`
	At        time.Time  `json:"at"`
}

// Refusal is the value at <node>.<module> in [RefusedBucket], written by the
// seat only: why the module is held. Since is when the why was first said.
type Refusal struct {
	Node   string    `json:"node"`
	Module string    `json:"module"`
	Why    string    `json:"why"`
	Since  time.Time `json:"since"`
}

// Entry is a provider's outcome for one provision key, the value at that key
// in "<provider>_bound". Older providers write Refused or Waiting with no
// State; [Entry.Outcome] reads those as failed and waits.
type Entry struct {
	State      State  `json:"state,omitempty"`
	Why        string `json:"why,omitempty"`
	VaultName  string `json:"vault-name,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	Refused    string `json:"refused,omitempty"`
	// Connection says where the provided resource is reached, for a
	// consumer's configuration: for a database, "host", "port",
	// "database" and "role" (its password is the credential VaultName
	// names). Empty when the provider says nothing of it.
	Connection map[string]string `json:"connection,omitempty"`
	Waiting    string            `json:"waits,omitempty"`
	// Next, in the vault's entry of a credential rotated, is the
	// generation issued and not yet in force: the consumer's node renders
	// it first, and the entry names it as Generation (so that providers
	// set it) once that node has applied it or the rotation's grace ended.
	// 0 when none is pending. Not in spec 2.1's entry: an addition.
	Next int64 `json:"next,omitempty"`
}

// Outcome returns the entry's state and why, reading an old-style entry's
// "refused" as failed and its "waits" as waits.
func (e Entry) Outcome() (State, string) {
	switch {
	case e.State != "":
		return e.State, e.Why
	case e.Refused != "":
		return Failed, e.Refused
	case e.Waiting != "":
		return Waits, e.Waiting
	}
	return "", e.Why
}

// Lease is the value at [HolderKey] in [SeatBucket]: who holds the seat;
// and at <node> in [ClientsBucket]: which client applies the node's plans.
type Lease struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
}
