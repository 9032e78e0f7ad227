package pgprovider

import (
	"errors"
	"fmt"
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
