package provisioning_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/internal/registry"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

type fixture struct {
	nc  *nats.Conn
	js  jetstream.JetStream // the seat's
	put func(bucket, key string, value any)
}

// serve starts the verb on the seat's connection over buckets written the
// way the seat and two clients write them, plus odd keys, and returns an
// operator's connection.
func serve(t *testing.T) fixture {
	t.Helper()
	return serveWith(t, provisioning.Options{})
}

// serveWith is serve with the verb's options.
func serveWith(t *testing.T, opts provisioning.Options) fixture {
	t.Helper()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	seatNC, seat := bustest.Connect(t, s, "seat")
	kvs := map[string]jetstream.KeyValue{}
	put := func(bucket, key string, value any) {
		t.Helper()
		kv, ok := kvs[bucket]
		if !ok {
			var err error
			if kv, err = bus.Bucket(ctx, seat, bucket, 0); err != nil {
				t.Fatal(err)
			}
			kvs[bucket] = kv
		}
		b, ok := value.([]byte)
		if !ok {
			b, _ = json.Marshal(value)
		}
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	regCtx, regDone := context.WithCancel(ctx)
	reg := bus.Follow(regCtx, seat, mesh.RegistryBucket, bus.Options{Create: true})
	<-reg.Ready()
	if _, err := registry.Sync(ctx, reg, registry.Compiled()); err != nil {
		t.Fatal(err)
	}
	regDone() // the registry's watch, so that the verb's own are the only ones
	put(mesh.RegistryBucket, "Bad_Kind", []byte(`{}`))

	gitea := mesh.Plan{Node: "ace", Module: "gitea", Fingerprint: "b7c100", Manifest: "sha256:b7",
		Dirs:    []mesh.Dir{{Name: "state"}, {Name: "tmp", Unknown: "sweep"}},
		Ports:   []mesh.Port{{Name: "http"}},
		Secrets: []string{"secret-key"}, Config: []string{"domain"},
		Provisions: []mesh.PlanProvision{
			{Provision: "database", Local: "main", Provider: "control", ProviderModule: "postgres", Credential: "own"},
			{Provision: "route", Provider: "control", ProviderModule: "route-proxy"},
		}}
	tools := func(node string) mesh.Plan {
		return mesh.Plan{Node: node, Module: "node-tools", Fingerprint: "0d0d01", Manifest: "sha256:0d",
			Contributes: []mesh.Contribution{{Collection: "shell:zsh:normal", Item: "export PATH=$PATH:/opt/node-tools/bin"}}}
	}
	pg := mesh.Plan{Node: "control", Module: "postgres", Fingerprint: "3f2a91", Manifest: "sha256:3f",
		Dirs: []mesh.Dir{{Name: "state", Unknown: "program"}}, Ports: []mesh.Port{{Name: "pg"}}}
	for _, p := range []mesh.Plan{gitea, tools("ace"), tools("control"), pg} {
		put(mesh.PlansBucket, p.Node+"."+p.Module, p)
	}
	put(mesh.PlansBucket, "ace.ghost", mesh.Plan{Node: "ace", Module: "other"})
	put(mesh.PlansBucket, "ace.broken", []byte(`not json`))

	prov := func(node, consumer, provision, local, provider, pnode string, st mesh.State, why string) {
		k := mesh.ProvisionKey{Node: node, Consumer: consumer, Provision: provision, Local: local}
		put(mesh.ProvisionsBucket, k.String(), mesh.Provision{Provision: provision, Local: local,
			Consumer: mesh.Ref{Module: consumer, Node: node}, Provider: mesh.Ref{Module: provider, Node: pnode},
			State: st, Why: why, At: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)})
	}
	prov("ace", "gitea", "database", "main", "postgres", "control", mesh.Asked, "waits for postgres's helper")
	prov("ace", "gitea", "route", "", "route-proxy", "control", mesh.Provided, "")
	prov("control", "keycloak", "database", "", "postgres", "control", mesh.Failed, "role exists")
	put(mesh.ProvisionsBucket, "ace.gitea", []byte(`{}`))

	put(mesh.RefusedBucket, "ace.vaultwarden", mesh.Refusal{Node: "ace", Module: "vaultwarden", Why: "no build is known for vaultwarden",
		Since: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)})

	put(mesh.AppliedBucket, "ace.gitea", mesh.Applied{Fingerprint: "b7c100", Dirs: map[string]string{"state": "/m/ace/gitea/state"},
		Ports: map[string]int{"http": 20001}, Swept: []string{}, At: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)})
	put(mesh.AppliedBucket, "control.postgres", mesh.Applied{Fingerprint: "3f2a91", Dirs: map[string]string{},
		Ports: map[string]int{"pg": 20002}, Swept: []string{}, At: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)})
	put(mesh.AppliedBucket, "ace", []byte(`{}`))                // too few tokens
	put(mesh.AppliedBucket, "ace.gitea.extra", []byte(`{}`))    // too many
	put(mesh.AppliedBucket, "control.redis", []byte(`[1,2]`))   // not an object
	put(mesh.AppliedBucket, "control.keycloak", []byte(`null`)) // not an object either

	item := func(node, coll, module, text string) {
		put(mesh.CollectBucket, mesh.CollectKey{Node: node, Collection: coll, Contributor: module}.String(),
			mesh.CollectItem{Item: text, Module: module, Collection: coll})
	}
	item("ace", "shell:zsh:normal", "node-tools", "export PATH=$PATH:/opt/node-tools/bin")
	item("control", "shell:zsh:normal", "node-tools", "export PATH=$PATH:/opt/node-tools/bin")
	item("control", "environment", "node-tools", "EDITOR=vi")
	item("control", "environment", "postgres", "PGHOST=localhost")
	put(mesh.CollectBucket, "control.environment", []byte(`{"item":"x"}`))                   // too few tokens
	put(mesh.CollectBucket, "control.shell=ZZzsh.node-tools", []byte(`{"item":"x"}`))        // does not decode
	put(mesh.CollectBucket, "ace.environment.redis", []byte(`{"item":"x","module":"nope"}`)) // not its key

	if err := provisioning.Start(ctx, seatNC, seat, opts); err != nil {
		t.Fatal(err)
	}
	nc, _ := bustest.Connect(t, s, "operator")
	return fixture{nc: nc, js: seat, put: put}
}

