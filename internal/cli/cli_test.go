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
	return runWith(t, testHooks{}, args...)
}

// runWith is run with the test hooks h set for the command alone.
func runWith(t *testing.T, h testHooks, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := Root()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.ExecuteContext(withTestHooks(bustest.Context(t), h))
	return out.String(), errb.String(), err
}
