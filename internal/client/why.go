package client

import (
	"fmt"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Whys of placeholders that cannot be resolved.

const whyUnclosed = `"${" is not closed by "}"`

func whyBadKind(kind string) string {
	return fmt.Sprintf("kind %q is not a valid kind ([a-z0-9-]+)", kind)
}

func whyNoKind(kind string) string {
	return fmt.Sprintf("the registry (%s) has no kind %s", mesh.RegistryBucket, kind)
}

func whyNoApplied(key string) string {
	return fmt.Sprintf("%s holds no record %s yet: the client has not applied the module's plan", mesh.AppliedBucket, key)
}

func whyNotApplied(key, field, name string) string {
	return fmt.Sprintf("%s %s holds no %s named %q", mesh.AppliedBucket, key, field, name)
}

func whyEmptyCollection(node, coll string) string {
	return fmt.Sprintf("node %s has no item in collection %q", node, coll)
}

func whyNoProvision(module, name string) string {
	return fmt.Sprintf("the plan of %s has no provision %q (write ${bound:<provision>} or ${bound:<provision>:<local>})", module, name)
}

func whyNotProvided(bucket, key string, state mesh.State, why string) string {
	return fmt.Sprintf("the entry %s in %s is %s, not provided: %s", key, bucket, state, why)
}

func whyNoVaultName(bucket, key string) string {
	return fmt.Sprintf("the entry %s in %s is provided but names no vault-name", key, bucket)
}

func whyNoValue(bucket, key string) string {
	return fmt.Sprintf("%s holds no key %s", bucket, key)
}

func whyKeyShape(shape string) string {
	return fmt.Sprintf("the registry's key shape %q names a part this client does not know", shape)
}

func whyNoVerb(verb string) string {
	return fmt.Sprintf("no way to ask the verb %s is configured (the client has no bus connection for it)", verb)
}

func whyNoName(kind string) string {
	return fmt.Sprintf("a %s placeholder needs a name: ${%s:<name>}", kind, kind)
}

func whyNotInVault(subject, name string) string {
	return fmt.Sprintf("%s answered no secret or credential named %q", subject, name)
}
