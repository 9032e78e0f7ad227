package cli

import (
	"os"
	"path/filepath"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// defaultCreds returns the operator's credentials file that up writes
// into the default data directory, DATA/auth/operator.creds, when it
// exists, or "". An operator's command given no --creds uses it, so that
// commands run against a local up need no flag.
func defaultCreds() string {
	p := auth.CredsPath(filepath.Join(defaultDataDir(), AuthDir), access.DefaultOperator)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// credsOrDefault returns --creds, or [defaultCreds] when it is not given.
func (f *busFlags) credsOrDefault() string {
	if f.creds != "" {
		return f.creds
	}
	return defaultCreds()
}

// user returns the operator an operator's command acts as: given, else
// the user of its credentials ([bus.CredsUser] of credsOrDefault), else
// [access.DefaultOperator].
func (f *busFlags) user(given string) string {
	if given != "" {
		return given
	}
	if u := bus.CredsUser(f.credsOrDefault()); u != "" {
		return u
	}
	return access.DefaultOperator
}
