package vault

import "errors"

// ErrUnknown is returned by [Store.Rotate] and [Vault.Rotate] for a name
// the vault keeps no value under.
var ErrUnknown = errors.New("vault: no value under this name")
