package vault

import (
	"fmt"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func whyNotCredential(module, provision string) string {
	return fmt.Sprintf("%s provides only %q provisions, not %q", module, mesh.CredentialProvision, provision)
}

func whyBadUser(user string) string {
	return fmt.Sprintf("the requester %q is not a valid module name", user)
}

func whyBadRequest(err error) string {
	return fmt.Sprintf("the request is not a JSON vault request: %v", err)
}

// whyBadRotate says a rotate request is not {"key": ..}, with err (nil for
// a request with no key).
func whyBadRotate(err error) string {
	if err != nil {
		return fmt.Sprintf(`the request is not {"key": "<credential key>"}: %v`, err)
	}
	return `the request is not {"key": "<credential key>"}`
}

// sayTorn is logged at start when the store dropped a torn record (see
// [Torn]), with its line, its bytes, the name it was for and the
// generation the store still holds for that name (0 for none).
const sayTorn = "vault: the store's last record was cut short by a write never acknowledged (a crash or a full disk) and is dropped: " +
	"the name keeps the generation it had before (a new value is issued again when it is asked for)"

// sayLost is logged when the store holds less than a credential's entry
// says was handed out (generation "published"; "held" is what the store
// holds, 0 for none): the store was lost or restored from an older copy,
// and the value the consumer and the provider hold is gone. The vault
// issues a new value at the generation after ("issued"), so that the
// entry, the provision's reference and every key that depends on it move.
const sayLost = "vault: the store holds no value of the generation this credential's entry names " +
	"(the store was lost, or restored from an older copy): a new value is issued at the next generation"

// sayMovedHere is logged once, at warn level, by a vault that started on
// an empty store while the bus's entries name credentials a vault handed
// out: mesh-vault moved here from another node without its store, or the
// store was lost. Each of those keys is then said with sayLost.
const sayMovedHere = "vault: this vault started on an empty store, but the bus's entries name credentials a vault handed out: " +
	"if mesh-vault moved here from another node, its store did not move with it, and every such credential is issued anew at its next generation " +
	"(its provider sets the new value, its consumer's client renders it). A move keeps the values only when the operator hands the new node the old one's store " +
	"before the vault starts there: stop the old vault, copy its data directory (vault.store, with vault.key or the file its --key-file names) " +
	"to the new node's, then start the vault there"

func whyNotYours(who, module string) string {
	return fmt.Sprintf("the user %q asked for the values of %q: only the module itself and the clients of its nodes are answered", who, module)
}

func whyOtherNode(who, node string) string {
	return fmt.Sprintf("the user %q asked for the values of node %q: a node's client is answered its own node's values only", who, node)
}

func whyTooMany(who string) string {
	return fmt.Sprintf("the user %q has too many requests waiting already: its requests past them are dropped, not answered (ask again once they are answered)", who)
}

// whyRotating is the why of a credential's entry while its rotation to
// generation to is not in force: what consumer's node has applied (its
// applied record's generation of the credential, 0 for none) and when the
// rotation comes in force (until, the grace's end, said in UTC).
func whyRotating(to int64, consumer mesh.NodeModule, applied int64, until time.Time) string {
	has := "has applied no generation of it"
	if applied > 0 {
		has = fmt.Sprintf("has applied generation %d", applied)
	}
	return fmt.Sprintf("rotated to generation %d, not in force yet: %s on %s %s; in force once it applies %d or at %s",
		to, consumer.Module, consumer.Node, has, to, until.UTC().Format(time.RFC3339))
}
