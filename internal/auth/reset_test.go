package auth_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The server resets a consumer named in "$JS.API.CONSUMER.RESET.<stream>.
// <name>" on any message that reaches that subject, and a party's push
// consumer may deliver anywhere. So a party's consumers are named with a
// token of its own key, which no other party knows: client-n1 aims a
// consumer of its own key, its body a reset past the stream's end, at
// every name client-n2's watch could have had without the token, and
// client-n2's watch still takes the seat's next plan. The victim's
// consumer carries its token; the attacker's own consumer is made (the
// allowed neighbour).
func TestNoPartyResetsAnothersWatch(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seat, n1, n2 := f.conns[access.SeatUser], f.conns["client-n1"], f.conns["client-n2"]
	plans, err := seat.js.KeyValue(ctx, mesh.PlansBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Put(ctx, "n2.n", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	victim := bus.Follow(ctx, n2.js, mesh.PlansBucket, bus.Options{Filter: "n2.>"})
	<-victim.Ready()

	token := bus.CredsWatchToken(auth.CredsPath(f.dir, "client-n2"))
	if token == "" || strings.Contains("client-n2", token) {
		t.Fatalf("client-n2's watch token = %q; want one from its key", token)
	}
	jsOld, err := seat.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	var mine string
	for _, n := range access.ConsumerNames("client-n2", token) {
		if _, err := jsOld.ConsumerInfo("KV_"+mesh.PlansBucket, n); err == nil {
			mine = n
		}
	}
	if mine == "" {
		t.Fatalf("no consumer of plans named %v; want client-n2's watch under one, with its token", access.ConsumerNames("client-n2", token))
	}
	for _, n := range access.ConsumerNames("client-n2", "") {
		if _, err := jsOld.ConsumerInfo("KV_"+mesh.PlansBucket, n); err == nil {
			t.Errorf("a consumer of plans is named %s, a name any party can guess", n)
		}
	}

	// The attack, from client-n1's own applied key.
	applied := "$KV." + mesh.AppliedBucket + ".n1.m"
	if _, err := n1.js.Publish(ctx, applied, []byte(`{"seq":999999}`)); err != nil {
		t.Fatal(err)
	}
	own := access.ConsumerNames("client-n1", bus.CredsWatchToken(auth.CredsPath(f.dir, "client-n1")))
	for i, guess := range access.ConsumerNames("client-n2", "") {
		body, _ := json.Marshal(map[string]any{"stream_name": "KV_" + mesh.AppliedBucket, "action": "create", "config": map[string]any{
			"name": own[i], "filter_subject": applied, "deliver_policy": "last", "ack_policy": "none",
			"deliver_subject": "$JS.API.CONSUMER.RESET.KV_" + mesh.PlansBucket + "." + guess}})
		m, err := n1.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.KV_"+mesh.AppliedBucket+"."+own[i]+"."+applied, body)
		if err != nil {
			t.Fatalf("client-n1 makes its own consumer %s: %v", own[i], err)
		}
		if strings.Contains(string(m.Data), `"error"`) {
			t.Fatalf("client-n1 makes its own consumer %s: %s", own[i], m.Data)
		}
	}
	if _, err := plans.Put(ctx, "n2.x", []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	for {
		if it, ok := victim.Get("n2.x"); ok && string(it.Value) == `{"v":2}` {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("client-n2's watch never took the seat's plan n2.x after client-n1's resets")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
