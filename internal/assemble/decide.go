package assemble

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// ErrUsage is wrapped by the errors of [Decide] and [CheckMeshName] that
// say the runner was told something that cannot be: a --mesh-name that is
// not a name or contradicts the data's, a postgres provider for a mesh with
// no name. The command says them as usage errors.
var ErrUsage = errors.New("usage")

// usage is an error wrapping [ErrUsage] whose text is err's alone.
type usage struct{ err error }

func (u usage) Error() string { return u.err.Error() }
func (u usage) Unwrap() []error {
	return []error{u.err, ErrUsage}
}

// MaxAutoClients is the largest mesh for which a one-machine mesh runs
// every node's client unless told: each client holds its own connection
// and watches.
const MaxAutoClients = 100

// A one-machine mesh's soft memory limit (see memlimit.Follow): MemoryFactor
// times the live heap, never below a budget of MemoryPerNode bytes a node of
// the mesh and never below MemoryFloor bytes (below the budget the
// collector's own pacing rules).
const (
	MemoryFloor   = 256 << 20
	MemoryPerNode = 256 << 10
	MemoryFactor  = 1.5
)

// MemoryBudget is the floor of the memory limit for a mesh of nodes nodes,
// in bytes: 256 KiB a node, at least 256 MiB.
func MemoryBudget(nodes int) uint64 {
	return max(MemoryFloor, uint64(nodes)*MemoryPerNode)
}

// Told is what the runner of a one-machine mesh (up) was told that the
// decisions of [Decide] depend on.
type Told struct {
	// Data is the data directory.
	Data Data
	// MeshName is --mesh-name ("" when not given).
	MeshName string
	// Postgres says a postgres provider runs (a DSN was given): the mesh
	// then needs a name.
	Postgres bool
	// Clients is --clients; ClientsSet says it was given.
	Clients, ClientsSet bool
}

// Decision is what depends on the mesh a one-machine mesh runs, decided
// once that mesh is known ([Decide]): never from the bundled example when
// the data directory holds a mesh of its own.
type Decision struct {
	// Nodes is the number of the mesh's nodes (placed nodes, for the live
	// mesh of a restart with no file).
	Nodes int
	// Name is the mesh's name ("" for none): the postgres provider names
	// its roles and databases after it.
	Name string
	// Budget is the floor of the soft memory limit, in bytes
	// ([MemoryBudget] of Nodes).
	Budget uint64
	// Clients says a node client runs per node.
	Clients bool
	// AutoNoClients says clients are off because the mesh has more than
	// [MaxAutoClients] nodes and --clients was not given.
	AutoNoClients bool
}

// Decide decides what depends on the mesh for file, the mesh that runs.
// restart says file is a data directory's live mesh, run with no file:
// then its name is stored (what DATA/[MeshNameFile] held, "" for nothing),
// and a told MeshName that contradicts it is an error wrapping [ErrUsage]
// (a restart never changes the mesh); else the name is the told MeshName
// or the file's mesh:. It is an error wrapping [ErrUsage] when a postgres
// provider runs and the mesh has no name, or the told MeshName is not a
// name.
func Decide(file *meshfile.File, t Told, restart bool, stored string) (Decision, error) {
	d := Decision{Nodes: len(file.Nodes), Clients: t.Clients}
	d.Budget = MemoryBudget(d.Nodes)
	if t.Clients && !t.ClientsSet && d.Nodes > MaxAutoClients {
		d.Clients, d.AutoNoClients = false, true
	}
	if !restart {
		var err error
		d.Name, err = meshName(file, t.MeshName, t.Postgres)
		return d, err
	}
	keep := filepath.Join(string(t.Data), MeshNameFile)
	switch {
	case t.MeshName != "" && stored != "" && t.MeshName != stored:
		return d, usage{fmt.Errorf("--mesh-name %q: the mesh in %s is named %q (%s); a restart never changes the mesh: leave --mesh-name out, "+
			"or run \"up MESHFILE --mesh-name %s\" to rename it (the postgres provider never takes the roles and databases of %q under a new name)",
			t.MeshName, t.Data, stored, keep, t.MeshName, stored)}
	case t.MeshName != "":
		d.Name = t.MeshName
	default:
		d.Name = stored
	}
	if d.Name == "" && t.Postgres {
		return d, usage{fmt.Errorf("--postgres: the mesh in %s has no name that up knows (%s: none; its file named no mesh, or an older up ran it): "+
			"pass --mesh-name NAME, the name its roles and databases carry (NAME_<node>_<consumer>), or run \"up MESHFILE\"", t.Data, keep)}
	}
	return d, nil
}

