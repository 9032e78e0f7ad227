package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/internal/web"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// chromium is the browser of Debian's package, which the test drives.
const chromium = "/usr/bin/chromium"

func homelab(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../examples/homelab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withoutVaultwarden is the homelab with vaultwarden gone from ace: its
// three keys turn retiring and are asked.
func withoutVaultwarden(t *testing.T) []byte {
	return []byte(strings.NewReplacer(
		"ace: [gitea, vaultwarden, node-tools]", "ace: [gitea, node-tools]",
		"vaultwarden: 4a4a4a, ", "",
	).Replace(string(homelab(t))))
}

// running is a real embedded server with a mesh applied, the ask router, a
// seat, and the page served over it as the user "operator".
type running struct {
	t    *testing.T
	ctx  context.Context
	js   jetstream.JetStream // the test's own (operator) connection
	seat *seat.Seat
	url  string // the page's
	// client is the operator's browser: logged in with the page's login
	// URL, its session cookie in its jar.
	client *http.Client
	// stopSeat stops the seat and waits for it (it releases its lease).
	stopSeat func()
}

func start(t *testing.T) *running {
	t.Helper()
	srv := bustest.Server(t)
	r := &running{t: t, ctx: bustest.Context(t)}
	_, r.js = bustest.Connect(t, srv, "operator")
	anc, ajs := bustest.Connect(t, srv, "mesh-asks")
	if _, err := asks.Start(r.ctx, anc, ajs, nil); err != nil {
		t.Fatal(err)
	}
	r.apply(homelab(t))
	_, sjs := bustest.Connect(t, srv, "seat")
	r.seat = seat.New(sjs, seat.Config{})
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() { done <- r.seat.Run(ctx) }()
	var once sync.Once
	r.stopSeat = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("seat.Run = %v", err)
			}
		})
	}
	t.Cleanup(r.stopSeat)
	r.settle()

	wnc, wjs := bustest.Connect(t, srv, "operator-web")
	page := web.New(r.ctx, web.Config{JS: wjs, NC: wnc, User: "operator", Login: testLogin, LoginFile: testLoginFile})
	<-page.Ready()
	hs := serve(t, page)
	r.url, r.client = hs.URL, hs.Client()
	return r
}

func (r *running) apply(text []byte) {
	r.t.Helper()
	f, err := meshfile.Parse("homelab.yaml", text)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := meshfile.Apply(r.ctx, r.js, f, time.Now()); err != nil {
		r.t.Fatal(err)
	}
}

func (r *running) settle() {
	r.t.Helper()
	marks := seat.Marks(r.ctx, r.js)
	bustest.WaitFor(r.t, 0, "the seat to settle", func() bool { return r.seat.Settled(marks) })
}

func (r *running) put(bucket, key string, v any) {
	r.t.Helper()
	kv, err := r.js.CreateOrUpdateKeyValue(r.ctx, jetstream.KeyValueConfig{Bucket: bucket})
	if err != nil {
		r.t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	if _, err := kv.Put(r.ctx, key, b); err != nil {
		r.t.Fatal(err)
	}
}

// get decodes the value at key of bucket into v.
func (r *running) get(bucket, key string, v any) bool {
	r.t.Helper()
	kv, err := r.js.KeyValue(r.ctx, bucket)
	if err != nil {
		return false
	}
	e, err := kv.Get(r.ctx, key)
	if err != nil {
		return false
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		r.t.Fatalf("%s %s: %v", bucket, key, err)
	}
	return true
}

// browser starts headless Chromium (a fresh profile, no background
// traffic) and returns a tab's context. A missing Chromium fails the test
// with how to install it.
func browser(t testing.TB) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s is missing: the page's test drives Debian's Chromium; install it with `apt-get update && apt-get install -y chromium` (.ci/run does)", chromium)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return ctx
}

