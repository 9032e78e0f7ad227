package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

// decideMesh is [assemble.Decide] of what up was told, its usage errors
// said as such.
func decideMesh(file *meshfile.File, f upFlags, restart bool, stored string) (assemble.Decision, error) {
	d, err := assemble.Decide(file, f.told(), restart, stored)
	return d, asUsage(err)
}

// told is what [assemble.Decide] reads of up's flags.
func (f upFlags) told() assemble.Told {
	return assemble.Told{Data: assemble.Data(f.data), MeshName: f.meshName, Postgres: f.postgres != "",
		Clients: f.clients, ClientsSet: f.clientsSet}
}

// asUsage returns err as a usage error when it wraps [assemble.ErrUsage].
func asUsage(err error) error {
	if errors.Is(err, assemble.ErrUsage) {
		return usageError{err}
	}
	return err
}

// applyMesh applies file (label names it in messages) through js and keeps
// meshName in data ([assemble.Data.ApplyMesh]); stored is the name kept
// before ("" for none): one other than meshName is said on errOut when the
// new one is kept. What it applied is said on progress. It returns Apply's
// error, or the error of writing the name.
func applyMesh(ctx context.Context, js jetstream.JetStream, file *meshfile.File, label, data, stored, meshName string, progress, errOut io.Writer) error {
	stats, kept, err := assemble.Data(data).ApplyMesh(ctx, js, file, meshName)
	if kept && stored != "" && stored != meshName {
		fmt.Fprintf(errOut, "up: the mesh in %s was named %q and is now %s: the postgres provider names its roles and databases after the new name and never takes those of %q\n",
			data, stored, nameOrNone(meshName), stored)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "applied %s: %d written, %d unchanged, %d removed\n", label, stats.Written, stats.Unchanged, stats.Removed)
	return nil
}

// nameOrNone is name quoted, or "without a name" for "".
func nameOrNone(name string) string {
	if name == "" {
		return "without a name"
	}
	return fmt.Sprintf("named %q", name)
}

// The files of up's --data directory (see [assemble.Data]).
const (
	// DataLock is the file up holds an exclusive lock on for its whole
	// life, with its pid in it.
	DataLock = assemble.DataLock
	// MeshNameFile holds the name of the mesh the directory holds.
	MeshNameFile = assemble.MeshNameFile
	// AuthDir holds the mesh's NATS users (what "auth gen" writes).
	AuthDir = assemble.AuthDir
)

// writeMeshName keeps name in data/MeshNameFile ([assemble.Data.KeepMeshName]).
func writeMeshName(data, name string) error { return assemble.Data(data).KeepMeshName(name) }
