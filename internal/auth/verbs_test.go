package auth_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// heard is what the responders of [answerAll] received: per subject, the
// asker the server named (or the error of naming none).
type heard struct {
	mu   sync.Mutex
	msgs []hearing
}

type hearing struct {
	subject, asker string
	err            error
}

func (h *heard) all() []hearing {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hearing(nil), h.msgs...)
}

// answerAll runs each responder of the verbs as its user in the services
// account, through a [bus.Answerer]: it records who the server names and
// answers every request with {"answer":1}.
func (f *fixture) answerAll(t *testing.T) *heard {
	t.Helper()
	h := &heard{}
	for user, subjects := range map[string][]string{
		access.VaultUser:  {access.SecretWildcard, access.ConsumersWild, access.Rotate},
		access.RouterUser: {access.AsksWildcard, access.AnswerWildcard, access.WithdrawWildcard, access.ListAsks},
		access.SeatUser:   {access.Provisioning, access.Unkeep},
	} {
		ans, err := bus.NewAnswerer(f.answering[user].nc, auth.AccountCredsPath(f.dir, access.Services, user))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range subjects {
			if _, err := ans.Subscribe(s, func(m *nats.Msg) {
				who, err := ans.Asker(m)
				h.mu.Lock()
				h.msgs = append(h.msgs, hearing{m.Subject, who, err})
				h.mu.Unlock()
				if m.Reply != "" {
					_ = m.Respond([]byte(`{"answer":1}`))
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := ans.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// TestRepliesAimedAtTheBusActOnNothing is hole 1 of issue 18 (reply
// reflection): a module asks the vault's verb with a reply subject of its
// choosing: the JetStream API (delete the asks' records, purge the
// provisions), a key of the plans or the seat's lease, another party's
// inbox. The answer is delivered in the requests account, where no stream
// and no other party's storage user is: every bucket is as it was, and the
// other client hears nothing. The neighbour, the same request with the
// asker's own inbox, is answered.
func TestRepliesAimedAtTheBusActOnNothing(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	f.answerAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seat := f.conns[access.SeatUser].js
	provisions, err := seat.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := provisions.Put(ctx, "n1.m.thing", []byte(`{"state":"asked"}`)); err != nil {
		t.Fatal(err)
	}
	// n2's client listens on its inboxes, in both its accounts.
	var overheard []string
	var mu sync.Mutex
	for label, nc := range map[string]*nats.Conn{"storage": f.conns["client-n2"].nc, "requests": f.asking["client-n2"].nc} {
		if _, err := nc.Subscribe(access.InboxPrefix("client-n2")+".>", func(m *nats.Msg) {
			mu.Lock()
			overheard = append(overheard, label+" "+m.Subject)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	m := f.asking["m"].nc
	for _, reply := range []string{
		"$JS.API.STREAM.DELETE.KV_" + mesh.RecordsBucket,
		"$JS.API.STREAM.PURGE.KV_" + mesh.ProvisionsBucket,
		"$JS.API.STREAM.DELETE.KV_" + mesh.ProvisionsBucket,
		"$KV." + mesh.PlansBucket + ".n1.m",
		"$KV." + mesh.SeatBucket + "." + mesh.HolderKey,
		"$KV." + mesh.ClientsBucket + ".n1",
		access.InboxPrefix("client-n2") + ".stolen",
	} {
		if err := m.PublishRequest("mesh-vault.secret.m.m", reply, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// The neighbour: answered in m's own inbox. The server delivers the
	// answers in order, so the aimed ones have landed by now.
	if got, err := m.RequestWithContext(ctx, "mesh-vault.secret.m.m", []byte(`{}`)); err != nil || string(got.Data) != `{"answer":1}` {
		t.Fatalf("m's own request: %v, %v; want the answer", got, err)
	}
	for _, nc := range []*nats.Conn{f.conns["client-n2"].nc, f.asking["client-n2"].nc} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{mesh.RecordsBucket, mesh.ProvisionsBucket} {
		if _, err := seat.Stream(ctx, "KV_"+b); err != nil {
			t.Errorf("stream of %s after the aimed answers: %v; want it there", b, err)
		}
	}
	if e, err := provisions.Get(ctx, "n1.m.thing"); err != nil || string(e.Value()) != `{"state":"asked"}` {
		t.Errorf("provision n1.m.thing after the aimed answers: %v; want it as it was", err)
	}
	for _, k := range []struct{ bucket, key string }{
		{mesh.PlansBucket, "n1.m"}, {mesh.SeatBucket, mesh.HolderKey}, {mesh.ClientsBucket, "n1"},
	} {
		kv, err := seat.KeyValue(ctx, k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := kv.Get(ctx, k.key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s %s after the aimed answers: %v, %v; want no key", k.bucket, k.key, e, err)
		}
	}
	// In the requests account, the answer reaches n2's inbox only at the
	// subject m chose, which no request of n2 waits on: nats.go waits on
	// "<inbox>.<random token of the connection>.*".
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"requests " + access.InboxPrefix("client-n2") + ".stolen"}; !slices.Equal(overheard, want) {
		t.Errorf("n2's client heard %v; want %v (nothing in the storage account)", overheard, want)
	}
}

// verbSubjects are a subject of each verb the services account exports,
// wildcards filled in.
func verbSubjects() []string {
	var out []string
	for _, v := range access.Verbs() {
		v = strings.ReplaceAll(v, "*", "m")
		if rest, ok := strings.CutSuffix(v, ".>"); ok {
			v = rest + ".m.n1"
		}
		out = append(out, v)
	}
	return out
}

// TestPushConsumersOnVerbsReachNoResponder is hole 2 of issue 18 (deliver
// subjects): an operator, who may make consumers on every bucket, makes a
// push consumer whose deliver subject is each verb's (rotate, unkeep, an
// answer of an ask...). JetStream delivers in the storage account, where
// no responder is: none hears a thing. The neighbour, the operator asking
// the provisioning verb through its requests user, is answered and named.
func TestPushConsumersOnVerbsReachNoResponder(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	h := f.answerAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	op := f.conns[access.DefaultOperator]
	stream, err := op.js.Stream(ctx, "KV_"+mesh.PlacementBucket)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream
	jsOld, err := op.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	for i, subject := range verbSubjects() {
		if _, err := jsOld.AddConsumer("KV_"+mesh.PlacementBucket, &nats.ConsumerConfig{
			Name: "aimed" + strings.Repeat("x", i), DeliverSubject: subject, AckPolicy: nats.AckNonePolicy,
			DeliverPolicy: nats.DeliverAllPolicy, FilterSubject: "$KV." + mesh.PlacementBucket + ".>",
		}); err != nil {
			t.Fatalf("push consumer on %s: %v", subject, err)
		}
	}
	kv, err := op.js.KeyValue(ctx, mesh.PlacementBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "n1", []byte(`{"modules":[]}`)); err != nil {
		t.Fatal(err)
	}
	if err := op.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := f.asking[access.DefaultOperator].nc.RequestWithContext(ctx, access.Provisioning, []byte(`{}`))
	if err != nil || string(got.Data) != `{"answer":1}` {
		t.Fatalf("the operator's request: %v, %v; want the answer", got, err)
	}
	hs := h.all()
	if len(hs) != 1 || hs[0].subject != access.Provisioning || hs[0].asker != access.DefaultOperator || hs[0].err != nil {
		t.Errorf("the responders heard %+v; want only the operator's request, named %q", hs, access.DefaultOperator)
	}
}

// TestAnswererNamesTheAsker checks who a responder is told asked: a module,
// a node's client, an operator are named by the server; an answer aimed at
// a verb's subject (routed back through the import, from the services
// account) is no one's and is refused with bus.ErrNoAsker.
func TestAnswererNamesTheAsker(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	h := f.answerAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, ask := range []struct{ user, subject string }{
		{"m", "mesh-vault.secret.m.m"},
		{"client-n1", "mesh-vault.secret.m.client-n1"},
		{"alice", access.Rotate},
	} {
		if _, err := f.asking[ask.user].nc.RequestWithContext(ctx, ask.subject, []byte(`{}`)); err != nil {
			t.Fatalf("%s asks %s: %v", ask.user, ask.subject, err)
		}
	}
	// m aims the vault's answer at the rotate verb.
	m := f.asking["m"].nc
	if err := m.PublishRequest("mesh-vault.secret.m.m", access.Rotate, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RequestWithContext(ctx, "mesh-vault.secret.m.m", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	want := []hearing{
		{"mesh-vault.secret.m.m", "m", nil}, {"mesh-vault.secret.m.client-n1", "client-n1", nil}, {access.Rotate, "alice", nil},
		{"mesh-vault.secret.m.m", "m", nil}, {access.Rotate, "", bus.ErrNoAsker}, {"mesh-vault.secret.m.m", "m", nil},
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(h.all()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling for the responder's records, with a deadline
	}
	// The answer routed back may arrive before or after m's next
	// request: compare in any order.
	got := h.all()
	if len(got) != len(want) {
		t.Fatalf("heard %+v; want %+v", got, want)
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(g hearing) bool {
			return g.subject == w.subject && g.asker == w.asker && errors.Is(g.err, w.err) && (g.err == nil) == (w.err == nil)
		})
		if i < 0 {
			t.Errorf("heard %+v; want among them %s from %q (%v)", got, w.subject, w.asker, w.err)
			continue
		}
		got = slices.Delete(got, i, i+1)
	}
}
