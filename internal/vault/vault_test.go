package vault_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

var (
	vaultRef    = mesh.Ref{Module: mesh.VaultModule, Node: "control"}
	postgres    = mesh.Ref{Module: "postgres", Node: "control"}
	gitea       = mesh.Ref{Module: "gitea", Node: "ace"}
	vaultwarden = mesh.Ref{Module: "vaultwarden", Node: "ace"}
)

// users are the bus users of the test server, in three accounts as "auth
// gen" makes them: "admin" in MESH (JetStream) for the vault's buckets
// and the seat; "vault" in SVC, which answers the vault's verbs and
// exports them; in REQ, which imports them sharing the asker's identity,
// modules that may ask only on the subjects of their own name, the
// clients of ace and g14 on those of the modules placed there, and an
// operator who may rotate.
func serverConfig(modules ...string) string {
	// One export and import per verb, as "auth gen" makes them: the
	// server routes an answer aimed at another verb's subject back into
	// the services account (no cycle of one export).
	verbs := func(format string) string {
		var out []string
		for _, v := range []string{kit.SecretVerb + ".*.*", kit.ConsumersVerb + ".*.*", kit.RotateVerb} {
			out = append(out, fmt.Sprintf(format, v))
		}
		return strings.Join(out, ", ")
	}
	var b strings.Builder
	b.WriteString("accounts {\n MESH { jetstream: enabled, users: [{user: admin, password: admin}] }\n")
	b.WriteString(` SVC { users: [{user: vault, password: vault, permissions: {publish: {deny: [">"]}, subscribe: {allow: ["mesh-vault.>"]}, allow_responses: true}}],
  exports: [` + verbs(`{service: %q, response: singleton}`) + `] }` + "\n")
	b.WriteString(" REQ { imports: [" + verbs(`{service: {account: SVC, subject: %q}, share: true}`) + "], users: [\n")
	user := func(name string, subjects ...string) {
		fmt.Fprintf(&b, `{user: %[1]s, password: %[1]s, permissions: {publish: {allow: ["%[2]s"]}, subscribe: {allow: ["_INBOX_%[1]s.>"]}}}`+"\n",
			name, strings.Join(subjects, `", "`))
	}
	for _, m := range modules {
		user(m, kit.SecretSubject(m, m), kit.ConsumersSubject(m, m))
	}
	user("client-ace", kit.SecretSubject("gitea", "client-ace"), kit.SecretSubject("vaultwarden", "client-ace"))
	user("client-g14", kit.SecretSubject("gitea", "client-g14"))
	user("operator", kit.RotateVerb)
	b.WriteString("] }\n}\n")
	return b.String()
}

type fixture struct {
	url   string // as admin
	svc   string // as the vault's user in SVC
	opURL string // as the operator in REQ
	seat  *kittest.Seat
	vault *vault.Vault
	dir   string
	conns map[string]*nats.Conn
	said  *kittest.Said
	// grace is the rotation grace of the vaults started (0: the default).
	grace time.Duration
	// stop stops the running vault: its context cancelled and its
	// connection closed, so that it answers nothing more.
	stop func()
}

func start(t *testing.T) *fixture {
	t.Helper()
	s := bustest.Server(t, serverConfig("gitea", "vaultwarden", "postgres", "rotate"))
	f := &fixture{url: strings.Replace(s.URL(), "nats://", "nats://admin:admin@", 1), dir: t.TempDir(), conns: map[string]*nats.Conn{},
		svc: strings.Replace(s.URL(), "nats://", "nats://vault:vault@", 1), opURL: strings.Replace(s.URL(), "nats://", "nats://operator:operator@", 1)}
	f.seat = kittest.NewSeat(t, f.url)
	f.seat.Judge(mesh.VaultModule)
	for _, m := range []string{"gitea", "vaultwarden", "postgres", "client-ace", "client-g14"} {
		nc, _, err := bus.Connect(bus.Dial{URL: s.URL(), Name: m, User: m, Password: m})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		f.conns[m] = nc
	}
	f.startVault(t)
	return f
}

// startVault starts a vault on f's directory, after stopping the one
// running (a restart: two vaults on one store would answer the same verbs
// with their own values).
func (f *fixture) startVault(t *testing.T) {
	t.Helper()
	if f.stop != nil {
		f.stop()
	}
	nc, js := kittest.Connect(t, f.url, mesh.VaultModule)
	anc, _ := kittest.Connect(t, f.svc, mesh.VaultModule)
	log, said := kittest.Log()
	f.said = said
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the vault said:\n%s", said.Lines())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := vault.Start(ctx, vault.Config{Dir: f.dir, Node: vaultRef.Node, RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, Grace: f.grace,
		Answer: bus.AnswererIn(anc, "SVC")}, nc, js, log)
	if err != nil {
		t.Fatal(err)
	}
	<-v.Ready()
	f.vault = v
	f.stop = func() { cancel(); nc.Close(); anc.Close() }
}

