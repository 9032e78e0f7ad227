// Package vault is mesh-vault, the component that provides every credential
// provision of a mesh, built on the provider kit (package kit).
//
// For each needed provision "credential" whose provider is mesh-vault on
// its node (keys <node>.<consumer>.credential.<provider>_<provision>[_<local>])
// it generates a strong random value (32 bytes from crypto/rand), keeps it
// sealed at rest in a [Store] of its own (the files vault.key and
// vault.store in its data directory; the key file is created with mode 0600
// on first start), and writes its entry in "mesh-vault_bound" with the vault
// name (the key itself) and the generation (1, then +1 per rotation). A
// credential retired on the operator's "yes" is forgotten.
//
// Values never go into a bucket. They are answered on request only, on
// subjects that end in the asker's bus user name, which the bus
// permissions pin to that user (the server's Nats-Request-Info header must
// name the same: bus.Answerer.SentBy); the module asks as itself, a node's
// client as "client-<node>" and is answered that node's values only:
//
//   - "mesh-vault.secret.<module>.<asker>": the module's own credentials (those
//     whose consumer it is, and those its provisions depend on, such as a
//     shared credential of its provider) and its own secrets (the names its
//     plans list, generated on first ask, vault name
//     "<node>.<module>.secret.<name>");
//   - "mesh-vault.consumers.<provider>.<asker>": the credentials that
//     provisions whose provider is <provider> depend on, that is its
//     consumers' credentials;
//   - "mesh-vault.rotate": a new value for a credential at the next
//     generation; its entry is written again, so that the seat carries the
//     new generation into the provision's reference and providers follow.
//
// The request and answer shapes are kit.VaultRequest, kit.VaultAnswer,
// kit.RotateRequest and kit.RotateAnswer.
package vault
