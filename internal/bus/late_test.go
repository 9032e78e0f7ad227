package bus

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLateAnswersAreSaidCounted: a flood of answers sent after the server
// forgot their requests is said once per lateAnswersSaid, counted, not one
// line each; past the interval the next says how many came meanwhile.
func TestLateAnswersAreSaidCounted(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := &lateAnswers{}
	for range 10000 {
		l.say("vault", log)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 1 || !strings.Contains(buf.String(), "answers=1 ") {
		t.Fatalf("10,000 late answers said %d lines: %q; want one, counting the first", lines, buf.String())
	}
	l.mu.Lock()
	l.said = l.said.Add(-lateAnswersSaid - time.Second) // the interval passed
	l.mu.Unlock()
	l.say("vault", log)
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "answers=10000 ") {
		t.Fatalf("after the interval: %q; want a second line counting the 9,999 held and this one", buf.String())
	}
}
