package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// saidBuffer is a log's text, written by the seat's goroutines and read
// by the test.
type saidBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *saidBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *saidBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUnkeepWithNoReplyTakesNoTurnOfTheLoop: an answer that an asker
// aims at mesh-provisioner.unkeep is routed back to the seat by the
// server, with no reply subject (package auth's
// TestAnswersAimedAtVerbsComeWithNoReply), as fast as any answer given at
// once. The seat drops such a message in its subscription (before: each
// was queued for the seat's loop without bound, woke it, and was said at
// warn, "unkeep reply failed"). The neighbour: an operator's unkeep,
// asked after, is answered (the key is not kept).
func TestUnkeepWithNoReplyTakesNoTurnOfTheLoop(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	if _, errOut, err := run(t, "apply", "-f", homelabFile, "--yes", "--nats", s.URL()); err != nil {
		t.Fatalf("apply: %v (%s)", err, errOut)
	}
	var said saidBuffer
	ctx, cancel := context.WithCancel(bustest.Context(t))
	_, sjs := bustest.Connect(t, s, "mesh-provisioner-seat")
	st := seat.New(sjs, seat.Config{Log: slog.New(slog.NewTextHandler(&said, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitSeat(t, s, st)
	nc, _ := bustest.Connect(t, s, "aimed")
	const aimed = 20
	for range aimed {
		if err := nc.Publish(mesh.UnkeepSubject, []byte(`{"key":"ace.vaultwarden.database"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "unkeep", "ace.gitea.database.main", "--nats", s.URL()); err == nil || !strings.Contains(err.Error(), "the key is not kept") {
		t.Errorf("the operator's unkeep after the aimed messages = %v; want the seat's refusal", err)
	}
	lines := said.String()
	if n := strings.Count(lines, "an unkeep with no reply dropped"); n != aimed {
		t.Errorf("the seat dropped %d unkeeps with no reply; want %d", n, aimed)
	}
	if strings.Contains(lines, "unkeep reply failed") {
		t.Errorf("the seat's loop took the unkeeps with no reply:\n%s", lines)
	}
}
