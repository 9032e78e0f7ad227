package seat

import (
	"bytes"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// TestRetryBackoffGrowsUntilAWriteLands checks the backoff of writes the
// bus did not take: a node tried again whose write fails again waits
// longer each time, even though the loop takes its due nodes (and other
// nodes' writes land) between the failures; once a write of the node
// tried again lands, the next failure waits the least again. The backoff
// used to start again at every take, so every retry waited 250 ms.
func TestRetryBackoffGrowsUntilAWriteLands(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	// The seat's backoff without its jitter, so that each wait is
	// longer than the last by its multiplier.
	r := retry{bo: backoff.NewExponentialBackOff()}
	r.bo.InitialInterval, r.bo.MaxInterval, r.bo.RandomizationFactor = retryMin, retryMax, 0
	woke := make(chan struct{}, 1)
	wake := func() { woke <- struct{}{} }
	waits := func() []time.Duration {
		var ds []time.Duration
		for _, m := range regexp.MustCompile(`retry_in=(\S+)`).FindAllStringSubmatch(logs.String(), -1) {
			d, err := time.ParseDuration(m[1])
			if err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		return ds
	}
	failAndTake := func() {
		t.Helper()
		r.fail("node-1.gitea", wake, log)
		select {
		case <-woke:
		case <-time.After(30 * time.Second):
			t.Fatal("the retry never woke the loop")
		}
		if due := r.take(); len(due) != 1 || due[0] != "node-1" {
			t.Fatalf("take = %v; want [node-1]", due)
		}
		r.take()                    // the loop drains again before the acks come
		r.landed("node-2.postgres") // another node's write lands meanwhile
	}
	for range 3 {
		failAndTake()
	}
	ws := waits()
	if len(ws) != 3 || !(ws[1] > ws[0] && ws[2] > ws[1]) {
		t.Fatalf("waits %v; want three, each longer than the last", ws)
	}
	r.landed("node-1.gitea.credential.gitea_db")
	failAndTake()
	if ws = waits(); len(ws) != 4 || ws[3] != retryMin {
		t.Fatalf("waits %v; want the fourth back near %v once node-1's write landed", ws, retryMin)
	}
}
