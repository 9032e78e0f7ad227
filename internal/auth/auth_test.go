package auth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// testMesh has two nodes, two providers a (on n1) and b (on n2) besides
// the vault, and two plain modules m (on n1) and n (on n2).
const testMesh = `
nodes: [n1, n2]
modules:
  mesh-vault:
    builds:
      - fp: 0a0a01
        manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  a:
    builds:
      - fp: 0a0a02
        manifest: {module: a, provides: [{name: thing, credential: own, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  b:
    builds:
      - fp: 0a0a03
        manifest: {module: b, provides: [{name: thing, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  m:
    builds:
      - fp: 0a0a04
        manifest: {module: m, requires: [{provision: thing, from: a}], contributes: [{collection: environment, item: M=1}]}
  n:
    builds:
      - fp: 0a0a05
        manifest: {module: n, requires: [{provision: thing, from: b}]}
placement:
  n1: [mesh-vault, a, m]
  n2: [b, n]
`

// operators of the test mesh.
var operators = []string{"operator", "alice"}

// fixture is one server started from the generated configuration, with a
// connection per party, shared by every row.
type fixture struct {
	dir     string
	srv     *bus.Server
	parties map[string]access.Party
	// conns holds each party's storage connection by user; asking and
	// answering each party's connection in the requests and services
	// accounts, where it has a user there.
	conns, asking, answering map[string]*party
}

// party is a connection of one party with the asynchronous errors the
// server sent it.
type party struct {
	user    string
	nc      *nats.Conn
	js      jetstream.JetStream
	mu      sync.Mutex
	errs    []error
	waiters map[chan struct{}]bool // each poked on every asynchronous error
}

// watch returns a channel poked on each asynchronous error from now on,
// and a func that stops it.
func (p *party) watch() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.waiters[ch] = true
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		delete(p.waiters, ch)
		p.mu.Unlock()
	}
}

func (p *party) errors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.errs)
}

// violationIn returns err's text when it is a permissions violation for
// op on a subject is() accepts, else "".
func violationIn(err error, op string, is func(subject string) bool) string {
	_, rest, ok := strings.Cut(err.Error(), "Permissions Violation for "+op+" to \"")
	if !errors.Is(err, nats.ErrPermissionViolation) || !ok {
		return ""
	}
	if subject, _, _ := strings.Cut(rest, "\""); is(subject) {
		return err.Error()
	}
	return ""
}

// violation returns the first permissions violation for op ("Publish" or
// "Subscription") on a subject that is() accepts, among errors[from:].
func (p *party) violation(from int, op string, is func(subject string) bool) string {
	for _, err := range p.errors()[from:] {
		s := err.Error()
		_, rest, ok := strings.Cut(s, "Permissions Violation for "+op+" to \"")
		if !errors.Is(err, nats.ErrPermissionViolation) || !ok {
			continue
		}
		if subject, _, _ := strings.Cut(rest, "\""); is(subject) {
			return s
		}
	}
	return ""
}

