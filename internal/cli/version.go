package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newVersionCmd) }

// Version is the release the binary was built as; set it with
// -ldflags "-X github.com/mesh-provisioner/mesh-provisioner/internal/cli.Version=v1.2.3".
// Empty means the module version and VCS revision that the Go toolchain
// recorded in the binary.
var Version = ""

// version returns the binary's version: Version, else the main module's
// version from the build info, with the VCS revision and time when known
// and "+dirty" for a tree with uncommitted changes.
func version() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build info)"
	}
	v := info.Main.Version
	var rev, at, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " " + rev + dirty
		if at != "" {
			v += " " + at
		}
	}
	return v + " " + info.GoVersion
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the binary's version (module version, VCS revision and time, Go version)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "mesh-provisioner", version())
			return err
		},
	}
}
