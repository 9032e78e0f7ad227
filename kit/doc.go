// Package kit is the provider kit: what a module that keeps entries (its
// manifest's state names "bound") runs to answer the provisions the seat
// asks of it.
//
// A provider gives the kit its module name, the node it runs on, its own bus
// connection and a [Handler]. The kit then
//
//   - follows the seat's provisions (bucket "mesh-provisioner_provisions",
//     keys <node>.<consumer>.<provision>[.<local>]) as a watched copy, and
//     takes those whose provider is this module on this node: of each value
//     it first reads only the provider (and of another provider's value the
//     state, reference and depends-on, all it keeps of it, and only of a key
//     that depends on others, is provided, or is or was this provider's:
//     see [Kit.Provision]) in one pass
//     of a JSON tokenizer; a value naming this provider, or one the
//     tokenizer does not read as plain (a name escaped, or in another
//     case), is decoded whole, and one that does not decode is said in the
//     log and left out. Field names are matched exactly, as the spec writes
//     them: a value whose provider is {"MODULE":..} or "Provider" names no
//     provider, and is never this provider's;
//   - calls [Handler.Provide] for each needed key once every key in its
//     depends-on is provided (their states are read from the same copy), and
//     again whenever the reference (vault name, generation) of a key it
//     depends on changes, so that a rotated credential reaches the provider;
//   - writes the outcome as the key's [mesh.Entry] in "<module>_bound", only
//     when the entry changes, without making the handler's workers wait:
//     entries are published together, asynchronously (at most
//     [Config].Window outstanding), one key's entries in the order they were
//     made; a write the bus refuses is said and the key is provided again
//     with backoff; an entry another writer changed is provided again;
//   - turns a handler error into a failed entry whose why is the error's
//     text, and tries the key again with backoff; a waits result (the handler
//     needs a person, or a server it cannot reach) is tried again with
//     backoff too; a failed result is final until the provision changes;
//   - calls [Handler.Retire] and then deletes the entry only for a retiring
//     key whose warrant is the operator's option "yes"; a retire that fails
//     leaves the entry failed, its why the error's text, and is tried again
//     with backoff. A key whose provision
//     is gone without such a warrant is never retired: the kit says so in its
//     log and leaves the entry where it is.
//
// When its ctx is done (the provider stops, or its module is unplaced from its
// node) the kit hands on its work: it takes no new key, lets the handler
// calls in hand end within [Config].Grace (a call still running then is cut,
// and its key's entry says so), writes every outcome made as its entry, and
// then closes [Kit.Done]. The provider placed next takes over from the bus.
//
// The seat reads the entry and carries its state, why and reference into the
// provision: a provider never writes provisions.
//
// Package kit/kittest helps providers test their handler against a real
// embedded bus, with provisions and warrants written the way the seat writes
// them. docs/providers.md says how to write and test a provider.
package kit
