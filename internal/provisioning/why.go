package provisioning

import (
	"errors"
	"fmt"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/digest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Whys of odd keys and error answers.

func whyKey(err error) string {
	var ke *mesh.KeyError
	if errors.As(err, &ke) {
		return "key out of shape: " + ke.Why
	}
	return "key out of shape: " + err.Error()
}

func whyValue(what string, err error) string {
	return fmt.Sprintf("value does not decode as %s: %v", what, err)
}

func whyNames(what string, err error) string {
	return fmt.Sprintf("value is not %s as the spec names its fields: %v", what, err)
}

func whyNotItsKey(what, says string) string {
	return fmt.Sprintf("the %s names %s, not its key", what, says)
}

func whyBadJSON(err error) string {
	return fmt.Sprintf("the request is not a JSON object of what, node, module, contributor, collection, after, sums and seen: %v", err)
}

func whyUnknownWhat(what string) string {
	return fmt.Sprintf("unknown what %q; ask for one of %v", what, Whats)
}

func whyNotReady(bucket string, wait time.Duration) string {
	return fmt.Sprintf("the verb could not read %s within %s; ask again", bucket, wait)
}

func whySums(n int) string {
	return fmt.Sprintf("a digests request gives %d sums; want one per group, %d", n, digest.Groups)
}

func whyAfterGroup(after string) string {
	return fmt.Sprintf("after %q is not a group of a digests answer (000 to %03d)", after, digest.Groups-1)
}

func whyNoNode(bucket string) string {
	return fmt.Sprintf("in %s: key out of shape: not a key of a node's placement, want or have", bucket)
}

func whyNotSummed(bucket string) string {
	return fmt.Sprintf("seen names %s, which the digests do not sum", bucket)
}

func whyBehind(bucket string, seen, want uint64, wait time.Duration) string {
	return fmt.Sprintf("the verb's copy of %s had taken revision %d, not %d, within %s; ask again", bucket, seen, want, wait)
}