// within runs steps with a deadline of 20 s.
func within(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestPageInChromium loads the page of a live mesh in a real headless
// Chromium: on ace's drill-down a key turns provided, without a reload,
// once its provider's entry is written, and the view's event stream sends
// only that row and ace's counts; a click on the key shows it whole with
// its why walk; an ask is answered by clicking Yes on the summary, and the
// record says so, answered by the operator.
func TestPageInChromium(t *testing.T) {
	tab := browser(t)
	r := start(t)

	const key = "ace.gitea.credential.postgres_database_main"
	var p mesh.Provision
	if !r.get(mesh.ProvisionsBucket, key, &p) || p.State != mesh.Asked {
		t.Fatalf("%s = %+v; want asked before the vault's entry", key, p)
	}
	row := `#consumes tr[data-key="` + key + `"]`
	within(t, tab, "loading ace's page",
		login(r.url),
		chromedp.Navigate(r.url+"/?node=ace"),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-state="asked"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)), // the event stream is open
	)
	// A mark the page keeps only if it is never loaded again.
	mark := func(what string) {
		within(t, tab, what, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`)(ctx, tg)
			return err
		}))
	}
	ctx, cancel := context.WithTimeout(tab, 60*time.Second)
	defer cancel()
	notReloaded := func(what string) {
		t.Helper()
		if kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded === true`)); err != nil || !kept {
			t.Errorf("%s: the page was loaded again (mark kept %v, %v); want a live update", what, kept, err)
		}
	}
	mark("marking ace's page")

	// The vault fails the key: its row turns failed by a delta that carries
	// the key's row and ace's counts, not the view again.
	events := stream(t, r.ctx, r.client, r.url+"/events?node=ace&v="+version(t, r.client, r.url+"/?node=ace"))
	next(t, events, "the stream's first event")
	r.put(mesh.BoundBucket(mesh.VaultModule), key, mesh.Entry{State: mesh.Failed, Why: "store sealed"})
	within(t, tab, key+" to turn failed on the page",
		chromedp.WaitVisible(chromedp.CSS(row+`[data-state="failed"]`)))
	d := next(t, events, "the delta of "+key)
	if len(d) > 8<<10 || strings.Contains(d, `"content"`) || !strings.Contains(d, `"consumes/`+key+`"`) || !strings.Contains(d, `failed`) {
		t.Errorf("the delta = %d bytes %.300s; want under 8 KB, the row of %s failed", len(d), d, key)
	}
	notReloaded(key + " failed")

	// The key's why walk is one click away, and reads the vault's entry on
	// the bus.
	within(t, tab, "clicking "+key,
		chromedp.Click(chromedp.CSS(row+` td.key a`)),
		chromedp.WaitVisible(chromedp.CSS(`#why tr.step[data-what="entry"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)))
	if txt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#key h2`))); err != nil || txt != key {
		t.Errorf("the key's view is titled %q, %v; want the whole key %s", txt, err, key)
	}
	if txt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#why tr.step:first-child`))); err != nil || !strings.Contains(txt, key) || !strings.Contains(txt, "failed") {
		t.Errorf("the why walk's first step = %q, %v; want %s failed", txt, err, key)
	}
	if txt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#why tr.step[data-what="entry"]`))); err != nil || !strings.Contains(txt, "mesh-vault_bound "+key) || !strings.Contains(txt, "store sealed") {
		t.Errorf("the why walk's entry step = %q, %v; want the vault's entry at %s, store sealed", txt, err, key)
	}
	mark("marking the key's page")

	// The vault provides it: the open key's view follows.
	r.put(mesh.BoundBucket(mesh.VaultModule), key, mesh.Entry{State: mesh.Provided, VaultName: "gitea/postgres_database_main", Generation: 1})
	within(t, tab, key+" to turn provided on its view",
		chromedp.WaitVisible(chromedp.CSS(`#key [data-state="provided"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#why tr.step[data-what="entry"]`)))
	shoot(t, tab, "key-live")
	notReloaded(key + " provided")

	// vaultwarden leaves ace: its database key is asked; click Yes.
	r.apply(withoutVaultwarden(t))
	r.settle()
	const retiring = "ace.vaultwarden.database"
	bustest.WaitFor(t, 0, retiring+" to be retiring and asked", func() bool {
		return r.get(mesh.ProvisionsBucket, retiring, &p) && p.State == mesh.Retiring && p.Ask != ""
	})
	id := p.Ask
	askRow := `#asks tr[data-ask="` + id + `"]`
	within(t, tab, "clicking Yes on the ask "+id,
		chromedp.Navigate(r.url+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.WaitVisible(chromedp.CSS(askRow)),
		chromedp.Click(chromedp.CSS(askRow+` button[value="yes"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#said:not(.error)`)),
	)
	said, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#said`)))
	if err != nil || !strings.Contains(said, "answered yes by operator") {
		t.Errorf("the page said %q, %v; want that the ask was answered yes by operator", said, err)
	}
	var rec mesh.Record
	if !r.get(mesh.RecordsBucket, id, &rec) {
		t.Fatalf("no record of %s in %s", id, mesh.RecordsBucket)
	}
	if rec.State != mesh.RecordAnswered || rec.Warrant == nil || rec.Warrant.Option != "yes" ||
		rec.Warrant.By.Who != "operator" || rec.Warrant.By.Kind != asks.IdentityKind {
		t.Errorf("record %s = state %s, warrant %+v; want answered, option yes, by the NATS user operator", id, rec.State, rec.Warrant)
	}
	within(t, tab, "the answered ask to leave the page", chromedp.WaitNotPresent(chromedp.CSS(askRow)))

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), "page.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("MESH_TEST_SCREENSHOTS"); dir != "" { // to look at it after the test
		_ = os.WriteFile(filepath.Join(dir, "page.png"), shot, 0o644)
	}
	if len(shot) < 10_000 {
		t.Errorf("the screenshot has %d bytes; want a rendered page", len(shot))
	}
}

