package kit

import (
	"context"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Result is a handler's outcome for one provision key; the kit writes it as
// the key's [mesh.Entry] in "<module>_bound".
type Result struct {
	// State is mesh.Provided, mesh.Failed or mesh.Waits. Any other state is
	// written as failed, saying what the handler returned.
	State mesh.State
	// Why says, for failed and waits, what was tried and what blocks it;
	// for provided it may say more (the vault's says a rotation not yet in
	// force), and is empty otherwise. The seat carries it into the key's why.
	Why string
	// VaultName and Generation name the credential the provision is
	// provided with (empty and 0 when there is none); the seat carries them
	// into the provision's reference.
	VaultName  string
	Generation int64
	// Connection, when set, says where the provided resource is reached
	// (for a database: host, port, database, role); written into the
	// entry for consumers' configurations ([mesh.Entry] Connection).
	Connection map[string]string
	// Next is, for a credential rotated and not yet in force (the vault's
	// rotation grace), the generation issued: written as the entry's next
	// ([mesh.Entry] Next), while Generation names the one in force.
	Next int64
}

// Provided returns a provided result naming the credential vaultName at
// generation.
func Provided(vaultName string, generation int64) Result {
	return Result{State: mesh.Provided, VaultName: vaultName, Generation: generation}
}

// Failing returns a failed result with why: final until the provision
// changes (return an error instead to be tried again with backoff).
func Failing(why string) Result { return Result{State: mesh.Failed, Why: why} }

// Waiting returns a waits result with why: tried again with backoff.
func Waiting(why string) Result { return Result{State: mesh.Waits, Why: why} }

// Handler is what a provider plugs into the kit.
//
// Provide makes the provision at key real (idempotently: it is called again
// after a restart of the provider, when the provision or the reference of a
// key it depends on changes, and on retries). An error is written as a
// failed entry with the error's text as why, and the key is tried again
// with backoff.
//
// Retire removes what Provide made for the key, on the operator's warrant
// "yes" only. The kit deletes the entry when Retire returns nil; an error
// leaves the entry, failed with the error's text in its why (the seat adds
// it to the retiring key's why, so the operator reads why the removal is
// not done), is logged, and Retire is tried again with backoff.
//
// The kit calls a handler from several goroutines, but never twice at once
// for the same key. ctx is cancelled when the kit stops.
type Handler interface {
	Provide(ctx context.Context, key mesh.ProvisionKey, p mesh.Provision) (Result, error)
	Retire(ctx context.Context, key mesh.ProvisionKey, p mesh.Provision) error
}

// Funcs adapts two functions to a [Handler]. A nil RetireFunc retires
// nothing (a provider with nothing to remove); a nil ProvideFunc provides
// every key with no credential.
type Funcs struct {
	ProvideFunc func(ctx context.Context, key mesh.ProvisionKey, p mesh.Provision) (Result, error)
	RetireFunc  func(ctx context.Context, key mesh.ProvisionKey, p mesh.Provision) error
}

// Provide calls f.ProvideFunc.
func (f Funcs) Provide(ctx context.Context, key mesh.ProvisionKey, p mesh.Provision) (Result, error) {
	if f.ProvideFunc == nil {
		return Provided("", 0), nil
	}
	return f.ProvideFunc(ctx, key, p)
}

// Retire calls f.RetireFunc.
func (f Funcs) Retire(ctx context.Context, key mesh.ProvisionKey, p mesh.Provision) error {
	if f.RetireFunc == nil {
		return nil
	}
	return f.RetireFunc(ctx, key, p)
}