// need writes consumer's database provision of postgres and its own
// credential, as the seat composes them, and returns both keys.
func (f *fixture) need(consumer mesh.Ref, local string) (db, cred mesh.ProvisionKey) {
	key, p := kittest.Requirement(consumer, "database", local, postgres)
	ck, cp, p := kittest.Credential(key, p, vaultRef)
	f.seat.Need(ck, cp)
	f.seat.Need(key, p)
	return key, ck
}

// startWithGiteaSecrets starts the fixture with gitea planned on ace and
// g14 with its secret "secret-key", and returns once client-g14 is
// answered g14's.
func startWithGiteaSecrets(t *testing.T) *fixture {
	t.Helper()
	f := start(t)
	_, js := kittest.Connect(t, f.url, "planner")
	ctx := bustest.Context(t)
	plans, err := bus.Bucket(ctx, js, mesh.PlansBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"ace", "g14"} {
		plan, _ := json.Marshal(mesh.Plan{Node: node, Module: "gitea", Secrets: []string{"secret-key"}})
		if _, err := plans.Put(ctx, node+".gitea", plan); err != nil {
			t.Fatal(err)
		}
	}
	bustest.WaitFor(t, 0, "gitea's secret on g14", func() bool {
		a, err := ask(t, f, "client-g14", "gitea", false, kit.VaultRequest{})
		return err == nil && len(a.Secrets) == 1
	})
	return f
}

func waitProvided(t *testing.T, seat *kittest.Seat, key mesh.ProvisionKey, generation int64) {
	t.Helper()
	bustest.WaitFor(t, 0, fmt.Sprintf("%s provided at generation %d", key, generation), func() bool {
		p, ok := seat.Get(key)
		return ok && p.State == mesh.Provided && p.Reference != nil && p.Reference.Generation == generation
	})
}

func ask(t *testing.T, f *fixture, asUser, subjectUser string, consumers bool, req kit.VaultRequest) (kit.VaultAnswer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if consumers {
		return kit.AskConsumersAs(ctx, f.conns[asUser], subjectUser, asUser, req)
	}
	return kit.AskSecretsAs(ctx, f.conns[asUser], subjectUser, asUser, req)
}

func values(a kit.VaultAnswer) map[string]string {
	m := map[string]string{}
	for _, c := range a.Credentials {
		m[c.Key] = fmt.Sprintf("%s@%d", c.Value, c.Generation)
	}
	return m
}

