package pgprovider

import (
	"fmt"

	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func whyNotDatabase(provision string) string {
	return fmt.Sprintf("%s provides only %q provisions, not %q", Module, Provision, provision)
}

func whyNoCredential(key string) string {
	return fmt.Sprintf("the provision %s depends on no credential: postgres' database offer must say credential own", key)
}

func whyUnreachable(err error) string {
	return fmt.Sprintf("waits for the PostgreSQL server to be reached: %v", err)
}

func whyNoVault(err error) string {
	return fmt.Sprintf("waits for mesh-vault to answer the consumer's credential: %v", err)
}

// The whys of a role changed outside the product (see Provider.check): each
// says what changed, which credential the consumer holds, and the mend.

func whyPasswordChanged(role string, c kit.Credential) string {
	return fmt.Sprintf("postgres: the password of role %q was changed outside mesh-provisioner: it refuses the credential %s (generation %d) "+
		"handed to the consumer; it is set to that value again", role, c.Key, c.Generation)
}

func whyPasswordRemoved(role string, c kit.Credential) string {
	return fmt.Sprintf("postgres: the password of role %q was removed outside mesh-provisioner: it refuses the credential %s (generation %d) "+
		"handed to the consumer; it is set to that value again", role, c.Key, c.Generation)
}

func whyRoleNoLogin(role string, c kit.Credential) string {
	return fmt.Sprintf("postgres: role %q was made NOLOGIN outside mesh-provisioner: it refuses the credential %s (generation %d) "+
		"handed to the consumer; it is given LOGIN and that value again", role, c.Key, c.Generation)
}

func whyRoleDropped(role string, c kit.Credential) string {
	return fmt.Sprintf("postgres: role %q was dropped outside mesh-provisioner: the credential %s (generation %d) handed to the consumer "+
		"logs in no more; the role is made again with that value", role, c.Key, c.Generation)
}

func whyDatabaseDropped(name string) string {
	return fmt.Sprintf("postgres: database %q was dropped outside mesh-provisioner; it is made again, empty", name)
}

func whyLoopback(addr string, key mesh.ProvisionKey, node string) string {
	return fmt.Sprintf("postgres: the address handed to consumers, %s, is a loopback address, which %s on node %s cannot reach "+
		"(postgres runs on node %s): nothing is made for it; run postgres with --advertise HOST:PORT, an address %s reaches",
		addr, key.Consumer, key.Node, node, key.Node)
}
