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
// <name>" on any message that reaches that subject, and a push consumer
// delivers wherever its maker said. No scoped party makes a consumer: the
// seat makes its watches' consumers, delivering only to the asker's inbox,
// named with a token of the asker's key, which no other party knows.
// client-n1 tries both ways to aim a consumer of its own applied key, its
// body a reset past the stream's end, at every name client-n2's watch
// could have had without the token: the server refuses its consumer
// create, the seat its watch delivering there. client-n2's watch still
// takes the seat's next plan, and client-n1's watch of its own keys
// delivering to its own inbox is made (the allowed neighbour).
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

	token := bus.WatchTokenOf(auth.AccountCredsPath(f.dir, access.Services, access.SeatUser), "client-n2")
	if token == "" || strings.Contains("client-n2", token) {
		t.Fatalf("client-n2's watch token = %q; want one from the seat's key", token)
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
	ask := f.asking["client-n1"]
	watch, err := access.WatchSubject("client-n1", mesh.AppliedBucket, "n1.m")
	if err != nil {
		t.Fatal(err)
	}
	for i, guess := range access.ConsumerNames("client-n2", "") {
		aim := "$JS.API.CONSUMER.RESET.KV_" + mesh.PlansBucket + "." + guess
		name := "own" + strings.Repeat("x", i)
		body, _ := json.Marshal(map[string]any{"stream_name": "KV_" + mesh.AppliedBucket, "action": "create", "config": map[string]any{
			"name": name, "filter_subject": applied, "deliver_policy": "last", "ack_policy": "none", "deliver_subject": aim}})
		from := len(n1.errors())
		if _, err := n1.nc.Request("$JS.API.CONSUMER.CREATE.KV_"+mesh.AppliedBucket+"."+name+"."+applied, body, time.Second); err == nil {
			t.Fatalf("client-n1's consumer create aimed at %s was answered; want it refused", aim)
		}
		if v := n1.violation(from, "Publish", func(s string) bool { return strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.") }); v == "" {
			t.Errorf("client-n1's consumer create aimed at %s: no permissions violation; want the server's refusal", aim)
		}
		req, _ := json.Marshal(map[string]any{"deliver": aim, "from": "last", "heartbeat": int64(time.Second)})
		m, err := ask.nc.RequestWithContext(ctx, watch, req)
		if err != nil {
			t.Fatalf("client-n1's watch delivering to %s: %v; want the seat's refusal", aim, err)
		}
		if !strings.Contains(string(m.Data), "is not in the asker's inbox _INBOX_client-n1.") {
			t.Fatalf("client-n1's watch delivering to %s: %s; want the seat's refusal (not its inbox)", aim, m.Data)
		}
	}
	// Its own inbox, but out of shape: a byte no token has, or a subject
	// the server would write on every delivery at length.
	for _, deliver := range []string{"_INBOX_client-n1.a\x00b", "_INBOX_client-n1." + strings.Repeat("x", 200), "_INBOX_client-n1..x"} {
		req, _ := json.Marshal(map[string]any{"deliver": deliver, "from": "last", "heartbeat": int64(time.Second)})
		m, err := ask.nc.RequestWithContext(ctx, watch, req)
		if err != nil || !strings.Contains(string(m.Data), `"error"`) {
			t.Fatalf("client-n1's watch delivering to %q: %v %v; want the seat's refusal", deliver, m, err)
		}
	}
	// The neighbour: its own watch, delivering to its own inbox.
	req, _ := json.Marshal(map[string]any{"deliver": "_INBOX_client-n1.own", "from": "last", "heartbeat": int64(time.Second)})
	m, err := ask.nc.RequestWithContext(ctx, watch, req)
	if err != nil || !strings.Contains(string(m.Data), `"name":"client-n1-w`) {
		t.Fatalf("client-n1's watch of its own key delivering to its inbox: %v %s; want it made under its name", err, m.Data)
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
