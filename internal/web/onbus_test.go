package web_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/web/pagecheck"
)

// busNodes is the size of the generated mesh TestPageOnTheBus runs: small
// enough for the test command; scripts/webpaint -sizes 10000 runs the same
// check at 10,000 nodes.
const busNodes = 200

// TestPageOnTheBus runs the page on the real path (internal/web/pagecheck):
// a real embedded server, a generated mesh of 200 nodes applied and
// composed by the seat, the page following the buckets, headless Chromium.
// The first response is under 1 MB; the summary shows the bus's counts of
// nodes, plans and provisions; one click on node-0001's route key shows its
// why walk; once route-proxy's entry of that key says failed, the open page
// shows it failed without loading again, and node-0001's view was sent
// only that key's row, node-0001's counts and the summary, under 8 KB.
func TestPageOnTheBus(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s is missing: the page's test drives Debian's Chromium; install it with `apt-get update && apt-get install -y chromium` (.ci/run does)", chromium)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := pagecheck.Run(ctx, pagecheck.Config{Nodes: busNodes, Modules: 8, Dir: t.TempDir(), Chromium: chromium,
		Searches: []string{"node-0001", "state:asked"}, Runs: 1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes, %d plans, %d provisions: first response %d bytes, paint %.0f ms; delta of %s %d bytes %v",
		rep.Nodes, rep.Plans, rep.Provisions, rep.FirstBytes, rep.FirstPaint, rep.Key, rep.DeltaBytes, rep.DeltaParts)
	if rep.Plans < busNodes || rep.Provisions < busNodes {
		t.Errorf("the seat wrote %d plans and %d provisions for %d nodes; want at least one of each a node", rep.Plans, rep.Provisions, busNodes)
	}
	if rep.Key != "node-0001.bookmarks-1.route" {
		t.Errorf("the key changed is %q; want node-0001.bookmarks-1.route, gen's first route of node-0001", rep.Key)
	}
	for _, p := range rep.Problems() {
		t.Error(p)
	}
	for _, s := range rep.Searches {
		if s.Found <= 0 {
			t.Errorf("%s found %d provisions; want node-0001's keys, or the asked keys", s.View, s.Found)
		}
	}
}