func (f fixture) ask(t *testing.T, body string) provisioning.Reply {
	t.Helper()
	msg, err := f.nc.Request(mesh.ProvisioningSubject, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", body, err)
	}
	var r provisioning.Reply
	dec := json.NewDecoder(strings.NewReader(string(msg.Data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("reply to %s = %s: %v", body, msg.Data, err)
	}
	if r.Entries == nil || r.Odd == nil {
		t.Errorf("reply to %s = %s; want entries and odd as lists, never null", body, msg.Data)
	}
	return r
}

func entryKeys(r provisioning.Reply) []string {
	out := []string{}
	for _, e := range r.Entries {
		out = append(out, e.Key)
	}
	return out
}

func oddText(r provisioning.Reply) []string {
	out := []string{}
	for _, o := range r.Odd {
		out = append(out, o.Key+": "+o.Why)
	}
	return out
}

var (
	appliedOdd = []string{
		"ace: key out of shape: has 1 tokens; want 2",
		"ace.gitea.extra: key out of shape: has 3 tokens; want 2",
		"control.keycloak: value does not decode as an applied record: not a JSON object",
		"control.redis: value does not decode as an applied record: not a JSON object",
	}
	collectOdd = []string{
		"ace.environment.redis: the collect item names module nope, not its key",
		"control.environment: key out of shape: has 2 tokens; want 3",
		`control.shell=ZZzsh.node-tools: key out of shape: collection token "shell=ZZzsh" does not decode`,
	}
	plansOdd = []string{
		"ace.broken: value does not decode as a plan: not a JSON object",
		"ace.ghost: the plan names ace.other, not its key",
	}
)

func TestVerbAnswersEachWhat(t *testing.T) {
	f := serve(t)
	var kinds []string
	for _, a := range registry.Compiled() {
		kinds = append(kinds, a.Kind)
	}
	sort.Strings(kinds)
	for _, tc := range []struct {
		req     string
		what    string
		entries []string
		odd     []string
	}{
		{`{}`, "registry", kinds, []string{`Bad_Kind: key out of shape: kind "Bad_Kind" is not a valid name`}},
		{``, "registry", kinds, []string{`Bad_Kind: key out of shape: kind "Bad_Kind" is not a valid name`}},
		{`{"what":"registry","module":"mesh-vault"}`, "registry", []string{"consumers", "secret"}, []string{`Bad_Kind: key out of shape: kind "Bad_Kind" is not a valid name`}},
		{`{"what":"plans"}`, "plans", []string{"ace.gitea", "ace.node-tools", "control.node-tools", "control.postgres"}, plansOdd},
		{`{"what":"plans","node":"control"}`, "plans", []string{"control.node-tools", "control.postgres"}, []string{}},
		{`{"what":"plans","module":"node-tools"}`, "plans", []string{"ace.node-tools", "control.node-tools"}, []string{}},
		{`{"what":"provisions"}`, "provisions", []string{"ace.gitea.database.main", "ace.gitea.route", "control.keycloak.database"},
			[]string{"ace.gitea: key out of shape: has 2 tokens; want 3 to 4"}},
		{`{"what":"provisions","node":"ace","module":"gitea"}`, "provisions", []string{"ace.gitea.database.main", "ace.gitea.route"},
			[]string{"ace.gitea: key out of shape: has 2 tokens; want 3 to 4"}},
		{`{"what":"provisions","node":"control"}`, "provisions", []string{"control.keycloak.database"}, []string{}},
		{`{"what":"refused"}`, "refused", []string{"ace.vaultwarden"}, []string{}},
		{`{"what":"refused","node":"control"}`, "refused", []string{}, []string{}},
		{`{"what":"applied"}`, "applied", []string{"ace.gitea", "control.postgres"}, appliedOdd},
		{`{"what":"applied","node":"ace"}`, "applied", []string{"ace.gitea"},
			[]string{"ace: key out of shape: has 1 tokens; want 2", "ace.gitea.extra: key out of shape: has 3 tokens; want 2"}},
		{`{"what":"applied","node":"control","module":"postgres"}`, "applied", []string{"control.postgres"}, []string{}},
		{`{"what":"collect"}`, "collect", []string{"ace.shell=3Azsh=3Anormal.node-tools", "control.environment.node-tools",
			"control.environment.postgres", "control.shell=3Azsh=3Anormal.node-tools"}, collectOdd},
		{`{"what":"collect","collection":"shell:zsh:normal"}`, "collect",
			[]string{"ace.shell=3Azsh=3Anormal.node-tools", "control.shell=3Azsh=3Anormal.node-tools"}, collectOdd[1:]},
		{`{"what":"collect","node":"control","collection":"environment"}`, "collect",
			[]string{"control.environment.node-tools", "control.environment.postgres"}, collectOdd[1:]},
		{`{"what":"collect","node":"control","contributor":"postgres"}`, "collect", []string{"control.environment.postgres"}, collectOdd[1:]},
		{`{"what":"collect","module":"node-tools","node":"ace"}`, "collect", []string{"ace.shell=3Azsh=3Anormal.node-tools"}, []string{}},
		{`{"what":"needs","node":"ace","module":"gitea"}`, "needs", []string{"ace.gitea.config.domain", "ace.gitea.dir.state",
			"ace.gitea.dir.tmp", "ace.gitea.port.http", "ace.gitea.provision.database_main", "ace.gitea.provision.route",
			"ace.gitea.secret.secret-key"}, []string{}},
		{`{"what":"needs","module":"node-tools"}`, "needs", []string{"ace.node-tools.contribution.shell=3Azsh=3Anormal",
			"control.node-tools.contribution.shell=3Azsh=3Anormal"}, []string{}},
		{`{"what":"needs"}`, "needs", []string{"ace.gitea.config.domain", "ace.gitea.dir.state",
			"ace.gitea.dir.tmp", "ace.gitea.port.http", "ace.gitea.provision.database_main", "ace.gitea.provision.route",
			"ace.gitea.secret.secret-key", "ace.node-tools.contribution.shell=3Azsh=3Anormal",
			"control.node-tools.contribution.shell=3Azsh=3Anormal", "control.postgres.dir.state", "control.postgres.port.pg"}, plansOdd},
	} {
		r := f.ask(t, tc.req)
		if r.What != tc.what || r.Error != "" {
			t.Errorf("ask %s: what %q error %q; want what %q, no error", tc.req, r.What, r.Error, tc.what)
		}
		if got := entryKeys(r); !reflect.DeepEqual(got, tc.entries) {
			t.Errorf("ask %s: entries %q; want %q", tc.req, got, tc.entries)
		}
		if got := oddText(r); !reflect.DeepEqual(got, tc.odd) {
			t.Errorf("ask %s: odd\n%q\nwant\n%q", tc.req, got, tc.odd)
		}
	}
}

func TestVerbValues(t *testing.T) {
	f := serve(t)
	values := func(req string) map[string]string {
		out := map[string]string{}
		for _, e := range f.ask(t, req).Entries {
			out[e.Key] = string(e.Value)
		}
		return out
	}
	needs := values(`{"what":"needs","node":"ace","module":"gitea"}`)
	for k, want := range map[string]string{
		"ace.gitea.dir.state":               `{"name":"state","unknown":"program"}`,
		"ace.gitea.dir.tmp":                 `{"name":"tmp","unknown":"sweep"}`,
		"ace.gitea.port.http":               `{"name":"http"}`,
		"ace.gitea.provision.database_main": `{"provision":"database","local":"main","provider":"control","provider-module":"postgres","credential":"own"}`,
	} {
		if needs[k] != want {
			t.Errorf("needs %s = %s; want %s", k, needs[k], want)
		}
	}
	reg := values(`{"what":"registry","module":"mesh-vault"}`)
	if want := `{"kind":"secret","module":"mesh-vault","verb":"mesh-vault.secret","about":"a secret or credential of the module itself, asked of the vault; never kept in a bucket"}`; reg["secret"] != want {
		t.Errorf("registry secret = %s; want %s", reg["secret"], want)
	}
	coll := values(`{"what":"collect","node":"control","contributor":"postgres"}`)
	if want := `{"item":"PGHOST=localhost","module":"postgres","collection":"environment"}`; coll["control.environment.postgres"] != want {
		t.Errorf("collect control.environment.postgres = %s; want %s", coll["control.environment.postgres"], want)
	}
}

func TestVerbAnswersBadRequestsWithAnError(t *testing.T) {
	f := serve(t)
	for _, tc := range []struct{ req, what, err string }{
		{`{"what":`, "", "the request is not a JSON object of what, node, module, contributor, collection, after, sums and seen: unexpected EOF"},
		{`[1]`, "", "the request is not a JSON object of what, node, module, contributor, collection, after, sums and seen: json: cannot unmarshal array into Go value of type provisioning.Request"},
		{`{"what":"wants"}`, "wants", `unknown what "wants"; ask for one of [registry needs applied collect plans provisions refused status digests]`},
		{`{"what":"plans","nod":"ace"}`, "", `the request is not a JSON object of what, node, module, contributor, collection, after, sums and seen: json: unknown field "nod"`},
		{`{} {}`, "", "the request is not a JSON object of what, node, module, contributor, collection, after, sums and seen: text after the JSON object"},
	} {
		r := f.ask(t, tc.req)
		if r.Error != tc.err || r.What != tc.what || len(r.Entries)+len(r.Odd) != 0 {
			t.Errorf("ask %s = %+v; want what %q, error %q, nothing else", tc.req, r, tc.what, tc.err)
		}
	}
}

func TestVerbSeesChanges(t *testing.T) {
	f := serve(t)
	f.put(mesh.RefusedBucket, "control.redis", mesh.Refusal{Node: "control", Module: "redis", Why: "no build is known for redis"})
	bustest.WaitFor(t, 0, "the verb to see control.redis refused", func() bool {
		return fmt.Sprint(entryKeys(f.ask(t, `{"what":"refused"}`))) == "[ace.vaultwarden control.redis]"
	})
}

func TestDropNeeds(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	if n, err := provisioning.DropNeeds(ctx, js); n != 0 || err != nil {
		t.Errorf("DropNeeds(no bucket) = %d, %v; want 0, nil", n, err)
	}
	kv, err := bus.Bucket(ctx, js, mesh.NeedsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := provisioning.DropNeeds(ctx, js); n != 0 || err != nil {
		t.Errorf("DropNeeds(empty bucket) = %d, %v; want 0, nil", n, err)
	}
	for _, k := range []string{"ace.gitea.dir.state", "ace.gitea.port.http", "control.postgres.port.pg"} {
		kv.Put(ctx, k, []byte(`{}`))
	}
	kv.Delete(ctx, "control.postgres.port.pg")
	if n, err := provisioning.DropNeeds(ctx, js); n != 2 || err != nil {
		t.Errorf("DropNeeds(two leftovers) = %d, %v; want 2, nil", n, err)
	}
	if n, err := provisioning.DropNeeds(ctx, js); n != 0 || err != nil {
		t.Errorf("DropNeeds(again) = %d, %v; want 0, nil", n, err)
	}
	if _, err := kv.Get(context.Background(), "ace.gitea.dir.state"); err == nil {
		t.Error("needs ace.gitea.dir.state is still there")
	}
}

// TestVerbAnswersTheLastKnownOfABucketGone deletes the plans bucket under
// the verb: a bucket gone is unknown, not empty, so the verb answers the
// plans it last read (the seat writes them again), then what is written
// into the bucket made again. Before, it answered no plan.
func TestVerbAnswersTheLastKnownOfABucketGone(t *testing.T) {
	f := serve(t)
	before := f.ask(t, `{"what":"plans"}`)
	if len(before.Entries) == 0 {
		t.Fatal("the verb answers no plan before the test")
	}
	ctx := bustest.Context(t)
	if err := f.js.DeleteKeyValue(ctx, mesh.PlansBucket); err != nil {
		t.Fatal(err)
	}
	var kv jetstream.KeyValue
	bustest.WaitFor(t, 0, "the plans bucket made again by the verb's copy", func() bool {
		var err error
		kv, err = f.js.KeyValue(ctx, mesh.PlansBucket)
		return err == nil
	})
	if r := f.ask(t, `{"what":"plans"}`); fmt.Sprint(r.Entries) != fmt.Sprint(before.Entries) {
		t.Errorf("plans answered once the bucket was deleted = %v; want the last known %v", r.Entries, before.Entries)
	}
	if r := f.ask(t, `{"what":"needs"}`); len(r.Entries) == 0 {
		t.Error("the verb answers no need once the plans bucket was deleted; want the last known")
	}
	if _, err := kv.Put(ctx, "ace.gitea", []byte(`{"node":"ace","module":"gitea","fp":"c0ffee"}`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the verb to answer ace.gitea at c0ffee", func() bool {
		for _, e := range f.ask(t, `{"what":"plans","node":"ace","module":"gitea"}`).Entries {
			if strings.Contains(string(e.Value), "c0ffee") {
				return true
			}
		}
		return false
	})
}

// TestVerbFollowsABucketOnlyWhileAsked counts the watches (consumers) of
// the verb's buckets: before a request only the status tally's (one of
// the plans, the provisions and the refusals, counted from the start and
// kept, so that the first status is as quick as the next: it expired with
// the idle time before, and the first status after it read every
// provision anew), one more of the plans bucket after a request of needs,
// the tally's alone again once no request has read it for the idle time,
// and the same answer when it is asked again.
func TestVerbFollowsABucketOnlyWhileAsked(t *testing.T) {
	f := serveWith(t, provisioning.Options{Idle: 300 * time.Millisecond})
	ctx := bustest.Context(t)
	consumers := func(bucket string) int {
		t.Helper()
		st, err := f.js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatalf("stream of %s: %v", bucket, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatalf("stream info of %s: %v", bucket, err)
		}
		return info.State.Consumers
	}
	watched := func() map[string]int {
		out := map[string]int{}
		for _, b := range provisioning.Buckets {
			if n := consumers(b); n != 0 {
				out[b] = n
			}
		}
		return out
	}
	bustest.WaitFor(t, 0, "the registry's watch of the fixture to stop", func() bool { return consumers(mesh.RegistryBucket) == 0 })
	tally := map[string]int{mesh.PlansBucket: 1, mesh.ProvisionsBucket: 1, mesh.RefusedBucket: 1}
	bustest.WaitFor(t, 0, "the status tally's watches", func() bool { return reflect.DeepEqual(watched(), tally) })
	want := []string{"ace.gitea.config.domain", "ace.gitea.dir.state", "ace.gitea.dir.tmp", "ace.gitea.port.http",
		"ace.gitea.provision.database_main", "ace.gitea.provision.route", "ace.gitea.secret.secret-key"}
	req := `{"what":"needs","node":"ace","module":"gitea"}`
	if got := entryKeys(f.ask(t, req)); !reflect.DeepEqual(got, want) {
		t.Errorf("ask %s: entries %q; want %q", req, got, want)
	}
	if got := watched(); !reflect.DeepEqual(got, map[string]int{mesh.PlansBucket: 2, mesh.ProvisionsBucket: 1, mesh.RefusedBucket: 1}) {
		t.Errorf("watches of the verb's buckets after a request of needs = %v; want the tally's and one more of %s", got, mesh.PlansBucket)
	}
	// The tally, followed from before the request of needs, outlives the
	// plans' copy, which expires an idle time after that request.
	bustest.WaitFor(t, 0, "the verb to stop following the plans but for the tally", func() bool { return reflect.DeepEqual(watched(), tally) })
	if got := entryKeys(f.ask(t, req)); !reflect.DeepEqual(got, want) {
		t.Errorf("ask %s again: entries %q; want %q", req, got, want)
	}
}

// An answer larger than the server carries is answered with an error that
// says so, not dropped (the asker would wait for nothing).
func TestVerbSaysAnAnswerTooLarge(t *testing.T) {
	s := bustest.Server(t, "max_payload: 8192")
	ctx := bustest.Context(t)
	seatNC, seat := bustest.Connect(t, s, "seat")
	kv, err := bus.Bucket(ctx, seat, mesh.PlansBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		node := fmt.Sprintf("n%02d", i)
		b, _ := json.Marshal(mesh.Plan{Node: node, Module: "gitea", Fingerprint: "b7c100", Manifest: "sha256:" + strings.Repeat("b7", 32)})
		if _, err := kv.Put(ctx, node+".gitea", b); err != nil {
			t.Fatal(err)
		}
	}
	if err := provisioning.Start(ctx, seatNC, seat, provisioning.Options{}); err != nil {
		t.Fatal(err)
	}
	nc, _ := bustest.Connect(t, s, "operator")
	f := fixture{nc: nc, js: seat}
	r := f.ask(t, `{"what":"plans"}`)
	if !strings.Contains(r.Error, "more than the server's max payload of 8192 bytes: narrow the request by node or module") || len(r.Entries) != 0 || r.What != "plans" {
		t.Errorf("plans of 60 nodes: what %q, %d entries, error %q; want an error naming the max payload", r.What, len(r.Entries), r.Error)
	}
	r = f.ask(t, `{"what":"plans","node":"n07"}`)
	if r.Error != "" || len(r.Entries) != 1 || r.Entries[0].Key != "n07.gitea" {
		t.Errorf("plans of n07: %+v; want n07.gitea alone", r)
	}
}

// Requests of every bucket asked at once, on a verb that follows none yet,
// are each answered, from the bucket it reads (they are answered side by
// side: one waiting for its copy holds up no other).
func TestVerbAnswersRequestsAtOnce(t *testing.T) {
	f := serve(t)
	want := map[string]string{
		`{"what":"plans","node":"control"}`:      "control.node-tools",
		`{"what":"provisions","node":"control"}`: "control.keycloak.database",
		`{"what":"refused"}`:                     "ace.vaultwarden",
		`{"what":"applied","node":"control"}`:    "control.postgres",
	}
	var wg sync.WaitGroup
	for range 3 {
		for req, first := range want {
			wg.Go(func() {
				msg, err := f.nc.Request(mesh.ProvisioningSubject, []byte(req), 10*time.Second)
				if err != nil {
					t.Errorf("request %s: %v", req, err)
					return
				}
				var r provisioning.Reply
				if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error != "" || len(r.Entries) == 0 || r.Entries[0].Key != first {
					t.Errorf("request %s: %s (%v); want %s first", req, msg.Data, err, first)
				}
			})
		}
	}
	wg.Wait()
}
