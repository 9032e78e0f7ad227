package provisioning_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestMessageWithNoReplyIsDroppedUnsaid: an answer that an asker aims at
// mesh-provisioner.provisioning is routed back to the seat by the server,
// with no reply subject (package auth's
// TestAnswersAimedAtVerbsComeWithNoReply), as fast as any answer given at
// once, its body the other verb's answer. The verb drops such a message
// in its subscription, at debug (before: one of its answerers took it and
// warned, the body in the line, for each). The neighbour: a request with
// a reply is answered.
func TestMessageWithNoReplyIsDroppedUnsaid(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	seatNC, seat := bustest.Connect(t, s, "seat")
	log, said := kittest.Log()
	if err := provisioning.Start(ctx, seatNC, seat, provisioning.Options{Log: log}); err != nil {
		t.Fatal(err)
	}
	nc, _ := bustest.Connect(t, s, "operator")
	const aimed = 20
	for range aimed {
		if err := nc.Publish(mesh.ProvisioningSubject, []byte(`{"secrets":[{"value":"an answer aimed here"}]}`)); err != nil {
			t.Fatal(err)
		}
	}
	// The subscription is read in order: a request answered after the
	// aimed messages was taken after each of them.
	if msg, err := nc.Request(mesh.ProvisioningSubject, []byte(`{"what":"registry"}`), 10*time.Second); err != nil || !strings.Contains(string(msg.Data), `"what":"registry"`) {
		t.Fatalf("the operator's request after the aimed messages: %v, %v; want the answer", msg, err)
	}
	lines := said.Lines()
	if n := strings.Count(lines, "a message with no reply dropped"); n != aimed {
		t.Errorf("the verb dropped %d messages with no reply; want %d", n, aimed)
	}
	if strings.Contains(lines, "an answer aimed here") {
		t.Errorf("the verb said the aimed messages:\n%s", lines)
	}
}
