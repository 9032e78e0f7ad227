package auth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// request publishes body on subject as p and returns the server's answer,
// or the permissions violation the server sent for subject (without
// waiting for a timeout).
func (f *fixture) request(t *testing.T, p *party, subject string, body []byte) (answer []byte, refusal string) {
	t.Helper()
	seen, stop := p.watch()
	defer stop()
	from := len(p.errors())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan *nats.Msg, 1)
	go func() {
		m, err := p.nc.RequestWithContext(ctx, subject, body)
		if err == nil {
			got <- m
		}
	}()
	for {
		select {
		case m := <-got:
			return m.Data, ""
		case <-seen:
			if v := p.violation(from, "Publish", func(s string) bool { return s == subject }); v != "" {
				return nil, v
			}
		case <-ctx.Done():
			t.Fatalf("%s asks %s: neither answered nor refused (async %v)", p.user, subject, p.errors()[from:])
		}
	}
}

// subjectNames returns the subjects a STREAM.INFO answer lists.
func subjectNames(t *testing.T, answer []byte) []string {
	t.Helper()
	var info struct {
		State struct {
			Subjects map[string]uint64 `json:"subjects"`
		} `json:"state"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(answer, &info); err != nil || info.Error != nil {
		t.Fatalf("stream info %s: %v", answer, err)
	}
	var out []string
	for s := range info.State.Subjects {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// TestReadersListNoKeyNames is the first half of issue 18's hole 8: a
// reader of some keys of a bucket (a node's client) asked the bucket's
// stream info with a subjects_filter and got the name of every key, other
// nodes' included. For every party and every bucket the table lets it read
// only in part, the stream info is refused (with and without a filter);
// the neighbours work: the party reads its own keys through the product's
// bucket handle (a watch and a get, no stream info), and an operator, who
// reads every key, lists the names.
func TestReadersListNoKeyNames(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := map[string][]string{} // bucket: the keys written, n1's and n2's
	for _, w := range []struct{ bucket, as, key string }{
		{mesh.PlansBucket, access.SeatUser, "n1.m"},
		{mesh.PlansBucket, access.SeatUser, "n2.n"},
		{mesh.ProvisionsBucket, access.SeatUser, "n1.m.thing"},
		{mesh.ProvisionsBucket, access.SeatUser, "n2.n.secret-name"},
		{mesh.AppliedBucket, "client-n1", "n1.m"},
		{mesh.AppliedBucket, "client-n2", "n2.n"},
		{mesh.CollectBucket, "client-n1", "n1.environment.m"},
		{"a_bound", "a", "n1.m.thing"},
		{"a_bound", "a", "n2.n.secret-name"},
		{"mesh-vault_bound", access.VaultUser, "n1.m.credential"},
		{"mesh-vault_bound", access.VaultUser, "n2.n.credential"},
	} {
		if _, err := f.conns[w.as].js.Publish(ctx, "$KV."+w.bucket+"."+w.key, []byte(`{}`)); err != nil {
			t.Fatalf("%s writes %s %s: %v", w.as, w.bucket, w.key, err)
		}
		keys[w.bucket] = append(keys[w.bucket], w.key)
	}
	filter := []byte(`{"subjects_filter":">"}`)
	rows := 0
	for _, user := range slices.Sorted(func(yield func(string) bool) {
		for u := range f.parties {
			if !yield(u) {
				return
			}
		}
	}) {
		p := f.parties[user]
		for _, r := range p.Rules() {
			if r.Act != access.Read || r.Keys == access.AllKeys || keys[r.Target] == nil {
				continue
			}
			rows++
			t.Run(fmt.Sprintf("%s reads %s %s", user, r.Target, r.Keys), func(t *testing.T) {
				c := f.conns[user]
				subject := "$JS.API.STREAM.INFO.KV_" + r.Target
				for _, body := range [][]byte{filter, nil} {
					if answer, refusal := f.request(t, c, subject, body); refusal == "" {
						t.Errorf("%s asks %s %s: answered %.200s; want the server's refusal", user, subject, body, answer)
					}
				}
				// The neighbour: its own keys, through the product's handle.
				kv, err := c.js.KeyValue(ctx, r.Target)
				if err != nil {
					t.Fatalf("%s binds %s: %v", user, r.Target, err)
				}
				w, err := kv.Watch(ctx, r.Keys)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Stop()
				var got []string
				for e := range w.Updates() {
					if e == nil {
						break
					}
					got = append(got, e.Key())
				}
				var want []string
				for _, k := range keys[r.Target] {
					if access.Matches(r.Keys, k) {
						want = append(want, k)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s watches %s %s: %v; want %v", user, r.Target, r.Keys, got, want)
				}
				for _, k := range want {
					if e, err := kv.Get(ctx, k); err != nil || e.Revision() == 0 {
						t.Errorf("%s gets %s %s: %v, %v; want its value", user, r.Target, k, e, err)
					}
				}
			})
		}
	}
	if rows < 10 {
		t.Fatalf("%d rows; want one per client and bucket it reads in part", rows)
	}
	// An operator reads every key: the names are its to list.
	answer, refusal := f.request(t, f.conns[access.DefaultOperator], "$JS.API.STREAM.INFO.KV_"+mesh.ProvisionsBucket, filter)
	if refusal != "" {
		t.Fatalf("the operator's stream info: %s", refusal)
	}
	want := []string{"$KV." + mesh.ProvisionsBucket + ".n1.m.thing", "$KV." + mesh.ProvisionsBucket + ".n2.n.secret-name"}
	if got := subjectNames(t, answer); !slices.Equal(got, want) {
		t.Errorf("the operator lists %v; want %v", got, want)
	}
}

// TestReadersDeleteNoConsumers is the second half of issue 18's hole 8: a
// reader of a bucket deleted any consumer of it by name (another party's
// watch). The seat watches provisions; a node's client and a provider,
// both readers of provisions, and the vault, a reader of applied, ask to
// delete it and its twin on applied: the server refuses, and both watches
// still deliver. Neighbours: a node's client's own watch, stopped, leaves
// no consumer (the server removes it), and an operator, who administers
// the account, deletes a consumer.
func TestReadersDeleteNoConsumers(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seat := f.conns[access.SeatUser]
	for _, b := range []string{mesh.ProvisionsBucket, mesh.AppliedBucket} {
		if _, err := seat.js.CreateOrUpdateConsumer(ctx, "KV_"+b, jetstream.ConsumerConfig{Durable: "seat-watch", AckPolicy: jetstream.AckNonePolicy}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []struct{ as, bucket string }{
		{"client-n1", mesh.ProvisionsBucket},
		{"a", mesh.ProvisionsBucket},
		{access.VaultUser, mesh.AppliedBucket},
		{"client-n1", mesh.AppliedBucket},
	} {
		subject := "$JS.API.CONSUMER.DELETE.KV_" + d.bucket + ".seat-watch"
		if answer, refusal := f.request(t, f.conns[d.as], subject, nil); refusal == "" {
			t.Errorf("%s deletes the seat's consumer of %s: answered %s; want the server's refusal", d.as, d.bucket, answer)
		}
	}
	for _, b := range []string{mesh.ProvisionsBucket, mesh.AppliedBucket} {
		if _, err := seat.js.Consumer(ctx, "KV_"+b, "seat-watch"); err != nil {
			t.Errorf("the seat's consumer of %s after the deletes: %v; want it there", b, err)
		}
	}
	// A client's own watch, stopped: its consumer goes without a delete
	// from the client.
	provisions, err := seat.js.Stream(ctx, "KV_"+mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		info, err := provisions.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	c := f.conns["client-n1"]
	from := len(c.errors())
	kv, err := c.js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "n1.>")
	if err != nil {
		t.Fatal(err)
	}
	if n := consumers(); n != 2 {
		t.Errorf("%d consumers of provisions while the client watches; want 2 (the seat's and the client's)", n)
	}
	w.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for consumers() != 1 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // polling for the server's removal, with a deadline
	}
	if n := consumers(); n != 1 {
		t.Errorf("%d consumers of provisions 30 s after the client's watch stopped; want 1 (the seat's)", n)
	}
	for _, err := range c.errors()[from:] {
		if !strings.Contains(err.Error(), ".CONSUMER.DELETE.") {
			t.Errorf("the client's watch: %v; want no refusal but of its consumer's delete", err)
		}
	}
	// An operator administers the account: it deletes a consumer.
	if err := f.conns[access.DefaultOperator].js.DeleteConsumer(ctx, "KV_"+mesh.ProvisionsBucket, "seat-watch"); err != nil {
		t.Errorf("the operator deletes a consumer: %v", err)
	}
}

// TestDeliveriesIntoAnotherInboxActOnNothing is issue 18's hole 2 aimed at
// parties rather than verbs. A node's client asks the seat for watches of
// its own keys delivering into the operator's and another client's
// inboxes, a key of the plans and the provisions' stream delete: the seat
// refuses each (not the asker's inbox). The operator, who may make
// consumers, makes such push consumers of n1's keys itself (the
// consumer-create subject carries the filter, not the deliver subject, so
// the server lets it), and a module asks a verb with its reply aimed at
// that client's inbox. The victims go on as they
// do: the operator follows applied and asks the provisioning verb, n2's
// client follows its applied keys and asks the vault for its module's
// values. Each gets its own answers and holds exactly its keys; the aimed
// consumers deliver nothing (no subscription of the product waits on a
// subject another party can name: each inbox subject ends in a random
// token of the connection), and the answer aimed at n2's inbox lands in
// the requests account, where n2's client waits on no such subject.
func TestDeliveriesIntoAnotherInboxActOnNothing(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	f.answerAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n1, n2, op := f.conns["client-n1"], f.conns["client-n2"], f.conns[access.DefaultOperator]
	for _, w := range []struct {
		p   *party
		key string
	}{{n1, "n1.m"}, {n2, "n2.n"}} {
		if _, err := w.p.js.Publish(ctx, "$KV."+mesh.AppliedBucket+"."+w.key, []byte(`{"v":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	opCopy := bus.Follow(ctx, op.js, mesh.AppliedBucket, bus.Options{})
	n2Copy := bus.Follow(ctx, n2.js, mesh.AppliedBucket, bus.Options{Filter: "n2.>"})
	for _, c := range []*bus.Copy{opCopy, n2Copy} {
		select {
		case <-c.Ready():
		case <-ctx.Done():
			t.Fatal("a victim's copy is not ready")
		}
	}
	// The attack: push consumers of n1's keys aimed at the victims' inboxes.
	filter := "$KV." + mesh.AppliedBucket + ".n1.>"
	aimed := map[string]string{
		"at-operator":     access.InboxPrefix(access.DefaultOperator) + ".x",
		"at-operator-req": access.InboxPrefix(access.DefaultOperator) + ".x.1",
		"at-n2":           access.InboxPrefix("client-n2") + ".x",
		"at-plans":        "$KV." + mesh.PlansBucket + ".n2.n",
		"at-api":          "$JS.API.STREAM.DELETE.KV_" + mesh.ProvisionsBucket,
	}
	watch, err := access.WatchSubject("client-n1", mesh.AppliedBucket, "n1.>")
	if err != nil {
		t.Fatal(err)
	}
	consumerOf := map[string]string{}
	for at, deliver := range aimed {
		req, _ := json.Marshal(map[string]any{"deliver": deliver, "from": "last", "heartbeat": int64(time.Second)})
		m, err := f.asking["client-n1"].nc.RequestWithContext(ctx, watch, req)
		if err != nil || !strings.Contains(string(m.Data), "is not in the asker's inbox _INBOX_client-n1.") {
			t.Fatalf("client-n1's watch delivering to %s: %v %v; want the seat's refusal (not its inbox)", deliver, m, err)
		}
		name := "aimed-" + at
		consumerOf[at] = name
		body, _ := json.Marshal(map[string]any{"stream_name": "KV_" + mesh.AppliedBucket, "config": map[string]any{
			"name": name, "deliver_subject": deliver, "ack_policy": "none", "deliver_policy": "all", "filter_subject": filter}})
		answer, refusal := f.request(t, op, "$JS.API.CONSUMER.CREATE.KV_"+mesh.AppliedBucket+"."+name+"."+filter, body)
		if refusal != "" || !strings.Contains(string(answer), `"name":"`+name+`"`) {
			t.Fatalf("the operator's consumer %s: %s %s; want it made (what this test shows harmless)", name, answer, refusal)
		}
	}
	// A module's request whose answer is aimed at n2's inbox.
	if err := f.asking["m"].nc.PublishRequest("mesh-vault.secret.m.m", access.InboxPrefix("client-n2")+".x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.js.Publish(ctx, "$KV."+mesh.AppliedBucket+".n1.m", []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	// The victims go on.
	for _, ask := range []struct{ user, subject string }{{access.DefaultOperator, access.Provisioning}, {"client-n2", "mesh-vault.secret.n.client-n2"}} {
		got, err := f.asking[ask.user].nc.RequestWithContext(ctx, ask.subject, []byte(`{}`))
		if err != nil || string(got.Data) != `{"answer":1}` {
			t.Errorf("%s asks %s: %v, %v; want its answer", ask.user, ask.subject, got, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if it, ok := opCopy.Get("n1.m"); ok && string(it.Value) == `{"v":2}` {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling for the operator's copy, with a deadline
	}
	for _, c := range []struct {
		name string
		copy *bus.Copy
		want map[string]string
	}{
		{"the operator's", opCopy, map[string]string{"n1.m": `{"v":2}`, "n2.n": `{"v":1}`}},
		{"n2's client's", n2Copy, map[string]string{"n2.n": `{"v":1}`}},
	} {
		got := map[string]string{}
		c.copy.Range(func(k string, it bus.Item) bool {
			got[k] = string(it.Value)
			return true
		})
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s copy of applied holds %v; want %v", c.name, got, c.want)
		}
	}
	seat := f.conns[access.SeatUser]
	if _, err := seat.js.Stream(ctx, "KV_"+mesh.ProvisionsBucket); err != nil {
		t.Errorf("the provisions' stream after the consumer aimed at its delete: %v; want it there", err)
	}
	plans, err := seat.js.KeyValue(ctx, mesh.PlansBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := plans.Get(ctx, "n2.n"); err == nil {
		t.Errorf("plans n2.n after the consumer aimed at it: %s; want no key", e.Value())
	}
	jsOld, err := seat.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	for at, deliver := range aimed {
		ci, err := jsOld.ConsumerInfo("KV_"+mesh.AppliedBucket, consumerOf[at])
		if err != nil {
			t.Fatal(err)
		}
		if ci.Delivered.Consumer != 0 || ci.PushBound {
			t.Errorf("the consumer aimed at %s delivered %d (bound %v); want nothing, no one listening there", deliver, ci.Delivered.Consumer, ci.PushBound)
		}
	}
}
