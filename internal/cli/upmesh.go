package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// liveFile is file with its nodes and placement replaced by those the
// placement bucket holds (node -> value): what up runs clients and
// providers for when it runs the mesh a data directory holds. A placement
// that does not decode places nothing. Its name (Mesh) is cleared: the
// bus never holds it (up keeps it in DATA/MeshNameFile).
func liveFile(file *meshfile.File, placement map[string][]byte) *meshfile.File {
	lf := *file
	lf.Mesh = ""
	lf.Nodes = make([]string, 0, len(placement))
	lf.Placement = map[string][]string{}
	for node, v := range placement {
		lf.Nodes = append(lf.Nodes, node)
		var p mesh.Placement
		if json.Unmarshal(v, &p) == nil {
			for _, pm := range p.Modules {
				lf.Placement[node] = append(lf.Placement[node], pm.Module)
			}
		}
	}
	sort.Strings(lf.Nodes)
	return &lf
}

// upMesh is what up decides from the mesh it runs, once that mesh is
// known (see decideMesh): never from the bundled example when the data
// directory holds a mesh of its own.
type upMesh struct {
	// nodes is the number of the mesh's nodes (placed nodes, for the live
	// mesh of a restart with no file).
	nodes int
	// name is the mesh's name ("" for none): the postgres provider names
	// its roles and databases after it.
	name string
	// budget is the floor of up's soft memory limit, in bytes
	// (upMemoryBudget of nodes).
	budget uint64
	// clients says up runs a node client per node.
	clients bool
	// autoNoClients says clients are off because the mesh has more than
	// maxAutoClients nodes and --clients was not given.
	autoNoClients bool
}

// upDecided is called with what up decided, once per run; tests replace it
// to see the decision.
var upDecided = func(upMesh) {}

// decideMesh decides what depends on the mesh for file, the mesh up runs.
// restart says file is a data directory's live mesh, run with no file:
// then its name is stored (what DATA/MeshNameFile held, "" for nothing),
// and a --mesh-name that contradicts it is a usage error (a restart never
// changes the mesh); else the name is --mesh-name or the file's mesh:. It
// is a usage error when a postgres provider runs and the mesh has no name.
func decideMesh(file *meshfile.File, f upFlags, restart bool, stored string) (upMesh, error) {
	d := upMesh{nodes: len(file.Nodes), clients: f.clients}
	d.budget = upMemoryBudget(d.nodes)
	if f.clients && !f.clientsSet && d.nodes > maxAutoClients {
		d.clients, d.autoNoClients = false, true
	}
	if !restart {
		var err error
		d.name, err = meshName(file, f.meshName, f.postgres != "")
		return d, err
	}
	keep := filepath.Join(f.data, MeshNameFile)
	switch {
	case f.meshName != "" && stored != "" && f.meshName != stored:
		return d, usageError{fmt.Errorf("--mesh-name %q: the mesh in %s is named %q (%s); a restart never changes the mesh: leave --mesh-name out, "+
			"or run \"up MESHFILE --mesh-name %s\" to rename it (the postgres provider never takes the roles and databases of %q under a new name)",
			f.meshName, f.data, stored, keep, f.meshName, stored)}
	case f.meshName != "":
		d.name = f.meshName
	default:
		d.name = stored
	}
	if d.name == "" && f.postgres != "" {
		return d, usageError{fmt.Errorf("--postgres: the mesh in %s has no name that up knows (%s: none; its file named no mesh, or an older up ran it): "+
			"pass --mesh-name NAME, the name its roles and databases carry (NAME_<node>_<consumer>), or run \"up MESHFILE\"", f.data, keep)}
	}
	return d, nil
}

// validMeshNameFlag returns a usage error when flag (--mesh-name) is given
// and is not a valid name.
func validMeshNameFlag(flag string) error {
	if flag != "" && !mesh.ValidName(flag) {
		return usageError{fmt.Errorf("--mesh-name %q is not a valid name (lower-case [a-z0-9][a-z0-9-]*)", flag)}
	}
	return nil
}

// applyMesh applies file (label names it in messages) through js, then
// keeps meshName, the mesh's name, in data/MeshNameFile for a restart with
// no file ("" removes it). The name is kept once the data holds the new mesh,
// whole or in part: when [meshfile.Apply] returns, or fails having written
// or removed a key. An Apply that fails before it wrote anything (a value
// over the server's max payload refuses the whole file) leaves the kept
// name as it is: the data still holds the mesh it names. stored is the name
// kept before ("" for none); one other than meshName is said on errOut
// when the new one is kept. What it applied is said on progress. It returns
// Apply's error, or the error of writing the name.
func applyMesh(ctx context.Context, js jetstream.JetStream, file *meshfile.File, label, data, stored, meshName string, progress, errOut io.Writer) error {
	stats, err := meshfile.Apply(ctx, js, file, time.Now())
	if err != nil && stats.Written+stats.Removed == 0 {
		return err
	}
	if stored != "" && stored != meshName {
		fmt.Fprintf(errOut, "up: the mesh in %s was named %q and is now %s: the postgres provider names its roles and databases after the new name and never takes those of %q\n",
			data, stored, nameOrNone(meshName), stored)
	}
	if werr := writeMeshName(data, meshName); werr != nil {
		return errors.Join(err, werr)
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

// meshName is the mesh's name: flag (--mesh-name) when given, else the
// mesh file's "mesh:". It is a usage error when flag is not a valid name,
// or when needed (a postgres provider runs) and there is none.
func meshName(file *meshfile.File, flag string, needed bool) (string, error) {
	name := file.Mesh
	if flag != "" {
		if err := validMeshNameFlag(flag); err != nil {
			return "", err
		}
		name = flag
	}
	if name == "" && needed {
		return "", usageError{fmt.Errorf("--postgres: %s names no mesh: add \"mesh: NAME\" to it or pass --mesh-name NAME "+
			"(the postgres provider names its roles and databases after the mesh, so that meshes sharing a server never meet)", file.Name)}
	}
	return name, nil
}

// up's soft memory limit (see memlimit.Follow): 1.5 times the live heap,
// never below a budget of 256 KiB a node of the mesh and never below
// 256 MiB (below the budget the collector's own pacing rules).
const (
	upMemoryFloor   = 256 << 20
	upMemoryPerNode = 256 << 10
	upMemoryFactor  = 1.5
)

// upMemoryBudget is the floor of up's memory limit for a mesh of nodes
// nodes, in bytes: 256 KiB a node, at least 256 MiB.
func upMemoryBudget(nodes int) uint64 {
	return max(upMemoryFloor, uint64(nodes)*upMemoryPerNode)
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

// readMeshName returns the name data/MeshNameFile holds ([assemble.Data.MeshName]).
func readMeshName(data string) (string, error) { return assemble.Data(data).MeshName() }

// writeMeshName keeps name in data/MeshNameFile ([assemble.Data.KeepMeshName]).
func writeMeshName(data, name string) error { return assemble.Data(data).KeepMeshName(name) }
