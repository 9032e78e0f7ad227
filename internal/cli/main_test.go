package cli

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain runs the tests with state and config directories of their own:
// the commands read the operator's credentials that up writes under the
// user's state directory ($XDG_STATE_HOME, else ~/.local/state), nats
// contexts under $XDG_CONFIG_HOME/nats, and NATS_URL / NATS_CREDS /
// NATS_CONTEXT, so a machine where `up` ran (as the README's first command
// does) would otherwise hand the tests' in-process commands its own mesh's
// credentials. HOME stays: the go tool's caches live under it.
func TestMain(m *testing.M) {
	home, err := os.MkdirTemp("", "mesh-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for k, v := range map[string]string{"XDG_STATE_HOME": home + "/state", "XDG_CONFIG_HOME": home + "/config"} {
		os.Setenv(k, v)
	}
	for _, k := range []string{"NATS_URL", "NATS_CREDS", "NATS_CONTEXT", "COLUMNS"} {
		os.Unsetenv(k)
	}
	// The tests wait on servers and seats far more than they compute (the
	// package's run takes under half a core): those in parallel run four
	// at once unless -parallel says otherwise, not GOMAXPROCS (two on CI),
	// as cmd/mesh-provisioner's do.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", "4"); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	os.RemoveAll(home)
	os.Exit(code)
}
