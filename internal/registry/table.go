// Package registry holds the registry of spec section 7, compiled in code:
// for each kind of placeholder a module's configuration may hold
// (${dir:state}, ${port:http}, ${secret:admin-password}, ...), the module
// that answers it and where a node's client finds its values. [Compiled] is
// the pure table; [Keep] writes it to mesh-provisioner_registry for the
// seat, at start and every hour, only where a key differs, and deletes the
// kinds that are no longer in the table.
package registry

import (
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Placeholder names in the key shapes of the table.
const (
	appliedKey = "<node>.<module>"
	collectKey = "<node>.<collection>.<contributor>"
	boundKey   = "<node>.<module>.<provision>[.<local>]"
	configKey  = "<node>.<module>.<name>"
)

// Verbs of the vault that the table names.
const (
	// SecretVerb is the vault's verb that answers a module its own secrets
	// and credentials.
	SecretVerb = "mesh-vault.secret"
	// ConsumersVerb is the vault's verb that answers a provider the
	// credentials of its consumers.
	ConsumersVerb = "mesh-vault.consumers"
)

// ConfigBucket is the bucket of mesh-config in which the configuration
// values resolved per node and module are found: key
// <node>.<module>.<name>, value {"value":"..."} (or a JSON string).
const ConfigBucket = "mesh-config_resolved"

// Compiled returns the registry compiled into this build, one answer per
// kind, in a fixed order. Every answer passes [mesh.RegistryAnswer.Check].
// The slice is new on each call; the caller may change it.
func Compiled() []mesh.RegistryAnswer {
	collect := func(kind, pattern, about string) mesh.RegistryAnswer {
		return mesh.RegistryAnswer{Kind: kind, Module: mesh.Module, Bucket: mesh.CollectBucket, Key: collectKey,
			Collection: pattern, About: about}
	}
	applied := func(kind, field, about string) mesh.RegistryAnswer {
		return mesh.RegistryAnswer{Kind: kind, Module: mesh.Module, Bucket: mesh.AppliedBucket, Key: appliedKey,
			Field: field, About: about}
	}
	return []mesh.RegistryAnswer{
		{Kind: mesh.KindConfig, Module: "mesh-config", Bucket: ConfigBucket, Key: configKey,
			About: "a configuration value of the module, as mesh-config resolved it for the module on its node"},
		{Kind: mesh.KindSecret, Module: mesh.VaultModule, Verb: SecretVerb,
			About: "a secret or credential of the module itself, asked of the vault; never kept in a bucket"},
		{Kind: mesh.KindBound, Module: "<provider>", Bucket: mesh.BoundBucket("<provider>"), Key: boundKey,
			About: "the provider's entry for one of the module's provisions (its vault name once provided)"},
		{Kind: mesh.KindConsumers, Module: mesh.VaultModule, Verb: ConsumersVerb,
			About: "the credentials of a provider's consumers, asked of the vault by the provider machine's client"},
		collect(mesh.KindCollected, "<name>", "the items of the node's collection <name>, one a line, in the order of their contributors"),
		collect(mesh.KindShell, "shell:<name>", "the items of the node's collection shell:<name> (for example shell:zsh:normal)"),
		collect(mesh.KindEnvironment, "environment[:<name>]", "the items of the node's collection environment (or environment:<name>)"),
		collect(mesh.KindContribution, "contribution:<name>", "the items of the node's collection contribution:<name>"),
		applied(mesh.KindDir, "dirs", "the absolute path of one of the module's directories on its node"),
		applied(mesh.KindAccess, "access", "an access the node's client granted the module (none is applied yet)"),
		applied(mesh.KindPort, "ports", "the number of one of the module's ports on its node, the same across restarts"),
		applied(mesh.KindSeat, "seat", "where the module sits on its node (none is applied yet)"),
		applied(mesh.KindMachine, "machine", "facts of the machine the module runs on (none are applied yet)"),
	}
}