// version reads the version a view of the page shows.
func version(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`data-version="([0-9]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no version on %s:\n%s", url, b)
	}
	return string(m[1])
}

// token reads the page's answer token from its HTML.
func token(t *testing.T, client *http.Client, base string) string {
	t.Helper()
	resp, err := client.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`name="token" value="([0-9a-f]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no token on the page (%d):\n%s", resp.StatusCode, b)
	}
	return string(m[1])
}

// TestAnswerRefusesCrossSiteRequests posts answers the way another site
// (or a page on a rebound name) would: each is refused and the ask stays
// open.
func TestAnswerRefusesCrossSiteRequests(t *testing.T) {
	r := start(t)
	r.apply(withoutVaultwarden(t))
	r.settle()
	var p mesh.Provision
	bustest.WaitFor(t, 0, "an ask", func() bool {
		return r.get(mesh.ProvisionsBucket, "ace.vaultwarden.database", &p) && p.Ask != ""
	})
	good := token(t, r.client, r.url)
	for _, c := range []struct {
		name   string
		token  string
		header map[string]string
		want   int
	}{
		{"no token", "", nil, http.StatusForbidden},
		{"wrong token", strings.Repeat("0", len(good)), nil, http.StatusForbidden},
		{"another site's origin", good, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"cross-site fetch", good, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"a rebound host name", good, map[string]string{"Host": "evil.example"}, http.StatusMisdirectedRequest},
	} {
		form := url.Values{"ask": {p.Ask}, "option": {"yes"}, "token": {c.token}}
		req, _ := http.NewRequest(http.MethodPost, r.url+"/answer", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range c.header {
			if k == "Host" {
				req.Host = v
			}
			req.Header.Set(k, v)
		}
		resp, err := r.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: POST /answer = %d; want %d", c.name, resp.StatusCode, c.want)
		}
	}
	var rec mesh.Record
	if !r.get(mesh.RecordsBucket, p.Ask, &rec) || rec.State != mesh.RecordOpen {
		t.Errorf("record %s = %+v; want still open", p.Ask, rec)
	}
	// The same request from the page itself answers.
	form := url.Values{"ask": {p.Ask}, "option": {"no"}, "token": {good}}
	req, _ := http.NewRequest(http.MethodPost, r.url+"/answer", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", r.url)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "answered no by operator") {
		t.Errorf("same-origin POST /answer = %d %q; want 200, answered no by operator", resp.StatusCode, b)
	}
	// An answer to an ask no longer open says the router's why.
	req, _ = http.NewRequest(http.MethodPost, r.url+"/answer", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("answering twice = %d; want 409 with the router's why", resp.StatusCode)
	}
}

// TestPageSaysWhenNoSeatHoldsTheLease: the summary names the seat that
// holds the lease and when it last composed; once the seat stops, the open
// page says, without a reload, that no seat holds the lease and since when
// the seat last composed.
func TestPageSaysWhenNoSeatHoldsTheLease(t *testing.T) {
	tab := browser(t)
	r := start(t)
	within(t, tab, "loading the page",
		login(r.url),
		chromedp.Navigate(r.url),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.WaitVisible(chromedp.CSS(`#summary #seat`)))
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	said, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#summary #seat`)))
	if err != nil || !strings.Contains(said, "holds the lease since") || !strings.Contains(said, "last wrote") {
		t.Errorf("the page says of the seat %q, %v; want who holds the lease since when, and when it last composed", said, err)
	}
	r.stopSeat()
	within(t, tab, "the page to say no seat holds the lease", chromedp.WaitVisible(chromedp.CSS(`#summary #noseat`)))
	said, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#summary #noseat`)))
	if err != nil || !strings.Contains(said, "no seat holds the lease") || !strings.Contains(said, "last wrote") {
		t.Errorf("the page says %q, %v; want that no seat holds the lease, and since when the seat last composed", said, err)
	}
}

