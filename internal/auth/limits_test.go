package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestOnePartyHoldsBoundedServerState is hole 6 of issue 18 for what a
// party makes the server hold besides its buckets (the attacker's F2): the
// weakest module (n, which may only ask its own secrets) subscribes past
// its user's bound and is refused by the server; it opens connections in
// the mesh account past the account's bound and is refused; it publishes
// a message over its payload bound and the server closes that connection.
// The allowed neighbours: a node's client's watch of its plans and its put
// of a value at its bucket's bound, on the connections it had, and a new
// connection once the module's are gone.
func TestOnePartyHoldsBoundedServerState(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	mod := f.parties["n"]
	lim := mod.LimitsIn(access.Storage)
	if lim.Subs != access.SubsBase || lim.Payload != access.PayloadRequest {
		t.Fatalf("module n's limits %+v; want %d subscriptions and %d bytes (a module that writes no bucket)", lim, access.SubsBase, access.PayloadRequest)
	}
	creds := auth.CredsPath(f.dir, "n")

	t.Run("subscriptions", func(t *testing.T) {
		p := f.connect(t, "n", creds)
		seen, stop := p.watch()
		defer stop()
		for i := range lim.Subs {
			if _, err := p.nc.SubscribeSync(fmt.Sprintf("%s.flood.%d", access.InboxPrefix("n"), i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if errs := p.errors(); len(errs) > 0 {
			t.Fatalf("n's %d subscriptions, its bound: %v; want each taken", lim.Subs, errs)
		}
		if _, err := p.nc.SubscribeSync(access.InboxPrefix("n") + ".flood.over"); err != nil {
			t.Fatal(err)
		}
		waitErr(t, p, seen, nats.ErrMaxSubscriptionsExceeded)
		if !p.nc.IsConnected() {
			t.Errorf("n's connection closed after its refused subscription; want it kept")
		}
	})

	t.Run("payload", func(t *testing.T) {
		p := f.connect(t, "n", creds)
		// The server tells it in the INFO it sends after the first PONG.
		waitFor(t, fmt.Sprintf("max payload of %d told to n's connection (it says %d)", lim.Payload, p.nc.MaxPayload()), func() bool {
			return p.nc.MaxPayload() == lim.Payload
		})
		// nats.go refuses itself what the server said it would; a client
		// that sends it anyway is closed by the server.
		if err := p.nc.Publish("$JS.API.INFO", make([]byte, lim.Payload+1)); !errors.Is(err, nats.ErrMaxPayload) {
			t.Errorf("n publishes %d bytes: %v; want %v", lim.Payload+1, err, nats.ErrMaxPayload)
		}
		if said := rawPublish(t, f.srv.URL(), creds, "$JS.API.INFO", int(lim.Payload)+1); !strings.Contains(said, "Maximum Payload Violation") {
			t.Errorf("the server said %q to n's raw publish of %d bytes; want its Maximum Payload Violation", said, lim.Payload+1)
		}
		// n may publish nothing in the storage account (not even the
		// account's JetStream info, since no scoped party may queue a
		// JetStream API request): a message at its bound is read whole
		// and refused for its subject, not its size.
		if said := rawPublish(t, f.srv.URL(), creds, "$JS.API.INFO", int(lim.Payload)); !strings.Contains(said, "Permissions Violation for Publish to \"$JS.API.INFO\"") {
			t.Errorf("the server said %q to n's raw publish of %d bytes, its bound; want it read and refused for its subject (Permissions Violation)", said, lim.Payload)
		}
		// The allowed neighbour: a client's value at its bucket's bound.
		_, maxValue := access.BucketLimits(mesh.AppliedBucket)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := f.conns["client-n1"].js.Publish(ctx, "$KV."+mesh.AppliedBucket+".n1.m", make([]byte, maxValue)); err != nil {
			t.Errorf("client-n1 puts %d bytes, its bucket's value bound: %v; want it stored", maxValue, err)
		}
	})

	t.Run("connections", func(t *testing.T) {
		bound := access.AccountLimitsOf(sortedParties(f), access.Storage).Conns
		var held []*nats.Conn
		defer func() {
			for _, nc := range held {
				nc.Close()
			}
		}()
		var refused error
		for int64(len(held)) <= bound {
			nc, err := dial(f.srv.URL(), nats.UserCredentials(creds), nats.CustomInboxPrefix(access.InboxPrefix("n")),
				nats.NoReconnect())
			if err != nil {
				refused = err
				break
			}
			held = append(held, nc)
		}
		if !errors.Is(refused, nats.ErrMaxAccountConnectionsExceeded) {
			t.Fatalf("n opened %d connections of the mesh account (bound %d), then %v; want the server's refusal %v",
				len(held), bound, refused, nats.ErrMaxAccountConnectionsExceeded)
		}
		if open := int64(len(held)) + int64(len(f.conns)); open > bound {
			t.Errorf("the mesh account holds %d connections; want at most its bound %d", open, bound)
		}
		// The connections the others had go on: client-n1 watches its
		// plans.
		if got := f.try(t, act{as: "client-n1", do: access.Read, target: mesh.PlansBucket, key: "n1.>"}); !got.done {
			t.Errorf("client-n1 watches its plans while n holds the account's connections: %+v; want it done", got)
		}
		for _, nc := range held {
			nc.Close()
		}
		held = nil
		waitFor(t, "another party's new connection once n's are closed", func() bool {
			nc, err := dial(f.srv.URL(), nats.UserCredentials(auth.CredsPath(f.dir, "client-n2")), nats.NoReconnect())
			if err != nil {
				return false
			}
			nc.Close()
			return true
		})
	})
}

// TestNoScopedPartyMakesConsumers is the attacker's F1 of issue 18: a
// consumer create whose body asks a "direct" sourcing consumer makes a
// consumer the server renames with a random suffix after the permission
// check (nats-server 2.15, jsConsumerCreateRequest), counted by no
// consumer limit, so a party that may create one consumer may make
// thousands, each delivering every write of the bucket. No party but the
// seat and the operators may create a consumer at all: each scoped party
// (a node's client, a provider, the vault, the router) tries the direct
// sourcing create on a bucket it reads, and the server refuses it. The
// allowed neighbour: the same party's watch of those keys, whose consumer
// the seat makes, gets their values.
func TestNoScopedPartyMakesConsumers(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tt := range []struct{ user, bucket, keys string }{
		{"client-n1", mesh.PlansBucket, "n1.>"},
		{"a", mesh.BoundBucket("a"), ">"},
		{access.VaultUser, mesh.AppliedBucket, ">"},
		{access.RouterUser, mesh.RecordsBucket, ">"},
	} {
		p := f.conns[tt.user]
		stream := "KV_" + tt.bucket
		filter := "$KV." + tt.bucket + "." + tt.keys
		for _, name := range append(access.ConsumerNames(tt.user, bus.WatchTokenOf(auth.AccountCredsPath(f.dir, access.Services, access.SeatUser), tt.user))[:1], "x") {
			body, _ := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
				"name": name, "filter_subject": filter, "direct": true, "sourcing": true, "deliver_policy": "all",
				"ack_policy": "none", "deliver_subject": access.InboxPrefix(tt.user) + ".direct"}})
			for _, subject := range []string{"$JS.API.CONSUMER.CREATE." + stream + "." + name + "." + filter, "$JS.API.CONSUMER.CREATE." + stream} {
				if answer, refusal := f.request(t, p, subject, body); refusal == "" {
					t.Errorf("%s's direct sourcing consumer create on %s: %s; want the server's refusal", tt.user, subject, answer)
				}
			}
		}
		kv, err := p.js.KeyValue(ctx, tt.bucket)
		if err != nil {
			t.Fatalf("%s binds %s: %v", tt.user, tt.bucket, err)
		}
		w, err := kv.Watch(ctx, tt.keys)
		if err != nil {
			t.Fatalf("%s watches %s %s: %v; want the seat to make its consumer", tt.user, tt.bucket, tt.keys, err)
		}
		select {
		case e := <-w.Updates():
			if e != nil {
				t.Errorf("%s's watch of the empty %s handed on %s; want the end of the initial values", tt.user, tt.bucket, e.Key())
			}
		case <-ctx.Done():
			t.Fatalf("%s's watch of %s handed on nothing", tt.user, tt.bucket)
		}
		_ = w.Stop()
	}
}

