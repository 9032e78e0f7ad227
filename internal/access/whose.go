package access

import (
	"slices"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// operatorSubject is a subject only an operator's storage user may
// publish: a write of any key of the placement (an operator's apply).
var operatorSubject = kvSubject(mesh.PlacementBucket, AllKeys)

// IsOperator reports whether the user named user, whose storage user may
// publish the subjects publish (its user JWT's allow list), is an
// operator's: none of the product's own parties, no node's client, and
// allowed to write the placement, which only operators write. A module's
// user cannot be told from an operator's by its name alone; its
// permissions tell them apart.
func IsOperator(user string, publish []string) bool {
	return MayBeOperator(user) && slices.Contains(publish, operatorSubject)
}

// Whose says whose party the user named user is, for a message: "node ace's
// client", "the seat", "the ask router", "the vault", "an operator", "the
// module redis" or "the module postgres (a provider)"; publish is its
// storage user's allow list, as for [IsOperator].
func Whose(user string, publish []string) string {
	switch {
	case user == SeatUser:
		return "the seat"
	case user == RouterUser:
		return "the ask router"
	case user == VaultUser:
		return "the vault"
	case strings.HasPrefix(user, "client-"):
		return "node " + strings.TrimPrefix(user, "client-") + "'s client"
	case IsOperator(user, publish):
		return "an operator"
	case slices.Contains(publish, kvSubject(BoundOf(user), AllKeys)):
		return "the module " + user + ", a provider"
	}
	return "the module " + user
}

// ClientNode returns the node of a node's client's user ("client-ace":
// "ace"), and false for any other user.
func ClientNode(user string) (string, bool) {
	return strings.CutPrefix(user, "client-")
}
