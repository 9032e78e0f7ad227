package auth_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

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
		if said := rawPublish(t, f.srv.URL(), creds, "$JS.API.INFO", int(lim.Payload)); said != "PONG" {
			t.Errorf("the server said %q to n's raw publish of %d bytes, its bound; want it taken (PONG)", said, lim.Payload)
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

// TestDirectConsumersLiveNoLongerThanTheirConnection is what can be bounded
// of the attacker's F1: a reader's consumer create whose body asks a
// "direct" sourcing consumer makes a consumer the server names with a
// random suffix after the permission check, beyond the reader's set of
// names and not counted by any consumer limit (nats-server 2.15,
// jetstream_api.go jsConsumerCreateRequest; consumer.go skips
// max_consumers for them): that stands, and the operator's system user
// sees each in the servers' JetStream report. The buckets' consumer limits
// bound how long one lives once nothing subscribes to it: one asking a
// longer inactive threshold than [access.ConsumerInactive] is refused, one
// asking none takes it, and one whose maker's connection closes is gone
// after its threshold.
func TestDirectConsumersLiveNoLongerThanTheirConnection(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream := "KV_" + mesh.PlansBucket
	filter := "$KV." + mesh.PlansBucket + ".n1.>"
	name := access.ConsumerNames("client-n1", bus.CredsWatchToken(auth.CredsPath(f.dir, "client-n1")))[0]
	create := func(nc *nats.Conn, deliver string, threshold time.Duration) (string, time.Duration, error) {
		body, err := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
			"name": name, "filter_subject": filter, "direct": true, "sourcing": true, "deliver_policy": "all",
			"ack_policy": "none", "deliver_subject": deliver, "inactive_threshold": threshold}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+stream+"."+name+"."+filter, body)
		if err != nil {
			return "", 0, err
		}
		var resp struct {
			Name   string `json:"name"`
			Config struct {
				InactiveThreshold time.Duration `json:"inactive_threshold"`
			} `json:"config"`
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Error != nil {
			return "", 0, errors.New(resp.Error.Description)
		}
		return resp.Name, resp.Config.InactiveThreshold, nil
	}
	inbox := access.InboxPrefix("client-n1")
	nc, err := dial(f.srv.URL(), nats.UserCredentials(auth.CredsPath(f.dir, "client-n1")), nats.CustomInboxPrefix(inbox))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.SubscribeSync(inbox + ".direct.>"); err != nil {
		t.Fatal(err)
	}

	if _, _, err := create(nc, inbox+".direct.long", time.Hour); err == nil || !strings.Contains(err.Error(), "inactive threshold") {
		t.Errorf("a direct consumer asking an inactive threshold of 1h: %v; want the stream's refusal (its consumer limits)", err)
	}
	var made []string
	for i, threshold := range []time.Duration{0, time.Second, time.Second} {
		got, took, err := create(nc, fmt.Sprintf("%s.direct.%d", inbox, i), threshold)
		if err != nil {
			t.Fatalf("a direct consumer asking an inactive threshold of %s: %v; want it made (nats-server cannot tell it from a stream's source)", threshold, err)
		}
		want := threshold
		if want == 0 {
			want = access.ConsumerInactive
		}
		if !strings.HasPrefix(got, name+"-") || took != want {
			t.Errorf("a direct consumer asking %s is %q with an inactive threshold of %s; want %s-<random>, %s", threshold, got, took, name, want)
		}
		made = append(made, got)
	}
	report := f.directConsumers(t, ctx, stream)
	for _, c := range made {
		if !report[c] {
			t.Errorf("the servers' JetStream report lists %v as %s's direct consumers; want %s among them", report, stream, c)
		}
	}

	// The maker's connection closes: nothing subscribes to their deliver
	// subjects, and those of 1 s go (the server adds up to a second).
	nc.Close()
	waitFor(t, "the direct consumers of 1 s gone after their maker's connection closed", func() bool {
		r := f.directConsumers(t, ctx, stream)
		return !r[made[1]] && !r[made[2]]
	})
}

// directConsumers returns the direct consumers of stream the servers'
// JetStream report names, as an operator's system user asks it.
func (f *fixture) directConsumers(t *testing.T, ctx context.Context, stream string) map[string]bool {
	t.Helper()
	nc, err := dial(f.srv.URL(), nats.UserCredentials(auth.SystemCredsPath(f.dir, "operator")),
		nats.CustomInboxPrefix(access.InboxPrefix("operator")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := nc.RequestWithContext(ctx, "$SYS.REQ.SERVER.PING.JSZ", []byte(`{"accounts":true,"streams":true,"consumer":true,"direct_consumer":true}`))
	if err != nil {
		t.Fatalf("the operator's system user asks the JetStream report: %v", err)
	}
	var resp struct {
		Data struct {
			Accounts []struct {
				Streams []struct {
					Name   string `json:"name"`
					Direct []struct {
						Name string `json:"name"`
					} `json:"direct_consumer_detail"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		} `json:"data"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, a := range resp.Data.Accounts {
		for _, s := range a.Streams {
			if s.Name != stream {
				continue
			}
			for _, c := range s.Direct {
				out[c.Name] = true
			}
		}
	}
	return out
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
// itself (no client library refusing first), publishes size bytes on
// subject, and returns what the server answers: "PONG" when it took the
// message, else its error line.
func rawPublish(t *testing.T, url, creds string, subject string, size int) string {
	t.Helper()
	b, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	token, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("the server's first line %q: %v", line, err)
	}
	var info struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info); err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign([]byte(info.Nonce))
	if err != nil {
		t.Fatal(err)
	}
	connect, err := json.Marshal(map[string]any{"jwt": token, "sig": base64.RawURLEncoding.EncodeToString(sig), "verbose": false, "pedantic": false,
		"protocol": 1, "headers": true, "no_responders": true})
	if err != nil {
		t.Fatal(err)
	}
	msg := fmt.Sprintf("CONNECT %s\r\nPING\r\n", connect)
	if _, err := conn.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("connecting as %s: %v", creds, err)
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatalf("connecting as %s: %s", creds, line)
		}
		if strings.HasPrefix(line, "PONG") {
			break
		}
	}
	pub := fmt.Sprintf("PUB %s %d\r\n%s\r\nPING\r\n", subject, size, strings.Repeat("x", size))
	if _, err := conn.Write([]byte(pub)); err != nil {
		return err.Error()
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err.Error()
		}
		line = strings.TrimSpace(line)
		if line == "PONG" || strings.HasPrefix(line, "-ERR") {
			return line
		}
	}
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
	if err := f.asking["client-n1"].nc.PublishRequest("mesh-vault.secret.m", "_INBOX_client-n1.unanswered", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(20 * time.Second); err != nil {
		t.Fatalf("the vault's user got no request of client-n1: %v", err)
	}
	if n := acc.NumPendingResponses(access.SecretWildcard); n != 1 {
		t.Errorf("the server holds %d response mappings of %s; want the 1 unanswered", n, access.SecretWildcard)
	}
}