// TestUnknownKeyNodeOrModuleIs404: a drill-down to a key, node or module
// the mesh holds nothing of answers 404 with a page that says "No such
// key" (node, module), keeps the page's header and search and leads to the
// summary, and names no node the key does not belong to; the known
// neighbours (a provision key, a plan key, a node, a module) answer 200.
func TestUnknownKeyNodeOrModuleIs404(t *testing.T) {
	r := start(t)
	get := func(query string) (int, string) {
		t.Helper()
		resp, err := r.client.Get(r.url + "/?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct{ query, says string }{
		{"key=nosuch.key", "No such key"},
		{"key=ace.nosuch", "No such key"},
		{"key=" + url.QueryEscape("ace.gitea.credential.nosuch"), "No such key"},
		{"node=nosuch", "No such node"},
		{"module=nosuch", "No such module"},
	} {
		code, body := get(c.query)
		if code != http.StatusNotFound || !strings.Contains(body, c.says) {
			t.Errorf("/?%s = %d, saying %q: %v; want 404 saying %q", c.query, code, c.says, strings.Contains(body, c.says), c.says)
		}
		if !strings.Contains(body, `<form id="search"`) || !strings.Contains(body, `<nav class="crumbs"><a href="/">mesh</a>`) {
			t.Errorf("/?%s: the 404 page has no search or no crumb to the mesh:\n%s", c.query, body)
		}
		if strings.Contains(body, "node nosuch") {
			t.Errorf("/?%s: the 404 page has a crumb to the node nosuch, which the mesh does not hold", c.query)
		}
	}
	for _, q := range []string{
		"key=" + url.QueryEscape("ace.gitea.credential.postgres_database_main"), "key=ace.gitea",
		"node=ace", "node=control", "module=gitea", "module=postgres",
	} {
		if code, body := get(q); code != http.StatusOK || strings.Contains(body, "No such") {
			t.Errorf("/?%s = %d (no such said: %v); want 200 with its view", q, code, strings.Contains(body, "No such"))
		}
	}
}

// TestRetiredKeyIsSaidRetired: a key the seat deleted on the operator's
// yes (its ask's record answered yes, the key gone) answers 200, its view
// saying it was retired, by which ask, on whose answer and when, without
// "No such key" (it answered 404 under that heading, its Why saying it was
// retired).
func TestRetiredKeyIsSaidRetired(t *testing.T) {
	r := start(t)
	key := mesh.ProvisionKey{Node: "ace", Consumer: "wiki", Provision: "database"}
	at := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	ask := retire.Ask(key, mesh.Provision{Provision: "database", Consumer: mesh.Ref{Module: "wiki", Node: "ace"},
		Provider: mesh.Ref{Module: "postgres", Node: "control"}, State: mesh.Retiring}, at, 0)
	yes, _ := ask.Option("yes")
	r.put(mesh.RecordsBucket, ask.ID, mesh.Record{State: mesh.RecordAnswered, Ask: ask, Warrant: &mesh.RecordWarrant{
		Asker: "mesh-provisioner", Ask: ask.ID, Outcome: mesh.OutcomeChosen, Option: "yes", Binds: yes.Binds,
		By: mesh.Identity{Who: "alice", Kind: "operator", Identity: "alice"}, At: at.Add(time.Hour)}})

	var code int
	var body string
	bustest.WaitFor(t, 0, "the page to say "+key.String()+" retired", func() bool {
		resp, err := r.client.Get(r.url + "/?key=" + url.QueryEscape(key.String()))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return strings.Contains(body, `id="retired"`)
	})
	if code != http.StatusOK || strings.Contains(body, "No such key") {
		t.Errorf("/?key=%s = %d (No such key said: %v); want 200 saying it was retired", key, code, strings.Contains(body, "No such key"))
	}
	for _, want := range []string{
		"no longer kept: the seat deleted it on the operator&#39;s warrant",
		"By the ask <span class=\"id\">" + ask.ID + "</span>",
		"removed on the answer yes of alice at 2026-11-30 05:00Z to " + ask.ID,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/?key=%s does not say %q:\n%s", key, want, body)
		}
	}
}

// TestUnknownWhileReadingIs503: while the page's copies have not read
// their buckets (here its user may not make the consumers a watch needs,
// so they never do), a drill-down to a key the page holds nothing of is
// not said missing: it answers 503 with Retry-After, the page saying it is
// still reading the mesh.
func TestUnknownWhileReadingIs503(t *testing.T) {
	srv := bustest.Server(t, `authorization { users = [
  {user: seat, password: s}
  {user: web, password: w, permissions: {publish: {deny: ["$JS.API.CONSUMER.>"]}}}
] }`)
	ctx := bustest.Context(t)
	_, sjs, err := bus.Connect(bus.Dial{URL: srv.URL(), User: "seat", Password: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{mesh.ProvisionsBucket, mesh.PlansBucket, mesh.RefusedBucket, mesh.RecordsBucket} {
		if _, err := bus.Bucket(ctx, sjs, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	wnc, wjs, err := bus.Connect(bus.Dial{URL: srv.URL(), User: "web", Password: "w"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	page := web.New(ctx, web.Config{JS: wjs, NC: wnc, User: "operator", Login: testLogin, LoginFile: testLoginFile})
	hs := serve(t, page)
	resp, err := hs.Client().Get(hs.URL + "/?key=ace.gitea")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(b), "still reading") {
		t.Errorf("/?key=ace.gitea before the page has read the bus = %d, Retry-After %q; want 503 with Retry-After, saying it is still reading:\n%s",
			resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}
