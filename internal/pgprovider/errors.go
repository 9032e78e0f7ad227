package pgprovider

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// NotOursError is returned by a provide that finds a role or database of
// the provision's name that this mesh did not make (its comment is not
// [Mark] of this mesh and key): it is left untouched, and the provision's
// entry is failed with this error's text as why (tried again with backoff).
type NotOursError struct {
	Object  string // "role" or "database"
	Name    string // its name
	Mesh    string // this mesh's name
	Key     string // the provision's key
	Comment string // its comment; empty when it has none
}

func (e *NotOursError) Error() string {
	says := "it has no comment"
	if e.Comment != "" {
		says = fmt.Sprintf("its comment says %q", e.Comment)
	}
	return fmt.Sprintf("postgres: %s %q exists but was not made by this mesh (mesh %s, provision %s): %s; it is left as it is: "+
		"drop or rename it, or give this mesh another name (mesh: in the mesh file, or --mesh-name)", e.Object, e.Name, e.Mesh, e.Key, says)
}

// ErrNoMesh is returned by [Start] when [Config].Mesh is empty: the
// provider names roles and databases after the mesh, and has none.
var ErrNoMesh = errors.New("postgres: the mesh has no name: give one with mesh: in the mesh file or --mesh-name")

// RetireError is returned by a retire whose DROP ROLE PostgreSQL refused
// (most often SQLSTATE 2BP01: the role still owns objects, or holds
// privileges, in a database where handing them over failed). The role
// logs in no more (NOLOGIN, no password) and has no sessions; it is tried
// again with backoff, and the kit writes this error's text as the why of
// the key's entry, which the seat carries into the retiring key.
type RetireError struct {
	Role  string            // the role's name
	Owner string            // the role its objects are handed to
	Err   error             // DROP ROLE's error
	Left  map[string]string // per database whose hand-over failed, why
}

func (e *RetireError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "postgres: role %q logs in no more, but it cannot be dropped: %s", e.Role, pgText(e.Err))
	names := make([]string, 0, len(e.Left))
	for d := range e.Left {
		names = append(names, d)
	}
	slices.Sort(names)
	for _, d := range names {
		fmt.Fprintf(&b, "; what it holds in database %q was not handed to %s: %s", d, e.Owner, e.Left[d])
	}
	return b.String()
}

func (e *RetireError) Unwrap() error { return e.Err }