func gen(t *testing.T, dir string) (*auth.Result, []access.Party) {
	t.Helper()
	f, err := meshfile.Parse("test.yaml", []byte(testMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, operators))
	if err != nil {
		t.Fatal(err)
	}
	res, err := auth.Gen(dir, parties, auth.Options{Source: "test.yaml", StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	return res, parties
}

func start(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	res, parties := gen(t, dir)
	// nats-server itself accepts the file.
	if _, err := server.ProcessConfigFile(res.Config); err != nil {
		t.Fatalf("nats-server refuses %s: %v", res.Config, err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: res.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	f := &fixture{dir: dir, srv: srv, parties: map[string]access.Party{}, conns: map[string]*party{},
		asking: map[string]*party{}, answering: map[string]*party{}}
	for _, p := range parties {
		f.parties[p.User] = p
		f.conns[p.User] = f.connect(t, p.User, res.Creds[p.User])
		for _, a := range p.Accounts() {
			switch a {
			case access.Requests:
				f.asking[p.User] = f.connect(t, p.User, auth.AccountCredsPath(dir, a, p.User))
			case access.Services:
				f.answering[p.User] = f.connect(t, p.User, auth.AccountCredsPath(dir, a, p.User))
			}
		}
	}
	// The seat makes the scoped parties' watches' consumers, as it does
	// in a running mesh.
	seat := access.SeatUser
	answerer, err := bus.NewAnswerer(f.answering[seat].nc, auth.AccountCredsPath(dir, access.Services, seat))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := bus.ServeWatches(ctx, answerer, f.conns[seat].js, nil); err != nil {
		t.Fatal(err)
	}
	return f
}

// connect dials the server as user with its credentials file, the way
// every component does (package bus), recording asynchronous errors.
func (f *fixture) connect(t *testing.T, user, creds string) *party {
	t.Helper()
	p := &party{user: user, waiters: map[chan struct{}]bool{}}
	// A connect cut before the server judged the credentials (a loaded
	// machine: see cutBeforeAnswer) is tried again, up to five times.
	var nc *nats.Conn
	var err error
	for range 5 {
		nc, err = nats.Connect(f.srv.URL(), nats.UserCredentials(creds), nats.CustomInboxPrefix(access.InboxPrefix(user)),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				p.mu.Lock()
				defer p.mu.Unlock()
				p.errs = append(p.errs, err)
				for ch := range p.waiters {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}))
		if err == nil || !cutBeforeAnswer(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Buckets bound as the product binds them for this user (package
	// bus: a scoped party asks no stream info).
	if js, err = bus.Scope(nc, js, creds); err != nil {
		t.Fatal(err)
	}
	p.nc, p.js = nc, js
	return p
}

// act is one use of the bus by one party.
type act struct {
	as     string
	do     access.Act
	target string // bucket or subject
	key    string // for Write and Read: a key (Write) or key pattern (Read)
	// probe, for Answer: a party and subject whose request the new
	// subscription must receive, to show it is allowed.
	probe [2]string
}

func (a act) String() string {
	s := fmt.Sprintf("%s %s %s", a.as, a.do, a.target)
	if a.key != "" {
		s += " " + a.key
	}
	return s
}

// outcome is what the server made of an act: done, or refused with the
// permissions violation it sent.
type outcome struct {
	done    bool
	refusal string
	err     error
}

// refusedOn returns the violation's operation and which subjects the
// server may name when it refuses a.
func refusedOn(a act) (string, func(string) bool) {
	stream := "KV_" + a.target
	switch a.do {
	case access.Write:
		return "Publish", func(s string) bool { return s == "$KV."+a.target+"."+a.key }
	case access.Read:
		return "Publish", func(s string) bool {
			// A scoped party asks the seat for its watch in the
			// requests account; a reader of every bucket makes its
			// consumer itself.
			watch, _ := access.WatchSubject(a.as, a.target, a.key)
			return s == "$JS.API.STREAM.INFO."+stream || s == watch ||
				strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE."+stream+".") && strings.HasSuffix(s, ".$KV."+a.target+"."+a.key)
		}
	case access.Make:
		return "Publish", func(s string) bool {
			return s == "$JS.API.INFO" || s == "$JS.API.STREAM.INFO."+stream || s == "$JS.API.STREAM.CREATE."+stream
		}
	case access.Answer:
		return "Subscription", func(s string) bool { return s == a.target }
	}
	return "Publish", func(s string) bool { return s == a.target }
}

// try does a as its party and waits for the act to be done or for the
// server's permissions violation, whichever comes first (no act waits for
// a timeout to be refused).
func (f *fixture) try(t *testing.T, a act) outcome {
	t.Helper()
	p := f.conns[a.as]
	switch a.do {
	case access.Ask:
		// A party that asks nothing has no user in the requests
		// account: its storage user tries.
		if q := f.asking[a.as]; q != nil {
			p = q
		}
	case access.Answer:
		// A connection of its own, as a second instance of a responder
		// runs: the party's running responder answers the probe. A party
		// that answers nothing tries as its storage user.
		creds := auth.AccountCredsPath(f.dir, access.Services, a.as)
		if _, err := os.Stat(creds); err != nil {
			creds = auth.CredsPath(f.dir, a.as)
		}
		p = f.connect(t, a.as, creds)
	}
	if p == nil {
		t.Fatalf("no party %s", a.as)
	}
	seen, stop := p.watch()
	defer stop()
	from := len(p.errors())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- f.run(ctx, p, a) }()
	op, is := refusedOn(a)
	for {
		select {
		case err := <-result:
			if err == nil {
				return outcome{done: true}
			}
			if v := p.violation(from, op, is); v != "" {
				return outcome{refusal: v}
			}
			// A watch's refusal comes on the party's requests
			// connection, and its watch returns it (package bus).
			if v := violationIn(err, op, is); v != "" {
				return outcome{refusal: v}
			}
			return outcome{err: err}
		case <-seen:
			if v := p.violation(from, op, is); v != "" {
				cancel()
				<-result
				return outcome{refusal: v}
			}
		case <-ctx.Done():
			return outcome{err: fmt.Errorf("%s: neither done nor refused: %w (async errors %v)", a, ctx.Err(), p.errors()[from:])}
		}
	}
}

// run does a on p's connection and returns once it is done.
func (f *fixture) run(ctx context.Context, p *party, a act) error {
	switch a.do {
	case access.Write:
		_, err := p.js.Publish(ctx, "$KV."+a.target+"."+a.key, []byte(`{}`))
		return err
	case access.Read:
		kv, err := p.js.KeyValue(ctx, a.target)
		if err != nil {
			return err
		}
		w, err := kv.Watch(ctx, a.key)
		if err != nil {
			return err
		}
		defer w.Stop()
		for e := range w.Updates() {
			if e == nil { // the initial values are done
				return nil
			}
		}
		return ctx.Err()
	case access.Make:
		// As the product makes a bucket: bounded (the account refuses a
		// stream with no bound), refusing rollups.
		_, err := bus.Bucket(ctx, p.js, a.target, 0)
		return err
	case access.Ask:
		_, err := p.nc.RequestWithContext(ctx, a.target, []byte(`{}`))
		return err
	case access.Answer:
		got := make(chan struct{}, 1)
		sub, err := p.nc.Subscribe(a.target, func(*nats.Msg) {
			select {
			case got <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		if err := p.nc.FlushWithContext(ctx); err != nil {
			return err
		}
		if a.probe[0] == "" {
			<-ctx.Done() // refused (or cancelled)
			return ctx.Err()
		}
		// A request the subscription must receive; the running responder
		// answers it.
		if _, err := f.asking[a.probe[0]].nc.RequestWithContext(ctx, a.probe[1], []byte(`{}`)); err != nil {
			return fmt.Errorf("probe %s: %w", a.probe[1], err)
		}
		select {
		case <-got:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("no such act %q", a.do)
}

// serve runs the responders of the verbs as their own parties, replying
// to every request: the vault's, the ask router's and the seat's verb.
func (f *fixture) serve(t *testing.T) {
	t.Helper()
	for user, subjects := range map[string][]string{
		access.VaultUser:  {access.SecretWildcard, access.ConsumersWild, access.Rotate},
		access.RouterUser: {access.AsksWildcard, access.AnswerWildcard, access.WithdrawWildcard, access.ListAsks},
		access.SeatUser:   {access.Provisioning, access.Unkeep},
	} {
		p := f.answering[user]
		for _, s := range subjects {
			if _, err := p.nc.QueueSubscribe(s, "q", func(m *nats.Msg) { _ = m.Respond([]byte(`{}`)) }); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// makeBuckets makes, as the seat (which alone may make buckets), every
// bucket the rows use, as a mesh's setup makes them (package bus: bounded,
// refusing rollups).
func (f *fixture) makeBuckets(t *testing.T) {
	t.Helper()
	// Generous: some twenty buckets, made on a loaded machine (over 10 s
	// at load 30, with the package's tests in parallel).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seat := f.conns[access.SeatUser]
	for _, b := range append(access.Buckets(), "a_bound", "b_bound", "mesh-vault_bound") {
		var err error
		if b == mesh.ClientsBucket {
			_, err = bus.LeaseBucket(ctx, seat.js, b, time.Minute)
		} else {
			_, err = bus.Bucket(ctx, seat.js, b, 0)
		}
		if err != nil {
			t.Fatalf("the seat makes %s: %v (async %v)", b, err, seat.errors())
		}
	}
}

// row is one forbidden act of section 10 and its allowed neighbour.
type row struct {
	name      string
	forbidden act
	allowed   act
}

// namedRows are the acts section 10 forbids, each with the neighbouring act
// that the same table allows.
var namedRows = []row{
	{"client of n2 writes n1 applied", act{as: "client-n2", do: access.Write, target: mesh.AppliedBucket, key: "n1.m"},
		act{as: "client-n1", do: access.Write, target: mesh.AppliedBucket, key: "n1.m"}},
	{"client of n2 writes n1 collect", act{as: "client-n2", do: access.Write, target: mesh.CollectBucket, key: "n1.environment.m"},
		act{as: "client-n1", do: access.Write, target: mesh.CollectBucket, key: "n1.environment.m"}},
	{"provider a writes b_bound", act{as: "a", do: access.Write, target: "b_bound", key: "n2.n.thing"},
		act{as: "a", do: access.Write, target: "a_bound", key: "n1.m.thing"}},
	{"client of n1 writes a_bound", act{as: "client-n1", do: access.Write, target: "a_bound", key: "n1.m.thing"},
		act{as: "a", do: access.Write, target: "a_bound", key: "n1.m.thing"}},
	{"provider writes provisions", act{as: "a", do: access.Write, target: mesh.ProvisionsBucket, key: "n1.m.thing"},
		act{as: access.SeatUser, do: access.Write, target: mesh.ProvisionsBucket, key: "n1.m.thing"}},
	{"provider writes plans", act{as: "a", do: access.Write, target: mesh.PlansBucket, key: "n1.a"},
		act{as: access.SeatUser, do: access.Write, target: mesh.PlansBucket, key: "n1.a"}},
	{"client writes plans", act{as: "client-n1", do: access.Write, target: mesh.PlansBucket, key: "n1.m"},
		act{as: access.SeatUser, do: access.Write, target: mesh.PlansBucket, key: "n1.m"}},
	{"client writes provisions", act{as: "client-n1", do: access.Write, target: mesh.ProvisionsBucket, key: "n1.m.thing"},
		act{as: access.SeatUser, do: access.Write, target: mesh.ProvisionsBucket, key: "n1.m.thing"}},
	{"operator writes provisions", act{as: "operator", do: access.Write, target: mesh.ProvisionsBucket, key: "n1.m.thing"},
		act{as: access.SeatUser, do: access.Write, target: mesh.ProvisionsBucket, key: "n1.m.thing"}},
	{"operator writes refused", act{as: "operator", do: access.Write, target: mesh.RefusedBucket, key: "n1.m"},
		act{as: access.SeatUser, do: access.Write, target: mesh.RefusedBucket, key: "n1.m"}},
	{"vault writes registry", act{as: access.VaultUser, do: access.Write, target: mesh.RegistryBucket, key: "secret"},
		act{as: access.SeatUser, do: access.Write, target: mesh.RegistryBucket, key: "secret"}},
	{"operator takes the seat's lease", act{as: "operator", do: access.Write, target: mesh.SeatBucket, key: mesh.HolderKey},
		act{as: access.SeatUser, do: access.Write, target: mesh.SeatBucket, key: mesh.HolderKey}},
	{"operator forges an ask's record", act{as: "operator", do: access.Write, target: mesh.RecordsBucket, key: "retire-x-1"},
		act{as: access.RouterUser, do: access.Write, target: mesh.RecordsBucket, key: "retire-x-1"}},
	{"seat writes placement", act{as: access.SeatUser, do: access.Write, target: mesh.PlacementBucket, key: "n1"},
		act{as: "operator", do: access.Write, target: mesh.PlacementBucket, key: "n1"}},
	{"client writes have", act{as: "client-n1", do: access.Write, target: mesh.HaveBucket, key: "n1.m"},
		act{as: "alice", do: access.Write, target: mesh.HaveBucket, key: "n1.m"}},
	{"seat writes applied", act{as: access.SeatUser, do: access.Write, target: mesh.AppliedBucket, key: "n1.m"},
		act{as: "client-n1", do: access.Write, target: mesh.AppliedBucket, key: "n1.m"}},

	{"module m asks n's secrets", act{as: "m", do: access.Ask, target: "mesh-vault.secret.n.m"},
		act{as: "n", do: access.Ask, target: "mesh-vault.secret.n.n"}},
	{"module m asks its secrets as n", act{as: "m", do: access.Ask, target: "mesh-vault.secret.m.n"},
		act{as: "m", do: access.Ask, target: "mesh-vault.secret.m.m"}},
	{"client of n2 asks m's secrets", act{as: "client-n2", do: access.Ask, target: "mesh-vault.secret.m.client-n2"},
		act{as: "client-n1", do: access.Ask, target: "mesh-vault.secret.m.client-n1"}},
	{"client of n1 asks m's secrets as m", act{as: "client-n1", do: access.Ask, target: "mesh-vault.secret.m.m"},
		act{as: "client-n1", do: access.Ask, target: "mesh-vault.secret.m.client-n1"}},
	{"client of n2 asks m's secrets as client of n1", act{as: "client-n2", do: access.Ask, target: "mesh-vault.secret.m.client-n1"},
		act{as: "client-n1", do: access.Ask, target: "mesh-vault.secret.m.client-n1"}},
	{"operator asks m's secrets", act{as: "operator", do: access.Ask, target: "mesh-vault.secret.m.operator"},
		act{as: "m", do: access.Ask, target: "mesh-vault.secret.m.m"}},
	{"provider b asks a's consumers", act{as: "b", do: access.Ask, target: "mesh-vault.consumers.a.b"},
		act{as: "a", do: access.Ask, target: "mesh-vault.consumers.a.a"}},
	{"client of n2 asks a's consumers", act{as: "client-n2", do: access.Ask, target: "mesh-vault.consumers.a.client-n2"},
		act{as: "client-n1", do: access.Ask, target: "mesh-vault.consumers.a.client-n1"}},
	{"client of n1 asks a's consumers as a", act{as: "client-n1", do: access.Ask, target: "mesh-vault.consumers.a.a"},
		act{as: "client-n1", do: access.Ask, target: "mesh-vault.consumers.a.client-n1"}},
	{"client answers an ask", act{as: "client-n1", do: access.Ask, target: "mesh-asks.answer.client-n1"},
		act{as: "operator", do: access.Ask, target: "mesh-asks.answer.operator"}},
	{"provider answers an ask", act{as: "a", do: access.Ask, target: "mesh-asks.answer.a"},
		act{as: "operator", do: access.Ask, target: "mesh-asks.answer.operator"}},
	{"operator answers under another's name", act{as: "alice", do: access.Ask, target: "mesh-asks.answer.operator"},
		act{as: "alice", do: access.Ask, target: "mesh-asks.answer.alice"}},
	{"module raises an ask as the seat", act{as: "m", do: access.Ask, target: "asks.mesh-provisioner"},
		act{as: access.SeatUser, do: access.Ask, target: "asks.mesh-provisioner"}},
	{"provider withdraws the seat's ask", act{as: "a", do: access.Ask, target: "mesh-asks.withdraw.mesh-provisioner"},
		act{as: access.SeatUser, do: access.Ask, target: "mesh-asks.withdraw.mesh-provisioner"}},
	{"client rotates a credential", act{as: "client-n1", do: access.Ask, target: access.Rotate},
		act{as: "operator", do: access.Ask, target: access.Rotate}},
	{"client asks the provisioning verb", act{as: "client-n1", do: access.Ask, target: access.Provisioning},
		act{as: "operator", do: access.Ask, target: access.Provisioning}},
	{"client unkeeps a key", act{as: "client-n1", do: access.Ask, target: access.Unkeep},
		act{as: "operator", do: access.Ask, target: access.Unkeep}},

	{"client answers the vault's secret verb", act{as: "client-n1", do: access.Answer, target: access.SecretWildcard},
		act{as: access.VaultUser, do: access.Answer, target: access.SecretWildcard, probe: [2]string{"m", "mesh-vault.secret.m.m"}}},
	{"operator answers for the ask router", act{as: "operator", do: access.Answer, target: access.AnswerWildcard},
		act{as: access.RouterUser, do: access.Answer, target: access.AnswerWildcard, probe: [2]string{"operator", "mesh-asks.answer.operator"}}},
	{"provider answers the provisioning verb", act{as: "a", do: access.Answer, target: access.Provisioning},
		act{as: access.SeatUser, do: access.Answer, target: access.Provisioning, probe: [2]string{"operator", access.Provisioning}}},
	{"module reads another's replies", act{as: "m", do: access.Answer, target: "_INBOX_n.>"},
		act{as: "n", do: access.Ask, target: "mesh-vault.secret.n.n"}},
	{"client listens to writes of plans", act{as: "client-n1", do: access.Answer, target: "$KV." + mesh.PlansBucket + ".>"},
		act{as: "client-n1", do: access.Read, target: mesh.PlansBucket, key: "n1.>"}},

	{"client of n2 reads n1 plans", act{as: "client-n2", do: access.Read, target: mesh.PlansBucket, key: "n1.>"},
		act{as: "client-n1", do: access.Read, target: mesh.PlansBucket, key: "n1.>"}},
	{"client reads every plan", act{as: "client-n1", do: access.Read, target: mesh.PlansBucket, key: ">"},
		act{as: "operator", do: access.Read, target: mesh.PlansBucket, key: ">"}},
	{"client of n2 reads n1 entries of a", act{as: "client-n2", do: access.Read, target: "a_bound", key: "n1.>"},
		act{as: "client-n1", do: access.Read, target: "a_bound", key: "n1.>"}},
	{"module reads provisions", act{as: "m", do: access.Read, target: mesh.ProvisionsBucket, key: ">"},
		act{as: "a", do: access.Read, target: mesh.ProvisionsBucket, key: ">"}},
	{"client reads the asks' records", act{as: "client-n1", do: access.Read, target: mesh.RecordsBucket, key: ">"},
		act{as: "alice", do: access.Read, target: mesh.RecordsBucket, key: ">"}},

	{"provider makes a bucket", act{as: "a", do: access.Make, target: "c_bound"},
		act{as: access.SeatUser, do: access.Make, target: mesh.NeedsBucket}},
	{"client makes a bucket", act{as: "client-n1", do: access.Make, target: "d_bound"},
		act{as: access.SeatUser, do: access.Make, target: mesh.NeedsBucket}},
	{"operator makes a bucket", act{as: "alice", do: access.Make, target: "e_bound"},
		act{as: access.SeatUser, do: access.Make, target: mesh.NeedsBucket}},
}

// generatedRows makes, from the table itself, one row per party and per
// key written or verb asked by another party that the table does not let
// it write or ask; the allowed neighbour is the party the table lets.
func generatedRows(parties map[string]access.Party) []row {
	var rows []row
	seen := map[string]bool{}
	users := make([]string, 0, len(parties))
	for u := range parties {
		users = append(users, u)
	}
	slices.Sort(users)
	for _, owner := range users {
		for _, r := range parties[owner].Rules() {
			if r.Act != access.Write && r.Act != access.Ask {
				continue
			}
			key := strings.ReplaceAll(r.Keys, ">", "x")
			for _, other := range users {
				if parties[other].Allows(r.Act, r.Target, key) {
					continue
				}
				a := act{as: other, do: r.Act, target: r.Target, key: key}
				if seen[a.String()] {
					continue
				}
				seen[a.String()] = true
				rows = append(rows, row{name: "table/" + a.String(), forbidden: a,
					allowed: act{as: owner, do: r.Act, target: r.Target, key: key}})
			}
		}
	}
	return rows
}

// TestSection10 proves against a real server, started from the generated
// configuration, that each forbidden act of spec section 10 is refused
// with the server's permissions violation, and that its allowed neighbour
// is done.
func TestSection10(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.makeBuckets(t)
	f.serve(t)
	rows := append(slices.Clone(namedRows), generatedRows(f.parties)...)
	if len(rows) < 100 {
		t.Fatalf("%d rows; want the table's", len(rows))
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			fp, ap := f.parties[r.forbidden.as], f.parties[r.allowed.as]
			key := r.forbidden.key
			if fp.Allows(r.forbidden.do, r.forbidden.target, key) {
				t.Fatalf("table allows %s; the row says it is forbidden", r.forbidden)
			}
			if !ap.Allows(r.allowed.do, r.allowed.target, r.allowed.key) {
				t.Fatalf("table forbids %s; the row says it is allowed", r.allowed)
			}
			if got := f.try(t, r.forbidden); got.refusal == "" {
				t.Errorf("%s = done %v, %v; want a permissions violation", r.forbidden, got.done, got.err)
			}
			if got := f.try(t, r.allowed); !got.done {
				t.Errorf("%s = %v, %v; want done", r.allowed, got.refusal, got.err)
			}
		})
	}
}

// TestUnauthenticated proves that a connection without credentials, or
// with a user the mesh's account did not sign, is refused before it can do
// anything, while a party's credentials connect.
func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	f := start(t)
	if nc, err := dial(f.srv.URL()); err == nil || !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("connect without credentials = %v; want %v", err, nats.ErrAuthorization)
	}
	// A user of a mesh generated elsewhere: another account's key.
	other := t.TempDir()
	res, _ := gen(t, other)
	if nc, err := dial(f.srv.URL(), nats.UserCredentials(res.Creds["operator"])); err == nil || !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("connect as another mesh's operator = %v; want %v", err, nats.ErrAuthorization)
	}
	nc, err := dial(f.srv.URL(), nats.UserCredentials(auth.CredsPath(f.dir, "operator")))
	if err != nil {
		t.Fatalf("connect as the operator: %v", err)
	}
	nc.Close()
}

// TestGenAgainKeepsKeys runs Gen twice: the second run makes no key, keeps
// every user's key, and revokes a party that is gone, whose credentials a
// server from the new configuration refuses while a kept user connects.
func TestGenAgainKeepsKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, parties := gen(t, dir)
	before, err := os.ReadFile(filepath.Join(dir, auth.KeysDir, "account.nk"))
	if err != nil {
		t.Fatal(err)
	}
	n2, err := os.ReadFile(first.Creds["client-n2"])
	if err != nil {
		t.Fatal(err)
	}
	var fewer []access.Party
	for _, p := range parties {
		if p.User != "client-n2" {
			fewer = append(fewer, p)
		}
	}
	again, err := auth.Gen(dir, fewer, auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Made) != 0 {
		t.Errorf("Gen again made keys for %v; want none", again.Made)
	}
	if !slices.Equal(again.Revoked, []string{"client-n2"}) {
		t.Errorf("Gen again revoked %v; want [client-n2]", again.Revoked)
	}
	after, err := os.ReadFile(filepath.Join(dir, auth.KeysDir, "account.nk"))
	if err != nil || string(after) != string(before) {
		t.Errorf("the account's seed changed (%v)", err)
	}
	moved := filepath.Join(dir, auth.RevokedDir, "client-n2"+auth.CredsExt)
	if b, err := os.ReadFile(moved); err != nil || string(b) != string(n2) {
		t.Errorf("client-n2's credentials not moved to %s (%v)", moved, err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: again.Config})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if nc, err := dial(srv.URL(), nats.UserCredentials(moved)); err == nil {
		nc.Close()
		t.Errorf("a revoked client connects")
	}
	nc, err := dial(srv.URL(), nats.UserCredentials(again.Creds["client-n1"]))
	if err != nil {
		t.Fatalf("a kept client: %v", err)
	}
	nc.Close()
}
