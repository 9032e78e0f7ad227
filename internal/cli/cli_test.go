package cli

import (
	"bytes"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// run runs the root command with args in-process and returns what it
// wrote to stdout and stderr.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := Root()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.ExecuteContext(bustest.Context(t))
	return out.String(), errb.String(), err
}
