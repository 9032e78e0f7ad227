package kit

import (
	"fmt"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The texts the kit writes as whys or says in its log.

func whyOutOfShape(key string, err error) string {
	return fmt.Sprintf("the provision key %s is out of shape: %v", key, err)
}

func whyBadState(module string, state string) string {
	return fmt.Sprintf("the provider %s answered the state %q, which is none of provided, failed, waits", module, state)
}

const sayGone = "kit: the provision is gone without an operator's warrant: its entry stays and nothing is retired"

const sayMoved = "kit: the provision now names another provider: this entry stays and nothing is retired"

// whyRetireFailed is the why of the entry of a key whose retire on the
// operator's yes failed with err.
func whyRetireFailed(err error) string {
	return fmt.Sprintf("the removal approved with yes failed, and is tried again with backoff: %v", err)
}

// whyCut is the why of the entry of a key whose provide was still running
// when the provider self stopped and its grace ended (err: what the cut
// call returned).
func whyCut(self mesh.Ref, grace time.Duration, err error) string {
	return fmt.Sprintf("%s on %s stopped while it provided this key, and its provide did not end within its grace of %v (%v): "+
		"what it made may be half done; the provider placed next provides it again", self.Module, self.Node, grace, err)
}