// CheckMeshName returns an error wrapping [ErrUsage] when flag
// (--mesh-name) is given and is not a valid name.
func CheckMeshName(flag string) error {
	if flag != "" && !mesh.ValidName(flag) {
		return usage{fmt.Errorf("--mesh-name %q is not a valid name (lower-case [a-z0-9][a-z0-9-]*)", flag)}
	}
	return nil
}

// meshName is the mesh's name: flag (--mesh-name) when given, else the
// mesh file's "mesh:". It is a usage error when flag is not a valid name,
// or when needed (a postgres provider runs) and there is none.
func meshName(file *meshfile.File, flag string, needed bool) (string, error) {
	name := file.Mesh
	if flag != "" {
		if err := CheckMeshName(flag); err != nil {
			return "", err
		}
		name = flag
	}
	if name == "" && needed {
		return "", usage{fmt.Errorf("--postgres: %s names no mesh: add \"mesh: NAME\" to it or pass --mesh-name NAME "+
			"(the postgres provider names its roles and databases after the mesh, so that meshes sharing a server never meet)", file.Name)}
	}
	return name, nil
}

// LiveFile is file with its nodes and placement replaced by those the
// placement bucket holds (node -> value): what runs clients and providers
// for when the mesh a data directory holds runs. A placement that does not
// decode places nothing. Its name (Mesh) is cleared: the bus never holds
// it (DATA/[MeshNameFile] keeps it).
func LiveFile(file *meshfile.File, placement map[string][]byte) *meshfile.File {
	nodes := make([]string, 0, len(placement))
	placed := map[string][]string{}
	for node, v := range placement {
		nodes = append(nodes, node)
		var p mesh.Placement
		if json.Unmarshal(v, &p) == nil {
			for _, pm := range p.Modules {
				placed[node] = append(placed[node], pm.Module)
			}
		}
	}
	sort.Strings(nodes)
	lf := file.WithPlacement(nodes, placed)
	lf.Mesh = ""
	return lf
}

// Held is what a data directory's bus holds of a mesh, read by [ReadHeld]
// before a one-machine mesh with no file decides whether the bundled
// example goes in.
type Held struct {
	// Placed is the placement bucket (node -> value).
	Placed map[string][]byte
	// Keys counts the keys of every bucket of the mesh file.
	Keys int
}

// ReadHeld reads what js's buckets of the mesh file hold ([meshfile.Current]).
func ReadHeld(ctx context.Context, js jetstream.JetStream) (Held, error) {
	current, err := meshfile.Current(ctx, js)
	if err != nil {
		return Held{}, err
	}
	h := Held{Placed: current[mesh.PlacementBucket]}
	for _, keys := range current {
		h.Keys += len(keys)
	}
	return h, nil
}

// Empty reports whether nothing of a mesh is held: the bundled example
// goes only into an empty data directory, so that a restart never changes
// the operator's own mesh (placed, or written in part by an apply cut
// short before its placement).
func (h Held) Empty() bool { return h.Keys == 0 }

// ApplyMesh applies file through js, then keeps name, the mesh's name, in
// DATA/[MeshNameFile] for a restart with no file ("" removes it). The name
// is kept once the data holds the new mesh, whole or in part: when
// [meshfile.Apply] returns, or fails having written or removed a key. An
// Apply that fails before it wrote anything (a value over the server's max
// payload refuses the whole file) leaves the kept name as it is: the data
// still holds the mesh it names. It returns Apply's stats, whether the
// name was written (then a name kept before, if other, is replaced), and
// Apply's error joined with the error of writing the name.
func (d Data) ApplyMesh(ctx context.Context, js jetstream.JetStream, file *meshfile.File, name string) (meshfile.Stats, bool, error) {
	stats, err := meshfile.Apply(ctx, js, file, time.Now())
	if err != nil && stats.Written+stats.Removed == 0 {
		return stats, false, err
	}
	return stats, true, errors.Join(err, d.KeepMeshName(name))
}