// sortedParties returns the fixture's parties.
func sortedParties(f *fixture) []access.Party {
	out := make([]access.Party, 0, len(f.parties))
	for _, p := range f.parties {
		out = append(out, p)
	}
	return out
}

// waitErr waits for the asynchronous error want on p, poked on seen.
func waitErr(t *testing.T, p *party, seen <-chan struct{}, want error) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		for _, err := range p.errors() {
			if errors.Is(err, want) {
				return
			}
		}
		select {
		case <-seen:
		case <-deadline:
			t.Fatalf("%s's errors %v; want %v", p.user, p.errors(), want)
		}
	}
}

// waitFor polls ok until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 20 s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rawPublish connects to url as the user of creds speaking the protocol
// itself (rawConnect: no client library refusing first), publishes size
// bytes on subject, and returns what the server answers: "PONG" when it
// took the message, else its error line.
func rawPublish(t *testing.T, url, creds string, subject string, size int) string {
	t.Helper()
	conn, r := rawConnect(t, url, creds)
	if _, err := fmt.Fprintf(conn, "PUB %s %d\r\n%s\r\nPING\r\n", subject, size, strings.Repeat("x", size)); err != nil {
		return err.Error()
	}
	return rawUntilPong(r)
}

// TestAccountsBoundsFollowTheMesh: Gen signs each account's connection and
// leafnode bounds for its parties (access.AccountLimitsOf), run again on
// the same mesh signs nothing anew, and a mesh grown past a bound signs
// anew the accounts whose bounds doubled (Result.AccountsSigned: what `up`
// then pushes) and no user whose claims stay.
func TestAccountsBoundsFollowTheMesh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, parties := gen(t, dir)
	check := func(res *auth.Result, parties []access.Party) {
		t.Helper()
		for _, token := range res.Accounts {
			ac, err := jwt.DecodeAccountClaims(token)
			if err != nil {
				t.Fatal(err)
			}
			want := access.AccountLimitsOf(parties, access.Account(ac.Name))
			if ac.Name == auth.SystemAccountName {
				want = access.SystemLimits(parties)
			}
			if ac.Limits.Conn != want.Conns || ac.Limits.LeafNodeConn != want.Leafs {
				t.Errorf("account %s: conn %d, leaf %d; want %d, %d", ac.Name, ac.Limits.Conn, ac.Limits.LeafNodeConn, want.Conns, want.Leafs)
			}
		}
	}
	check(res, parties)
	again, err := auth.Gen(dir, parties, auth.Options{Source: "test.yaml", StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.AccountsSigned)+len(again.Signed) > 0 {
		t.Errorf("Gen again on the same mesh signed accounts %v, users %v; want none", again.AccountsSigned, again.Signed)
	}
	m, err := meshfile.Parse("test.yaml", []byte(testMesh))
	if err != nil {
		t.Fatal(err)
	}
	grown := auth.MeshOf(m, operators)
	for i := range 40 {
		grown.Nodes = append(grown.Nodes, fmt.Sprintf("x%d", i))
	}
	more, err := access.Parties(grown)
	if err != nil {
		t.Fatal(err)
	}
	res, err = auth.Gen(dir, more, auth.Options{Source: "test.yaml", StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	check(res, more)
	if want := []string{"SYS", "mesh", "mesh-requests", "mesh-services"}; !slices.Equal(res.AccountsSigned, want) {
		t.Errorf("Gen on 40 more nodes signed the accounts %v anew; want %v (each account's leafnode bound doubled, the mesh's and requests' connections)",
			res.AccountsSigned, want)
	}
	for _, u := range res.Signed {
		if !strings.HasPrefix(u, "client-x") {
			t.Errorf("Gen on 40 more nodes signed %s anew; want the new nodes' clients only", u)
		}
	}
}

// TestWiderLimitsRevokeNothing: a mesh gaining providers past the
// operators' bound of subscriptions signs them anew with the doubled
// bound, and revokes none of their older JWTs (they allow less), so that
// an operator's copy of its file goes on until it takes the new one; a
// party whose permissions change (every client reads every provider's
// entries of its node, the seat makes the providers' buckets) is still
// narrowed.
func TestWiderLimitsRevokeNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, parties := gen(t, dir)
	m, err := meshfile.Parse("test.yaml", []byte(testMesh))
	if err != nil {
		t.Fatal(err)
	}
	grown := auth.MeshOf(m, operators)
	for i := range 40 {
		p := fmt.Sprintf("p%d", i)
		grown.Modules = append(grown.Modules, p)
		grown.Providers = append(grown.Providers, p)
	}
	more, err := access.Parties(grown)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int64{}
	for _, p := range parties {
		before[p.User] = p.LimitsIn(access.Storage).Subs
	}
	again, err := auth.Gen(dir, more, auth.Options{Source: "test.yaml", StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range more {
		if !p.Has(access.Operator) {
			continue
		}
		if got := p.LimitsIn(access.Storage).Subs; got <= before[p.User] {
			t.Fatalf("%s's subscriptions with 40 more providers: %d, %d before; want the bound doubled", p.User, got, before[p.User])
		}
		if !slices.Contains(again.Signed, p.User) || slices.Contains(again.Narrowed, p.User) {
			t.Errorf("%s with a wider bound: signed %v, narrowed %v; want it signed anew and not narrowed", p.User, again.Signed, again.Narrowed)
		}
	}
	for _, u := range []string{access.SeatUser, "client-n1", "client-n2"} {
		if !slices.Contains(again.Narrowed, u) {
			t.Errorf("narrowed %v; want %s among them (its permissions changed)", again.Narrowed, u)
		}
	}
}

// TestTheServerForgetsUnansweredVaultRequests: the services account's
// exports of the vault's secret and consumers verbs carry a response
// threshold of access.VaultAnswerWithin, which the server takes (its
// account says so), so that a request the vault never answers (one of a
// flood it drops) is held that long, not the server's default of 2 min;
// the other verbs keep the default. A request of client-n1 the vault's
// user reads and does not answer is held as one response mapping of the
// secret verb's export.
func TestTheServerForgetsUnansweredVaultRequests(t *testing.T) {
	t.Parallel()
	f := start(t)
	b, err := os.ReadFile(auth.AccountCredsPath(f.dir, access.Services, access.VaultUser))
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := f.srv.LookupAccount(uc.IssuerAccount)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range access.Verbs() {
		want := server.DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD
		if v == access.SecretWildcard || v == access.ConsumersWild {
			want = access.VaultAnswerWithin
		}
		if got, err := acc.ServiceExportResponseThreshold(v); err != nil || got != want {
			t.Errorf("the server's response threshold of %s = %v, %v; want %v", v, got, err, want)
		}
	}
	sub, err := f.answering[access.VaultUser].nc.SubscribeSync(access.SecretWildcard)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.answering[access.VaultUser].nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.asking["client-n1"].nc.PublishRequest("mesh-vault.secret.m.client-n1", "_INBOX_client-n1.unanswered", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(20 * time.Second); err != nil {
		t.Fatalf("the vault's user got no request of client-n1: %v", err)
	}
	if n := acc.NumPendingResponses(access.SecretWildcard); n != 1 {
		t.Errorf("the server holds %d response mappings of %s; want the 1 unanswered", n, access.SecretWildcard)
	}
}

// TestOnePartyHoldsEightWatchesABucket: the seat makes at most
// access.WatchNames consumers of one party on one bucket at a time (its
// names, made with the API's "create" action). client-n1 holds that many
// watches of its plans; one more is refused, saying every name is held,
// once the watch gave the server time to remove a stopped one's consumer;
// the other client's watch of the same bucket is made (the neighbour), and
// once one of n1's watches stops, its name frees and a new watch is made.
func TestOnePartyHoldsEightWatchesABucket(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watch := func(user, keys string) (jetstream.KeyWatcher, error) {
		kv, err := f.conns[user].js.KeyValue(ctx, mesh.PlansBucket)
		if err != nil {
			t.Fatal(err)
		}
		w, err := kv.Watch(ctx, keys)
		if err != nil {
			return nil, err
		}
		select {
		case <-w.Updates():
		case <-ctx.Done():
			t.Fatalf("%s's watch handed on nothing", user)
		}
		return w, nil
	}
	var held []jetstream.KeyWatcher
	for i := range access.WatchNames {
		w, err := watch("client-n1", "n1.>")
		if err != nil {
			t.Fatalf("client-n1's watch %d: %v; want it made", i+1, err)
		}
		held = append(held, w)
	}
	if _, err := watch("client-n1", "n1.>"); err == nil || !strings.Contains(err.Error(), "every consumer name of the party's is held") {
		t.Fatalf("client-n1's watch %d: %v; want it refused, every name held", access.WatchNames+1, err)
	}
	if w, err := watch("client-n2", "n2.>"); err != nil {
		t.Fatalf("client-n2's watch beside them: %v; want it made", err)
	} else {
		_ = w.Stop()
	}
	_ = held[0].Stop()
	w, err := watch("client-n1", "n1.>")
	if err != nil {
		t.Fatalf("client-n1's watch once one stopped: %v; want it made under the freed name", err)
	}
	_ = w.Stop()
	for _, w := range held[1:] {
		_ = w.Stop()
	}
}