func TestVaultProvidesCredentialsAndAnswersOnlyTheirOwners(t *testing.T) {
	f := start(t)
	db, cred := f.need(gitea, "main")
	_, other := f.need(vaultwarden, "")
	waitProvided(t, f.seat, cred, 1)
	waitProvided(t, f.seat, other, 1)
	e, ok := kittest.Entry(t, mustJS(t, f.url), mesh.VaultModule, cred)
	if !ok || !reflect.DeepEqual(e, mesh.Entry{State: mesh.Provided, VaultName: cred.String(), Generation: 1}) {
		t.Errorf("entry at %s = %+v, %v; want provided, vault name %s, generation 1", cred, e, ok, cred)
	}
	if p, _ := f.seat.Get(cred); p.Reference.ID != "ace.gitea.credential.postgres_database_main" {
		t.Errorf("reference of %s = %+v; want the vault name ace.gitea.credential.postgres_database_main", cred, p.Reference)
	}

	mine, err := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(mine.Credentials) != 1 || mine.Credentials[0].Key != cred.String() || mine.Credentials[0].Generation != 1 || len(mine.Credentials[0].Value) != 43 {
		t.Fatalf("gitea's own credentials = %+v; want only %s at generation 1", mine.Credentials, cred)
	}
	gitPass := mine.Credentials[0].Value

	// The provider gets its consumers' credentials, narrowed by key.
	cons, err := ask(t, f, "postgres", "postgres", true, kit.VaultRequest{Key: db.String()})
	if err != nil {
		t.Fatal(err)
	}
	if got := values(cons); len(got) != 1 || got[cred.String()] != gitPass+"@1" {
		t.Errorf("postgres' consumers for %s = %v; want gitea's credential only", db, got)
	}
	// A request narrowed to one key answers only from that provision, and
	// only what the asker may have.
	for _, c := range []struct {
		user      string
		consumers bool
		key       string
		want      int
	}{
		{"gitea", false, cred.String(), 1},      // its own credential, by the credential's key
		{"gitea", false, db.String(), 1},        // the credential its database key depends on
		{"gitea", false, other.String(), 0},     // vaultwarden's credential
		{"postgres", true, other.String(), 0},   // a credential key is not postgres' to provide
		{"postgres", true, "ace.gitea.nope", 0}, // no such provision
	} {
		got, err := ask(t, f, c.user, c.user, c.consumers, kit.VaultRequest{Key: c.key})
		if err != nil || len(got.Credentials) != c.want || (c.want == 1 && got.Credentials[0].Key != cred.String()) {
			t.Errorf("%s asking (consumers %v) for key %s = %+v, %v; want %d credential(s)", c.user, c.consumers, c.key, got.Credentials, err, c.want)
		}
	}
	all, _ := ask(t, f, "postgres", "postgres", true, kit.VaultRequest{})
	if got := values(all); len(got) != 2 {
		t.Errorf("postgres' consumers = %v; want gitea's and vaultwarden's credentials", got)
	}

	// Another module reads nothing of gitea's through its own subjects...
	theirs, err := ask(t, f, "vaultwarden", "vaultwarden", false, kit.VaultRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := values(theirs); len(got) != 1 || got[cred.String()] != "" || got[other.String()] == "" {
		t.Errorf("vaultwarden's own credentials = %v; want its own only", got)
	}
	notProvider, err := ask(t, f, "gitea", "gitea", true, kit.VaultRequest{})
	if err != nil || len(notProvider.Credentials) != 0 {
		t.Errorf("gitea's consumers = %+v, %v; want none (gitea provides nothing)", notProvider.Credentials, err)
	}
	// ...and asking as another user is refused by the bus.
	if a, err := ask(t, f, "vaultwarden", "gitea", false, kit.VaultRequest{}); !errors.Is(err, kit.ErrRefused) || len(a.Credentials) != 0 {
		t.Errorf("vaultwarden asking as gitea = %+v, %v; want the server's refusal (ErrRefused)", a.Credentials, err)
	}
	if a, err := ask(t, f, "vaultwarden", "postgres", true, kit.VaultRequest{}); !errors.Is(err, kit.ErrRefused) || len(a.Credentials) != 0 {
		t.Errorf("vaultwarden asking as postgres = %+v, %v; want the server's refusal (ErrRefused)", a.Credentials, err)
	}
}

func TestVaultAnswersAModulesOwnSecrets(t *testing.T) {
	f := start(t)
	_, js := kittest.Connect(t, f.url, "planner")
	ctx := bustest.Context(t)
	plans, err := bus.Bucket(ctx, js, mesh.PlansBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := json.Marshal(mesh.Plan{Node: "ace", Module: "gitea", Secrets: []string{"secret-key"}})
	plans.Put(ctx, "ace.gitea", plan)
	other, _ := json.Marshal(mesh.Plan{Node: "ace", Module: "vaultwarden", Secrets: []string{"admin-token"}})
	plans.Put(ctx, "ace.vaultwarden", other)

	var a kit.VaultAnswer
	bustest.WaitFor(t, 0, "gitea's secret", func() bool {
		a, err = ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
		return err == nil && len(a.Secrets) == 1
	})
	s := a.Secrets[0]
	if s.Node != "ace" || s.Module != "gitea" || s.Name != "secret-key" || s.VaultName != "ace.gitea.secret.secret-key" || s.Generation != 1 || len(s.Value) != 43 {
		t.Errorf("gitea's secret = %+v; want ace gitea secret-key, vault name ace.gitea.secret.secret-key, generation 1", s)
	}
	again, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if len(again.Secrets) != 1 || again.Secrets[0] != s {
		t.Errorf("asked again = %+v; want the same secret kept", again.Secrets)
	}
	theirs, _ := ask(t, f, "vaultwarden", "vaultwarden", false, kit.VaultRequest{})
	if len(theirs.Secrets) != 1 || theirs.Secrets[0].Name != "admin-token" || theirs.Secrets[0].Value == s.Value {
		t.Errorf("vaultwarden's secrets = %+v; want its admin-token only", theirs.Secrets)
	}

	// Narrowed to a node (as a node's client asks): that node's plan and
	// credentials only.
	g14 := mesh.Ref{Module: "gitea", Node: "g14"}
	onG14, _ := json.Marshal(mesh.Plan{Node: "g14", Module: "gitea", Secrets: []string{"secret-key"}})
	plans.Put(ctx, "g14.gitea", onG14)
	_, aceCred := f.need(gitea, "")
	_, g14Cred := f.need(g14, "")
	waitProvided(t, f.seat, aceCred, 1)
	waitProvided(t, f.seat, g14Cred, 1)
	bustest.WaitFor(t, 0, "gitea's secrets on both nodes", func() bool {
		a, err = ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
		return err == nil && len(a.Secrets) == 2 && len(a.Credentials) == 2
	})
	for _, c := range []struct {
		node, cred string
		secrets    int
	}{
		{"ace", aceCred.String(), 1},
		{"g14", g14Cred.String(), 1},
		{"nowhere", "", 0},
	} {
		got, err := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{Node: c.node})
		var creds []string
		for _, cr := range got.Credentials {
			creds = append(creds, cr.Key)
		}
		var nodes []string
		for _, sc := range got.Secrets {
			nodes = append(nodes, sc.Node)
		}
		wantCreds := []string{}
		if c.cred != "" {
			wantCreds = []string{c.cred}
		}
		if err != nil || fmt.Sprint(creds) != fmt.Sprint(wantCreds) || len(nodes) != c.secrets || (c.secrets == 1 && nodes[0] != c.node) {
			t.Errorf("gitea's values on %s = credentials %v, secrets of nodes %v, %v; want credentials %v and %d secret(s) of %s",
				c.node, creds, nodes, err, wantCreds, c.secrets, c.node)
		}
	}
}

func TestVaultRotatesAndRetires(t *testing.T) {
	f := start(t)
	_, cred := f.need(gitea, "main")
	waitProvided(t, f.seat, cred, 1)
	first, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})

	// Rotation by the verb (what "vault rotate KEY" asks).
	onc, _ := kittest.Connect(t, f.opURL, "operator")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ra, err := kit.AskRotateNow(ctx, onc, cred.String())
	if err != nil || ra.Generation != 2 || ra.VaultName != cred.String() {
		t.Fatalf("AskRotate = %+v, %v; want generation 2", ra, err)
	}
	waitProvided(t, f.seat, cred, 2)
	second, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if len(second.Credentials) != 1 || second.Credentials[0].Generation != 2 || second.Credentials[0].Value == first.Credentials[0].Value {
		t.Errorf("after rotation gitea gets %+v; want a new value at generation 2", second.Credentials)
	}
	if _, err := kit.AskRotate(ctx, onc, "ace.gitea.credential.nothing"); !errors.Is(err, kit.ErrVault) || !strings.Contains(err.Error(), "no value under this name") {
		t.Errorf("AskRotate of an unknown key = %v; want the vault's refusal", err)
	}

	// A restarted vault keeps the value and generation.
	f.startVault(t)
	third, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if fmt.Sprint(values(third)) != fmt.Sprint(values(second)) {
		t.Errorf("after a restart gitea gets %v; want %v", values(third), values(second))
	}

	// Retired on yes: the value is forgotten, the entry and the key go.
	f.seat.Retire(cred)
	f.seat.Answer(cred, "yes")
	bustest.WaitFor(t, 0, "the credential key retired", func() bool { _, ok := f.seat.Get(cred); return !ok })
	if _, ok := kittest.Entry(t, mustJS(t, f.url), mesh.VaultModule, cred); ok {
		t.Error("the retired credential's entry is still there")
	}
	gone, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if len(gone.Credentials) != 0 {
		t.Errorf("after retirement gitea gets %+v; want nothing", gone.Credentials)
	}

	// Issued again: the new value takes the generation after the retired
	// one's, so its reference {vault name, generation} differs from every
	// older value's.
	_, again := f.need(gitea, "main")
	if again != cred {
		t.Fatalf("the credential key issued again = %s; want %s", again, cred)
	}
	waitProvided(t, f.seat, cred, 3)
	fourth, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
	if len(fourth.Credentials) != 1 || fourth.Credentials[0].Generation != 3 || fourth.Credentials[0].Value == second.Credentials[0].Value {
		t.Errorf("issued again gitea gets %+v; want a new value at generation 3", fourth.Credentials)
	}
}

