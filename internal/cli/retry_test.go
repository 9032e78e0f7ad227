package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// ran is a command run by start: its output, once done is closed.
type ran struct {
	args        []string
	out, stderr syncBuffer
	err         error
	done        chan struct{}
}

// start runs the root command with args in the background.
func start(t *testing.T, args ...string) *ran {
	r := &ran{args: args, done: make(chan struct{})}
	root := Root()
	root.SetOut(&r.out)
	root.SetErr(&r.stderr)
	root.SetArgs(args)
	ctx := bustest.Context(t)
	go func() {
		defer close(r.done)
		r.err = root.ExecuteContext(ctx)
	}()
	return r
}

// TestOperatorCommandsWaitForAClusterToAnswer runs get, why and status
// against a three-server cluster that has lost its quorum (two servers
// stopped: JetStream answers nothing). With --timeout 2s get gives up,
// saying "the bus did not answer within 2s"; with a longer bound each
// command says once on stderr that it tries again (status may instead
// answer at once: the seat's verb answers from its memory and the lease
// is read from a replica, which needs no quorum; its output is checked
// the same), and once the two
// servers are back (restarted only after every command has said so: no
// race with the bound) each prints what it read: ace's plan of gitea, its
// why, the mesh's status. They failed at once with "context deadline
// exceeded" or "JetStream system temporarily unavailable".
func TestOperatorCommandsWaitForAClusterToAnswer(t *testing.T) {
	bustest.Long(t, "that get, why and status on a three-server cluster without its quorum try again, saying so once, and print what they read once the servers are back")
	t.Setenv("HOME", t.TempDir()) // no default credentials
	c := bustest.Cluster(t)
	url := c.Server(0).URL()
	if _, stderr, err := run(t, "apply", "-f", homelabFile, "--nats", c.URL(), "--replicas", "3"); err != nil {
		t.Fatalf("apply: %v\n%s", err, stderr)
	}
	ctx := bustest.Context(t)
	quiet := slog.New(slog.DiscardHandler)
	a := &assemble.Assembly{Dial: assemble.Shared(c.URL(), "", quiet), Log: quiet, Replicas: 3}
	if _, err := a.StartSeat(ctx, assemble.SeatConfig{ID: "seat-1"}); err != nil {
		t.Fatal(err)
	}
	const key = "ace.gitea"
	var got string
	if !waitUntil(time.Minute, func() bool {
		out, stderr, err := run(t, "get", "plans", key, "--nats", c.URL())
		got = fmt.Sprintf("%s%s%v", out, stderr, err)
		return err == nil && strings.Contains(out, "b7c100")
	}) {
		t.Fatalf("after a minute get plans %s says:\n%s", key, got)
	}

	c.Stop(1)
	c.Stop(2)
	_, _, err := run(t, "get", "plans", key, "--nats", url, "--timeout", "2s")
	if err == nil || !strings.Contains(err.Error(), "the bus did not answer within 2s: ") {
		t.Errorf("get with no quorum and --timeout 2s = %v; want it to say the bus did not answer within 2s", err)
	}

	cmds := []*ran{
		start(t, "get", "plans", key, "--nats", url, "--timeout", "2m"),
		start(t, "why", key, "--nats", url, "--timeout", "2m"),
		start(t, "status", "--nats", url, "--timeout", "2m"),
	}
	bustest.WaitFor(t, time.Minute, "get, why and status to say they try again", func() bool {
		for _, r := range cmds {
			select {
			case <-r.done:
				if r == cmds[2] && r.err == nil {
					// status may answer from the seat's memory and
					// the lease's replica (direct gets need no quorum):
					// checked below like the others
					continue
				}
				t.Fatalf("%v without a quorum ended: %v\nstderr:\n%s", r.args, r.err, r.stderr.String())
			default:
			}
			if !strings.Contains(r.stderr.String(), "the bus did not answer; trying again") {
				return false
			}
		}
		return true
	})
	c.Restart(1)
	c.Restart(2)
	for _, r := range cmds {
		select {
		case <-r.done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("%v has not ended 2 minutes after the quorum came back\nstderr:\n%s", r.args, r.stderr.String())
		}
		if r.err != nil {
			t.Errorf("%v once the quorum was back: %v\nstderr:\n%s", r.args, r.err, r.stderr.String())
			continue
		}
		if n := strings.Count(r.stderr.String(), "level=WARN"); n > 3 {
			t.Errorf("%v said %d warnings; want each why once:\n%s", r.args, n, r.stderr.String())
		}
	}
	if out := cmds[0].out.String(); !strings.Contains(out, "b7c100") {
		t.Errorf("get plans %s printed:\n%s\nwant the plan at b7c100", key, out)
	}
	if out := cmds[1].out.String(); !strings.Contains(out, "gitea") {
		t.Errorf("why %s printed:\n%s\nwant its walk", key, out)
	}
	if out := cmds[2].out.String(); !strings.Contains(out, "\nace ") || !strings.Contains(out, "18 plans") {
		t.Errorf("status printed:\n%s\nwant the mesh's 18 plans and ace's row", out)
	}
}

// waitUntil checks cond every 100 ms until it holds (true) or d has
// passed (false).
func waitUntil(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cond()
}
