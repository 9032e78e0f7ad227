package mesh

import (
	"errors"
	"fmt"
)

// RegistryAnswer is the value at <kind> in [RegistryBucket], written by the
// seat only (spec 7): which module answers a kind of placeholder that a
// module's configuration may hold (${<kind>:<name>}), and where a client
// finds its values: either in a bucket, under a key shape, or through a verb
// asked on request and reply. Exactly one of Bucket and Verb is set; a
// secret's kind always names a verb, never a bucket.
type RegistryAnswer struct {
	// Kind is the placeholder kind, the same as the key.
	Kind string `json:"kind"`
	// Module is the module (domain) that answers the kind; "<provider>"
	// when each provider answers its own keys.
	Module string `json:"module"`
	// Bucket is the bucket that holds the values, for example
	// "mesh-provisioner_applied", or "<provider>_bound" when the bucket is
	// the provider's own.
	Bucket string `json:"bucket,omitempty"`
	// Key is the key shape in Bucket, for example "<node>.<module>".
	Key string `json:"key,omitempty"`
	// Field names the part of the value that holds the kind's values, when
	// the value holds more than one kind (for example "dirs" or "ports" of
	// an applied record).
	Field string `json:"field,omitempty"`
	// Collection is the collection a collected kind reads, as a pattern of
	// the placeholder's name: "<name>" or "<kind>[:<name>]".
	Collection string `json:"collection,omitempty"`
	// Verb is the subject a client asks on request and reply.
	Verb string `json:"verb,omitempty"`
	// About is one sentence for operators: what the kind is.
	About string `json:"about"`
}

// Check returns an error that names the first rule the answer breaks: the
// kind and module are set, exactly one of bucket and verb is set, and a
// secret is never in a bucket.
func (a RegistryAnswer) Check() error {
	switch {
	case !ValidName(a.Kind):
		return fmt.Errorf("registry: kind %q is not a valid name", a.Kind)
	case a.Module == "":
		return fmt.Errorf("registry: kind %s names no module", a.Kind)
	case a.Bucket == "" && a.Verb == "":
		return fmt.Errorf("registry: kind %s names neither a bucket nor a verb", a.Kind)
	case a.Bucket != "" && a.Verb != "":
		return fmt.Errorf("registry: kind %s names both a bucket and a verb", a.Kind)
	case a.Kind == KindSecret && a.Bucket != "":
		return errors.New("registry: a secret is never in a bucket")
	}
	return nil
}

// Placeholder kinds of the registry (spec 7).
const (
	KindConfig       = "config"
	KindSecret       = "secret"
	KindBound        = "bound"
	KindConsumers    = "consumers"
	KindCollected    = "collected"
	KindShell        = "shell"
	KindEnvironment  = "environment"
	KindContribution = "contribution"
	KindDir          = "dir"
	KindAccess       = "access"
	KindPort         = "port"
	KindSeat         = "seat"
	KindMachine      = "machine"
)
