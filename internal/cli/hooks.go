package cli

import (
	"context"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
)

// testHooks are what a test that runs a command in process may set for
// that command alone, through its context ([withTestHooks]); a command
// run otherwise has none and takes the package's constants. Carried by
// the context, not set in package variables, so that the tests setting
// them run in parallel.
type testHooks struct {
	// wholeShare and nodeShare, when not nil, replace [wholeShare] and
	// [nodeShare] (0: read every node by subject, however many).
	wholeShare, nodeShare *int
	// upDecided, when not nil, is called with what up decided
	// ([assemble.Decide]), once per run.
	upDecided func(assemble.Decision)
}

type testHooksKey struct{}

// withTestHooks returns ctx carrying h, for the command run with it.
func withTestHooks(ctx context.Context, h testHooks) context.Context {
	return context.WithValue(ctx, testHooksKey{}, h)
}

// hooksOf returns the test hooks ctx carries: none outside a test.
func hooksOf(ctx context.Context) testHooks {
	h, _ := ctx.Value(testHooksKey{}).(testHooks)
	return h
}

// share returns *set when a test set it, else def.
func (testHooks) share(set *int, def int) int {
	if set != nil {
		return *set
	}
	return def
}
