package pgprovider

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// maxName is PostgreSQL's limit on an identifier (NAMEDATALEN-1), in bytes.
const maxName = 63

// RoleName returns the name of the role (and of the database) that the
// mesh named meshName makes for the provision at key:
// "<mesh>_<node>_<consumer>" and "_<local>" when the key has a local. Names
// never hold "_", so no two meshes or keys share a name. A name longer
// than 63 bytes is cut to 52 bytes and ends in "_" and the first 10 hex
// digits of the SHA-256 of the whole name, so that it stays valid and
// names one mesh's key only.
func RoleName(meshName string, key mesh.ProvisionKey) string {
	name := meshName + "_" + key.Node + "_" + key.Consumer
	if key.Local != "" {
		name += "_" + key.Local
	}
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxName-11] + "_" + hex.EncodeToString(sum[:])[:10]
}

// Mark returns the comment the provider puts on each role and database it
// makes (COMMENT ON ROLE, COMMENT ON DATABASE): the mesh's name and the
// provision's key. A role or database of the same name whose comment is
// not this mark was not made by this mesh, and the provider never takes it.
func Mark(meshName string, key mesh.ProvisionKey) string {
	return "mesh-provisioner: made by mesh " + meshName + " for the provision " + key.String()
}
