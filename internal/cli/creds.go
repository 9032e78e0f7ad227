package cli

import (
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"

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

// credsExpiry returns when the user JWT in the credentials file at path
// expires (its exp claim), zero when it never does or the file holds no
// user JWT that decodes.
func credsExpiry(path string) time.Time {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return time.Time{}
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil || uc.Expires == 0 {
		return time.Time{}
	}
	return time.Unix(uc.Expires, 0)
}

// credsExpired reports whether the user JWT in the credentials file at
// path had expired at now ([credsExpiry]).
func credsExpired(path string, now time.Time) bool {
	exp := credsExpiry(path)
	return !exp.IsZero() && !now.Before(exp)
}
