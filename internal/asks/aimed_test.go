package asks_test

import (
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
)

// TestListWithNoReplyIsDroppedUnsaid: an answer that an asker aims at
// mesh-asks.list is routed back to the router by the server, with no reply
// subject (package auth's TestAnswersAimedAtVerbsComeWithNoReply), as
// fast as any answer given at once. The router drops such a message at
// debug (before: "list refused" or "reply not sent" at warn, a line or two
// of the log per message, for any party to fill). The neighbour: a list
// asked with a reply is answered.
func TestListWithNoReplyIsDroppedUnsaid(t *testing.T) {
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s, "asks")
	ctx := bustest.Context(t)
	log, said := kittest.Log()
	if _, err := asks.Start(ctx, nc, js, log); err != nil {
		t.Fatal(err)
	}
	r := open(t, s, ctx)
	const aimed = 20
	for range aimed {
		if err := r.operator.Publish(asks.ListSubject, []byte(`{"error":"an answer aimed here"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// The router reads its subscription in order: the list asked after is
	// answered once every message before it was taken.
	if _, err := asks.List(ctx, r.operator, "all"); err != nil {
		t.Fatalf("the operator's list after the aimed messages: %v; want the listing", err)
	}
	lines := said.Lines()
	if n := strings.Count(lines, "a list with no reply dropped"); n != aimed {
		t.Errorf("the router dropped %d messages with no reply; want %d", n, aimed)
	}
	if strings.Contains(lines, "level=WARN") {
		t.Errorf("the router warned of messages with no reply:\n%s", lines)
	}
}
