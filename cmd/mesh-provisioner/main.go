// Command mesh-provisioner is the provisioning control plane of a mesh: the
// seat, the ask router, the vault, the node clients and the operator's
// tools, as subcommands. See "mesh-provisioner --help".
package main

import (
	"os"

	"github.com/mesh-provisioner/mesh-provisioner/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:]))
}
