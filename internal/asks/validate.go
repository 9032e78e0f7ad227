package asks

import (
	"fmt"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Validate returns nil when a is an ask the router can record, or an error
// wrapping [ErrBadAsk] that names the first thing wrong: its id must be
// usable as a key of mesh-asks_records (tokens of [A-Za-z0-9_=-] joined by
// ".", at most 255 bytes), it must have a headline and an expiry, and at
// least one option; each option needs an id that is a valid name, unique in
// the ask, and binds, the hex SHA-256 (64 lower-case hex digits) of its act.
func Validate(a mesh.Ask) error {
	if err := validID(a.ID); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: ask %s: %s", ErrBadAsk, a.ID, fmt.Sprintf(format, args...))
	}
	if strings.TrimSpace(a.Headline) == "" {
		return bad("no headline")
	}
	if a.Expires.IsZero() {
		return bad("no expiry")
	}
	if len(a.Options) == 0 {
		return bad("no options")
	}
	seen := map[string]bool{}
	for i, o := range a.Options {
		if !mesh.ValidName(o.ID) {
			return bad("option %d has the id %q, not a valid name (lower-case [a-z0-9][a-z0-9-]*)", i+1, o.ID)
		}
		if seen[o.ID] {
			return bad("option %q is offered twice", o.ID)
		}
		seen[o.ID] = true
		if !isDigest(o.Binds) {
			return bad("option %q binds %q, not the hex SHA-256 of its act", o.ID, o.Binds)
		}
	}
	return nil
}

// validID reports, as an error wrapping [ErrBadAsk], why id cannot be the
// key of a record.
func validID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: ask has no id", ErrBadAsk)
	}
	if len(id) > 255 {
		return fmt.Errorf("%w: ask id %.40q... is longer than 255 bytes", ErrBadAsk, id)
	}
	for _, t := range strings.Split(id, ".") {
		if t == "" {
			return fmt.Errorf("%w: ask id %q has an empty token", ErrBadAsk, id)
		}
		for i := 0; i < len(t); i++ {
			c := t[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '=' || c == '-') {
				return fmt.Errorf("%w: ask id %q holds %q, which a record key cannot", ErrBadAsk, id, c)
			}
		}
	}
	return nil
}

// isDigest reports whether s is 64 lower-case hex digits.
func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