func TestVaultFailsAProvisionThatIsNoCredential(t *testing.T) {
	f := start(t)
	key, p := kittest.Requirement(gitea, "database", "", vaultRef)
	f.seat.Need(key, p)
	bustest.WaitFor(t, 0, "the key failed", func() bool {
		p, ok := f.seat.Get(key)
		return ok && p.State == mesh.Failed && p.Why == `mesh-vault provides only "credential" provisions, not "database"`
	})
}

func mustJS(t *testing.T, url string) jetstream.JetStream {
	_, js := kittest.Connect(t, url, "reader")
	return js
}

// TestVaultReadsPlansAsJSONWould writes a plan cut short and one whose
// secrets are named in another case: the first is said (its key and
// bucket), the second names no secrets (names are exact, spec 2).
func TestVaultReadsPlansAsJSONWould(t *testing.T) {
	f := start(t)
	_, js := kittest.Connect(t, f.url, "planner")
	ctx := bustest.Context(t)
	plans, err := bus.Bucket(ctx, js, mesh.PlansBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Put(ctx, "ace.gitea", []byte(`{"node":"ace","module":"gitea","secrets":["secret-key"],`)); err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Put(ctx, "ace.vaultwarden", []byte(`{"node":"ace","module":"vaultwarden","Secrets":["admin-token"]}`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the vault to say ace.gitea's plan does not decode", func() bool {
		return f.said.Has("a plan does not decode", "key=ace.gitea", "bucket="+mesh.PlansBucket)
	})
	// A plan written after both, as the seat writes it: once its secret
	// is answered, the vault has read the two before it (one copy, in
	// order).
	if _, err := plans.Put(ctx, "ace.postgres", []byte(`{"node":"ace","module":"postgres","secrets":["superuser"]}`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "postgres's superuser", func() bool {
		a, err := ask(t, f, "postgres", "postgres", false, kit.VaultRequest{})
		return err == nil && len(a.Secrets) == 1 && a.Secrets[0].Name == "superuser"
	})
	if a, err := ask(t, f, "vaultwarden", "vaultwarden", false, kit.VaultRequest{}); err != nil || len(a.Secrets) != 0 {
		t.Errorf("vaultwarden's secrets = %+v, %v; want none (its plan names \"Secrets\", no field of a plan)", a.Secrets, err)
	}
	if g, err := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{}); err != nil || len(g.Secrets) != 0 {
		t.Errorf("gitea's secrets = %+v, %v; want none (its plan does not decode)", g.Secrets, err)
	}
}

// TestVaultTakesNoKeyWhoseNamesDifferInCase writes, with the seat's
// credentials, a database key whose provider reads {"MODULE":"mesh-vault",..}
// and a credential key whose provider reads {..,"NODE":"control"}: names
// are exact (spec 2), so neither is the vault's. encoding/json would read
// both as mesh-vault on control: the vault would fail the first with a
// stray entry that stays, and issue a credential for the second. A genuine
// credential written after them is provided; by then the vault has taken
// both (one copy, in order), and has written no entry for either and
// answers no credential of the second.
func TestVaultTakesNoKeyWhoseNamesDifferInCase(t *testing.T) {
	f := start(t)
	_, js := kittest.Connect(t, f.url, "forger")
	ctx := bustest.Context(t)
	provisions, err := bus.Bucket(ctx, js, mesh.ProvisionsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	// As the seat writes them (asked, with the why of a key with no entry
	// yet). The test's seat reads names exactly too: the first names no
	// provider, so it is not judged; the second is mesh-vault's on no node,
	// so it is judged (no entry: asked) and written anew with that why and
	// the spec's names. Neither is the vault's.
	why, _ := json.Marshal(kittest.WhyNoEntry(vaultRef))
	db := mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "database"}
	cred := mesh.ProvisionKey{Node: "ace", Consumer: "vaultwarden", Provision: mesh.CredentialProvision, Local: "postgres_database"}
	for key, value := range map[mesh.ProvisionKey]string{
		db: `{"provision":"database","local":"","consumer":{"module":"gitea","node":"ace"},` +
			`"provider":{"MODULE":"mesh-vault","node":"control"},"state":"asked","why":` + string(why) + `}`,
		cred: `{"provision":"credential","local":"postgres_database","consumer":{"module":"vaultwarden","node":"ace"},` +
			`"provider":{"module":"mesh-vault","NODE":"control"},"state":"asked","why":` + string(why) + `}`,
	} {
		if _, err := provisions.Put(ctx, key.String(), []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	_, genuine := f.need(gitea, "main")
	waitProvided(t, f.seat, genuine, 1)
	for _, key := range []mesh.ProvisionKey{db, cred} {
		if e, ok := kittest.Entry(t, mustJS(t, f.url), mesh.VaultModule, key); ok {
			t.Errorf("mesh-vault's entry at %s = %+v; want none (its provider is not mesh-vault on control)", key, e)
		}
	}
	if a, err := ask(t, f, "vaultwarden", "vaultwarden", false, kit.VaultRequest{}); err != nil || len(a.Credentials) != 0 {
		t.Errorf("vaultwarden's credentials = %v, %v; want none", values(a), err)
	}
}

// A request whose names are the spec's in another case is refused with a
// clear error (spec 2: names are exact): {"KEY":..} is neither read as a
// key nor left unread (which would answer every credential). encoding/json
// folded the names: the vault answered the key, and rotated it.
func TestVaultRefusesRequestsWhoseNamesDifferInCase(t *testing.T) {
	f := start(t)
	db, cred := f.need(gitea, "main")
	waitProvided(t, f.seat, cred, 1)
	onc, _ := kittest.Connect(t, f.opURL, "operator")
	for _, c := range []struct {
		nc               *nats.Conn
		subject, request string
	}{
		{f.conns["gitea"], kit.SecretSubject("gitea", "gitea"), `{"KEY":"` + cred.String() + `"}`},
		{f.conns["postgres"], kit.ConsumersSubject("postgres", "postgres"), `{"Key":"` + db.String() + `","node":"control"}`},
		{onc, kit.RotateVerb, `{"KEY":"` + cred.String() + `"}`},
	} {
		msg, err := c.nc.Request(c.subject, []byte(c.request), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", c.subject, c.request, err)
		}
		var a struct {
			Credentials []kit.Credential `json:"credentials"`
			Generation  int64            `json:"generation"`
			Error       string           `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &a); err != nil {
			t.Fatalf("%s %s: answer %s: %v", c.subject, c.request, msg.Data, err)
		}
		if !strings.Contains(a.Error, "is not the spec's \"key\" (names are exact)") || len(a.Credentials) != 0 || a.Generation != 0 {
			t.Errorf("%s %s = %s; want refused, saying the name is not the spec's", c.subject, c.request, msg.Data)
		}
	}
	// Nothing was rotated.
	if a, err := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{Key: cred.String()}); err != nil || len(a.Credentials) != 1 || a.Credentials[0].Generation != 1 {
		t.Errorf("gitea's credential = %+v, %v; want it at generation 1", a.Credentials, err)
	}
}

// TestVaultAnswersANodesClientItsNodeOnly is hole 4 of issue 18: the
// secret verb of a module is not node-scoped. gitea runs on ace and g14;
// the client of ace, asking gitea's values (the server lets it ask for the
// modules placed on ace), gets ace's credential and secret only, and a
// request naming g14 is refused. gitea itself still gets both nodes'.
func TestVaultAnswersANodesClientItsNodeOnly(t *testing.T) {
	f := start(t)
	_, js := kittest.Connect(t, f.url, "planner")
	ctx := bustest.Context(t)
	plans, err := bus.Bucket(ctx, js, mesh.PlansBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	g14 := mesh.Ref{Module: "gitea", Node: "g14"}
	for _, node := range []string{"ace", "g14"} {
		plan, _ := json.Marshal(mesh.Plan{Node: node, Module: "gitea", Secrets: []string{"secret-key"}})
		if _, err := plans.Put(ctx, node+".gitea", plan); err != nil {
			t.Fatal(err)
		}
	}
	_, aceCred := f.need(gitea, "")
	_, g14Cred := f.need(g14, "")
	waitProvided(t, f.seat, aceCred, 1)
	waitProvided(t, f.seat, g14Cred, 1)
	var all kit.VaultAnswer
	bustest.WaitFor(t, 0, "gitea's values on both nodes", func() bool {
		all, err = ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})
		return err == nil && len(all.Secrets) == 2 && len(all.Credentials) == 2
	})
	nodesOf := func(a kit.VaultAnswer) (creds, secrets []string) {
		for _, c := range a.Credentials {
			creds = append(creds, c.Key)
		}
		for _, s := range a.Secrets {
			secrets = append(secrets, s.Node)
		}
		return creds, secrets
	}
	for _, c := range []struct {
		client string
		req    kit.VaultRequest
		creds  []string
		nodes  []string
		refuse string
	}{
		{"client-ace", kit.VaultRequest{}, []string{aceCred.String()}, []string{"ace"}, ""},
		{"client-ace", kit.VaultRequest{Node: "ace"}, []string{aceCred.String()}, []string{"ace"}, ""},
		{"client-ace", kit.VaultRequest{Key: g14Cred.String()}, nil, nil, ""},
		{"client-ace", kit.VaultRequest{Node: "g14"}, nil, nil, `a node's client is answered its own node's values only`},
		{"client-g14", kit.VaultRequest{}, []string{g14Cred.String()}, []string{"g14"}, ""},
	} {
		got, err := ask(t, f, c.client, "gitea", false, c.req)
		creds, nodes := nodesOf(got)
		switch {
		case c.refuse != "":
			if !errors.Is(err, kit.ErrVault) || !strings.Contains(err.Error(), c.refuse) || len(creds)+len(nodes) > 0 {
				t.Errorf("%s asking gitea's values %+v = %v, %v, %v; want the vault's refusal %q", c.client, c.req, creds, nodes, err, c.refuse)
			}
		case err != nil || fmt.Sprint(creds) != fmt.Sprint(c.creds) || fmt.Sprint(nodes) != fmt.Sprint(c.nodes):
			t.Errorf("%s asking gitea's values %+v = credentials %v, secrets of %v, %v; want %v and secrets of %v", c.client, c.req, creds, nodes, err, c.creds, c.nodes)
		}
	}
}

// TestVaultServesAskersInTurn is the second half of hole 6 of issue 18:
// the client of ace floods gitea's secret verb with 300 requests without
// waiting for the answers, then the client of g14 asks three times. The
// vault queues each asker's requests apart (at most 16 waiting; those past
// them are dropped, neither answered nor refused) and its answerers take
// the askers in turn: once the vault has read g14's requests, they are
// taken between ace's, one each turn (ace, g14, ace, g14, ace, g14, then
// ace's 13 left), not after ace's 16. The answerers are held while the
// requests are read, so that the flood is queued when g14 asks whatever
// the machine's load (unheld, a loaded vault answers the flood as fast as
// it comes, and g14 asks after most of it was answered).
func TestVaultServesAskersInTurn(t *testing.T) {
	f := startWithGiteaSecrets(t)
	// answers counts the answers to one client's requests sent to
	// prefix.*: served are those giving its node's secret.
	type answers struct {
		mu              sync.Mutex
		served, refused int
	}
	count := func(client, node, prefix string) *answers {
		var n answers
		sub, err := f.conns[client].Subscribe(prefix+".*", func(m *nats.Msg) {
			var a kit.VaultAnswer
			_ = json.Unmarshal(m.Data, &a)
			n.mu.Lock()
			defer n.mu.Unlock()
			if a.Error != "" || len(a.Secrets) != 1 || a.Secrets[0].Node != node {
				n.refused++
			} else {
				n.served++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
		if err := f.conns[client].Flush(); err != nil {
			t.Fatal(err)
		}
		return &n
	}
	send := func(client, prefix string, n int) {
		for i := range n {
			if err := f.conns[client].PublishRequest(kit.SecretSubject("gitea", client), fmt.Sprintf("%s.%d", prefix, i), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.conns[client].Flush(); err != nil {
			t.Fatal(err)
		}
	}
	ace := count("client-ace", "ace", "_INBOX_client-ace.flood")
	g14 := count("client-g14", "g14", "_INBOX_client-g14.turn")

	release := f.vault.Hold()
	const flood, asks = 300, 3
	kept := vault.MaxPerAsker
	send("client-ace", "_INBOX_client-ace.flood", flood)
	bustest.WaitFor(t, 0, "the vault to read ace's flood", func() bool {
		waiting, dropped := f.vault.Waiting("client-ace")
		return waiting == kept && dropped == flood-kept-1 // the first drop is said at once
	})
	send("client-g14", "_INBOX_client-g14.turn", asks)
	bustest.WaitFor(t, 0, "g14's requests queued beside ace's full queue", func() bool {
		waiting, _ := f.vault.Waiting("client-g14")
		return waiting == asks
	})
	taken := f.vault.Record()
	release()
	bustest.WaitFor(t, 0, "g14's and ace's queued requests answered", func() bool {
		ace.mu.Lock()
		defer ace.mu.Unlock()
		g14.mu.Lock()
		defer g14.mu.Unlock()
		return ace.served+ace.refused >= kept && g14.served+g14.refused >= asks
	})
	want := []string{"client-ace", "client-g14", "client-ace", "client-g14", "client-ace", "client-g14"}
	for range kept - asks {
		want = append(want, "client-ace")
	}
	if got := taken(); !reflect.DeepEqual(got, want) {
		t.Errorf("the answerers took the requests of\n%v\nwant\n%v\n(in turn: g14's between ace's, not after them)", got, want)
	}
	// A last ask of each, their queues empty: answered after every answer
	// of the flood the vault gives.
	for _, c := range []struct{ client, node string }{{"client-ace", "ace"}, {"client-g14", "g14"}} {
		if a, err := ask(t, f, c.client, "gitea", false, kit.VaultRequest{}); err != nil || len(a.Secrets) != 1 || a.Secrets[0].Node != c.node {
			t.Fatalf("%s's ask after the flood = %+v, %v; want its secret", c.client, a, err)
		}
	}
	ace.mu.Lock()
	defer ace.mu.Unlock()
	g14.mu.Lock()
	defer g14.mu.Unlock()
	if ace.served != kept || ace.refused != 0 || g14.served != asks || g14.refused != 0 {
		t.Errorf("ace's flood of %d: %d answered its secret, %d refused; g14's %d asks: %d answered, %d refused; want ace's %d kept and g14's %d answered, ace's %d dropped neither answered nor refused",
			flood, ace.served, ace.refused, asks, g14.served, g14.refused, kept, asks, flood-kept)
	}
}

// TestVaultAnswersAnotherDuringAFlood: client-ace sends 100 requests of
// gitea's secret without waiting for the answers, faster than the vault
// answers them (its answerers held meanwhile), then client-g14 asks its
// own secret once. The vault keeps 16 of ace's waiting and drops the 84
// past them, saying the first at once (dropped=1) and counting the 83
// after it for its next line; g14's request waits in a queue of its own
// and is answered with its secret once the answerers go on; ace is
// answered exactly the 16 it kept, and no request dropped is ever
// answered or refused (before the queues every one of the 100 was
// answered, in the order read, g14's after them).
func TestVaultAnswersAnotherDuringAFlood(t *testing.T) {
	f := startWithGiteaSecrets(t)
	ace := f.conns["client-ace"]
	var mu sync.Mutex
	served, refused := 0, 0
	sub, err := ace.Subscribe("_INBOX_client-ace.flood.*", func(m *nats.Msg) {
		var a kit.VaultAnswer
		_ = json.Unmarshal(m.Data, &a)
		mu.Lock()
		defer mu.Unlock()
		if a.Error != "" || len(a.Secrets) != 1 {
			refused++
		} else {
			served++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	release := f.vault.Hold()
	const flood = 100
	for i := range flood {
		if err := ace.PublishRequest(kit.SecretSubject("gitea", "client-ace"), fmt.Sprintf("_INBOX_client-ace.flood.%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ace.Flush(); err != nil {
		t.Fatal(err)
	}
	// The first drop is said at once; the 83 after it wait for the next
	// line, a minute on.
	kept, counted := vault.MaxPerAsker, flood-vault.MaxPerAsker-1
	bustest.WaitFor(t, 0, "the vault to read ace's flood", func() bool {
		waiting, dropped := f.vault.Waiting("client-ace")
		return waiting == kept && dropped == counted
	})
	type answer struct {
		a   kit.VaultAnswer
		err error
	}
	g14 := make(chan answer, 1)
	go func() {
		actx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a, err := kit.AskSecretsAs(actx, f.conns["client-g14"], "gitea", "client-g14", kit.VaultRequest{})
		g14 <- answer{a, err}
	}()
	bustest.WaitFor(t, 0, "g14's request queued beside ace's full queue", func() bool {
		waiting, dropped := f.vault.Waiting("client-g14")
		acew, aced := f.vault.Waiting("client-ace")
		return waiting == 1 && dropped == 0 && acew == kept && aced == counted
	})
	release()
	if got := <-g14; got.err != nil || len(got.a.Secrets) != 1 || got.a.Secrets[0].Node != "g14" {
		t.Fatalf("g14's ask during ace's flood = %+v, %v; want its secret", got.a, got.err)
	}
	bustest.WaitFor(t, 0, "ace's kept requests answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return served+refused >= kept
	})
	// ace asks once more, its queue empty: answered, after every answer
	// of its flood the vault gives.
	if a, err := ask(t, f, "client-ace", "gitea", false, kit.VaultRequest{}); err != nil || len(a.Secrets) != 1 {
		t.Fatalf("ace's ask after its flood = %+v, %v; want its secret", a, err)
	}
	if err := ace.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if served != kept || refused != 0 {
		t.Errorf("ace's flood of %d: %d answered its secret, %d refused; want the %d kept answered and the %d dropped neither answered nor refused", flood, served, refused, kept, flood-kept)
	}
	if lines := f.said.Lines(); strings.Count(lines, "dropped=") != 1 || !strings.Contains(lines, "user=client-ace dropped=1 ") {
		t.Errorf("the vault said:\n%s\nwant one line of ace's drops, dropped=1", lines)
	}
}

// TestNoRequestOfAnotherIsLostToAFlood: client-ace floods gitea's secret
// without waiting for answers (bursts of 500 requests, each burst flushed,
// from three connections of its own) while client-g14 asks its own secret
// twenty times, one request at a time, the answerers running throughout.
// Every one of g14's requests is answered with its secret (none lost to
// the flood, none refused), and each is served before the flood's backlog:
// once the vault has queued it, the answerers take at most one of ace's
// requests before it, though ace has its 16 waiting (the order the
// answerers take them, export_test RecordQueued: not a time). The vault
// says ace's drops.
func TestNoRequestOfAnotherIsLostToAFlood(t *testing.T) {
	f := startWithGiteaSecrets(t)
	var answered, sent atomic.Int64
	stop := make(chan struct{})
	var flooding sync.WaitGroup
	for i := range 3 {
		nc, _, err := bus.Connect(bus.Dial{URL: strings.Replace(f.url, "admin:admin@", "", 1), Name: "client-ace", User: "client-ace", Password: "client-ace"})
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		reply := fmt.Sprintf("_INBOX_client-ace.flood.%d", i)
		if _, err := nc.Subscribe(reply, func(*nats.Msg) { answered.Add(1) }); err != nil {
			t.Fatal(err)
		}
		flooding.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for range 500 {
					if nc.PublishRequest(kit.SecretSubject("gitea", "client-ace"), reply, []byte(`{}`)) != nil {
						return
					}
				}
				sent.Add(500)
				if nc.Flush() != nil {
					return
				}
			}
		})
	}
	defer func() { close(stop); flooding.Wait() }()
	bustest.WaitFor(t, 0, "ace's flood dropped by the vault", func() bool {
		return strings.Contains(f.said.Lines(), "user=client-ace dropped=")
	})
	queued, taken := f.vault.RecordQueued()
	const asks = 20
	for i := range asks {
		actx, cancel := context.WithTimeout(context.Background(), time.Minute)
		a, err := kit.AskSecretsAs(actx, f.conns["client-g14"], "gitea", "client-g14", kit.VaultRequest{})
		cancel()
		if err != nil || len(a.Secrets) != 1 || a.Secrets[0].Node != "g14" {
			t.Fatalf("g14's request %d during ace's flood = %+v, %v; want its secret", i, a, err)
		}
	}
	qs, tk := queued(), taken()
	g14, full := 0, 0
	for _, q := range qs {
		if q.Who != "client-g14" {
			continue
		}
		g14++
		if q.Others >= vault.MaxPerAsker {
			full++
		}
		// g14 asks one request at a time: the next of its requests
		// taken is this one.
		aces := 0
		for _, who := range tk[q.Taken:] {
			if who == "client-g14" {
				break
			}
			aces++
		}
		if aces > 1 {
			t.Errorf("g14's request %d, queued with %d of ace's waiting, was taken after %d of ace's; want at most one (askers in turn)", g14, q.Others, aces)
		}
	}
	if g14 != asks {
		t.Errorf("the vault queued %d of g14's requests; want its %d", g14, asks)
	}
	if full == 0 {
		t.Errorf("none of g14's %d requests was queued beside ace's %d waiting; want the flood's backlog in front of some (the flood sent %d, %d answered)", g14, vault.MaxPerAsker, sent.Load(), answered.Load())
	}
	t.Logf("%d of g14's %d requests queued beside ace's full queue; the flood sent %d, %d answered", full, g14, sent.Load(), answered.Load())
}
