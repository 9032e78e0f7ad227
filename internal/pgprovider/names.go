package pgprovider

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// maxName is PostgreSQL's limit on an identifier (NAMEDATALEN-1), in bytes.
const maxName = 63

// RoleName returns the name of the role (and of the database) of the
// provision at key: "<node>_<consumer>" and "_<local>" when the key has a
// local. Names never hold "_", so no two keys share a name. A name longer
// than 63 bytes is cut to 52 bytes and ends in "_" and the first 10 hex
// digits of the SHA-256 of the whole name.
func RoleName(key mesh.ProvisionKey) string {
	name := key.Node + "_" + key.Consumer
	if key.Local != "" {
		name += "_" + key.Local
	}
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxName-11] + "_" + hex.EncodeToString(sum[:])[:10]
}
