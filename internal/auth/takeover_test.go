package auth_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestNoPartyTakesOverAnothersWatch is the takeover of a node's watch:
// client-n1 watches its plans; client-n2 (and provider a, a reader of every
// plan) sends a consumer update under client-n1's consumer's name with
// client-n1's deliver subject and n2's filter, and tries the durable and
// the ephemeral create subjects: the server refuses each. client-n1's
// consumer keeps its filter and its watch gets its next plan; client-n2's
// own watch (a name of its set) gets its own plan.
func TestNoPartyTakesOverAnothersWatch(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seat := f.conns[access.SeatUser]
	plans, err := seat.js.KeyValue(ctx, mesh.PlansBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"n1.m", "n2.n"} {
		if _, err := plans.Put(ctx, k, []byte(`{"v":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	watch := func(user, keys string) jetstream.KeyWatcher {
		t.Helper()
		kv, err := f.conns[user].js.KeyValue(ctx, mesh.PlansBucket)
		if err != nil {
			t.Fatal(err)
		}
		w, err := kv.Watch(ctx, keys)
		if err != nil {
			t.Fatalf("%s watches %s: %v", user, keys, err)
		}
		t.Cleanup(func() { _ = w.Stop() })
		return w
	}
	expect := func(user string, w jetstream.KeyWatcher, key, value string) {
		t.Helper()
		for {
			select {
			case e := <-w.Updates():
				if e == nil {
					continue
				}
				if e.Key() != key || string(e.Value()) != value {
					t.Fatalf("%s's watch: %s = %s; want %s = %s", user, e.Key(), e.Value(), key, value)
				}
				return
			case <-ctx.Done():
				t.Fatalf("%s's watch: no %s = %s", user, key, value)
			}
		}
	}
	w1 := watch("client-n1", "n1.>")
	expect("client-n1", w1, "n1.m", `{"v":1}`)
	jsOld, err := seat.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	var victim *nats.ConsumerInfo
	for _, name := range access.ConsumerNames("client-n1", bus.WatchTokenOf(auth.AccountCredsPath(f.dir, access.Services, access.SeatUser), "client-n1")) {
		if ci, err := jsOld.ConsumerInfo("KV_"+mesh.PlansBucket, name); err == nil {
			victim = ci
		}
	}
	if victim == nil || !slices.Contains(access.ConsumerNames("client-n1", bus.WatchTokenOf(auth.AccountCredsPath(f.dir, access.Services, access.SeatUser), "client-n1")), victim.Name) {
		t.Fatalf("client-n1's consumer of plans: %+v; want one named from %v", victim, access.ConsumerNames("client-n1", bus.WatchTokenOf(auth.AccountCredsPath(f.dir, access.Services, access.SeatUser), "client-n1")))
	}
	attack := func(filter string) []byte {
		body, _ := json.Marshal(map[string]any{"stream_name": "KV_" + mesh.PlansBucket, "action": "update", "config": map[string]any{
			"name": victim.Name, "deliver_subject": victim.Config.DeliverSubject, "ack_policy": "none",
			"deliver_policy": "last_per_subject", "filter_subject": filter, "flow_control": true,
			"headers_only": false, "mem_storage": true, "num_replicas": 1,
			"inactive_threshold": victim.Config.InactiveThreshold}})
		return body
	}
	for _, a := range []struct{ as, subject, filter string }{
		{"client-n2", "$JS.API.CONSUMER.CREATE.KV_" + mesh.PlansBucket + "." + victim.Name + ".$KV." + mesh.PlansBucket + ".n2.>", "$KV." + mesh.PlansBucket + ".n2.>"},
		{"client-n2", "$JS.API.CONSUMER.DURABLE.CREATE.KV_" + mesh.PlansBucket + "." + victim.Name, "$KV." + mesh.PlansBucket + ".n2.>"},
		{"client-n2", "$JS.API.CONSUMER.CREATE.KV_" + mesh.PlansBucket, "$KV." + mesh.PlansBucket + ".n2.>"},
		{"a", "$JS.API.CONSUMER.CREATE.KV_" + mesh.PlansBucket + "." + victim.Name + ".$KV." + mesh.PlansBucket + ".>", "$KV." + mesh.PlansBucket + ".>"},
		{"a", "$JS.API.CONSUMER.CREATE.KV_" + mesh.PlansBucket + "." + victim.Name + ".$KV." + mesh.PlansBucket + ".n2.>", "$KV." + mesh.PlansBucket + ".n2.>"},
	} {
		if answer, refusal := f.request(t, f.conns[a.as], a.subject, attack(a.filter)); refusal == "" {
			t.Errorf("%s publishes %s: answered %s; want the server's refusal", a.as, a.subject, answer)
		}
	}
	after, err := jsOld.ConsumerInfo("KV_"+mesh.PlansBucket, victim.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Config.FilterSubject; got != "$KV."+mesh.PlansBucket+".n1.>" {
		t.Errorf("client-n1's consumer's filter after the attacks: %s; want $KV.%s.n1.>", got, mesh.PlansBucket)
	}
	// The neighbours: each client's own watch goes on.
	w2 := watch("client-n2", "n2.>")
	expect("client-n2", w2, "n2.n", `{"v":1}`)
	for _, k := range []string{"n1.m", "n2.n"} {
		if _, err := plans.Put(ctx, k, []byte(`{"v":2}`)); err != nil {
			t.Fatal(err)
		}
	}
	expect("client-n1", w1, "n1.m", `{"v":2}`)
	expect("client-n2", w2, "n2.n", `{"v":2}`)
}
