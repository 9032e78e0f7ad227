package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/web"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// bigMesh is a synthetic mesh of workers nodes fed to a page as its
// copies would feed it: every worker has a plan of app-a and app-b, each
// consuming database (postgres) and cache (redis) provided on "control",
// which only provides (plans of postgres and redis, no provision of its
// own). Every 50th worker's app-a database is failed, every 7th worker's
// app-b cache waits, the rest is provided.
type bigMesh struct {
	workers int
	counts  map[mesh.State]int
}

func worker(i int) string { return fmt.Sprintf("node-%05d", i) }

func (m *bigMesh) state(i int, mod, prov string) (mesh.State, string) {
	switch {
	case mod == "app-a" && prov == "database" && i%50 == 0:
		return mesh.Failed, "postgres on control said: role app-a exists with another owner"
	case mod == "app-b" && prov == "cache" && i%7 == 0:
		return mesh.Waits, "redis on control waits: no memory left for another database"
	}
	return mesh.Provided, ""
}

func (m *bigMesh) feed(p *web.Page) {
	m.counts = map[mesh.State]int{}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	put := func(bucket, key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		p.Take(bus.Change{Bucket: bucket, Key: key, Value: b, Revision: 1})
	}
	for _, mod := range []string{"postgres", "redis"} {
		put(mesh.PlansBucket, "control."+mod, map[string]any{"module": mod})
	}
	for i := 1; i <= m.workers; i++ {
		n := worker(i)
		for _, mod := range []string{"app-a", "app-b"} {
			put(mesh.PlansBucket, n+"."+mod, map[string]any{"module": mod})
			for prov, provider := range map[string]string{"database": "postgres", "cache": "redis"} {
				st, why := m.state(i, mod, prov)
				m.counts[st]++
				put(mesh.ProvisionsBucket, n+"."+mod+"."+prov, mesh.Provision{
					Provision: prov, Consumer: mesh.Ref{Module: mod, Node: n},
					Provider: mesh.Ref{Module: provider, Node: "control"}, State: st, Why: why, At: at})
			}
		}
	}
}

// stream reads the server-sent events of url, handing each event's data
// to events.
func stream(t *testing.T, ctx context.Context, client *http.Client, url string) <-chan string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 16)
	go func() {
		defer resp.Body.Close()
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "data: "):
				data.WriteString(strings.TrimPrefix(line, "data: "))
			case line == "":
				if data.Len() > 0 {
					events <- data.String()
				}
				data.Reset()
			}
		}
	}()
	return events
}

func next(t *testing.T, events <-chan string, what string) string {
	t.Helper()
	select {
	case e, ok := <-events:
		if !ok {
			t.Fatalf("%s: the event stream ended", what)
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no event in 20 s", what)
	}
	return ""
}

// shoot keeps a screenshot of the tab in $MESH_TEST_SCREENSHOTS, when set,
// to look at after the test.
func shoot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	dir := os.Getenv("MESH_TEST_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(tab, 10*time.Second)
	defer cancel()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), shot, 0o644); err != nil {
		t.Error(err)
	}
}

// bigPage serves a page fed with a mesh of workers nodes (and control).
func bigPage(t testing.TB, workers int) (context.Context, *web.Page, *httptest.Server, *bigMesh) {
	srv := bustest.Server(t)
	ctx := bustest.Context(t)
	nc, js := bustest.Connect(t, srv, "operator-web")
	page := web.NewStill(ctx, web.Config{JS: js, NC: nc, User: "operator", Login: testLogin, LoginFile: testLoginFile})
	m := &bigMesh{workers: workers}
	m.feed(page)
	return ctx, page, serve(t, page), m
}

// paintJS waits for the next frame and returns the page's first
// contentful paint in ms since navigation (its load's end when Chromium
// gives no paint entry).
const paintJS = `new Promise((done) => requestAnimationFrame(() => setTimeout(() => {
  const p = performance.getEntriesByName("first-contentful-paint")[0];
  done(p ? p.startTime : performance.getEntriesByType("navigation")[0].loadEventEnd);
}, 0)))`

// BenchmarkPageFirstPaint loads the summary of a 10,000-node mesh in
// headless Chromium (the page fed as in TestPageAtTenThousandNodes) once
// per op and reports the first contentful paint (paint-ms) and the first
// response's size (bytes).
func BenchmarkPageFirstPaint(b *testing.B) {
	tab := browser(b)
	_, _, hs, _ := bigPage(b, 10_000)
	var paint float64
	var size int
	for b.Loop() {
		resp, err := hs.Client().Get(hs.URL + "/")
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		size = len(body)
		if err := chromedp.Do(tab, login(hs.URL), chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#summary`))); err != nil {
			b.Fatal(err)
		}
		ms, err := chromedp.Run(tab, chromedp.Evaluate[float64](paintJS, chromedp.EvalAwaitPromise))
		if err != nil {
			b.Fatal(err)
		}
		paint += ms
	}
	b.ReportMetric(paint/float64(b.N), "paint-ms")
	b.ReportMetric(float64(size), "bytes")
}

// TestPageAtTenThousandNodes loads the page of a 10,000-node mesh fed to
// the page's own state (its views at scale, in a second; the bus path is
// TestPageOnTheBus's at 200 generated nodes, and scripts/webpaint -sizes
// 10000's at 10,000) in headless Chromium: the first response is under
// 1 MB and shows the mesh's counts
// and one page of nodes, "control" (which only provides) among them;
// the pager reaches the next nodes; a search finds a node's keys, whole,
// and a click shows a key with its why walk; a node's drill-down shows
// what it provides; a change reaches an open page as a small delta.
func TestPageAtTenThousandNodes(t *testing.T) {
	tab := browser(t)
	ctx, page, hs, m := bigPage(t, 10_000)

	resp, err := hs.Client().Get(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	first, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first response at %d nodes: %d bytes", m.workers+1, len(first))
	if len(first) >= 1<<20 {
		t.Errorf("the first response has %d bytes; want under 1 MB", len(first))
	}
	if n := strings.Count(string(first), `data-node="`); n != web.PageSize {
		t.Errorf("the first response shows %d node rows; want one page, %d", n, web.PageSize)
	}

	text := func(ctx context.Context, sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	within(t, tab, "loading the page", login(hs.URL), chromedp.Navigate(hs.URL), chromedp.WaitVisible(chromedp.CSS(`#live.on`)))
	tctx, cancel := context.WithTimeout(tab, 60*time.Second)
	defer cancel()
	for sel, want := range map[string]string{
		"#summary .n-nodes":                               strconv.Itoa(m.workers + 1),
		"#summary .n-plans":                               strconv.Itoa(2*m.workers + 2),
		"#summary .n-provisions":                          strconv.Itoa(4 * m.workers),
		`#summary [data-count="failed"]`:                  fmt.Sprintf("failed %d", m.counts[mesh.Failed]),
		`#summary [data-count="waits"]`:                   fmt.Sprintf("waits %d", m.counts[mesh.Waits]),
		`#summary [data-count="provided"]`:                fmt.Sprintf("provided %d", m.counts[mesh.Provided]),
		`tr[data-node="control"] td:nth-child(4)`:         strconv.Itoa(4 * m.workers), // it provides every key
		`tr[data-node="node-00007"] [data-count="waits"]`: "waits 1",
	} {
		if got := text(tctx, sel); got != want {
			t.Errorf("%s = %q; want %q", sel, got, want)
		}
	}

	shoot(t, tab, "summary-10k")
	within(t, tab, "the next page of nodes",
		chromedp.Click(chromedp.CSS(`#nodes a[rel="next"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="`+worker(web.PageSize)+`"]`)), // control is first
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)))
	if got := text(tctx, `#nodes .pager`); !strings.Contains(got, fmt.Sprintf("page 2 of %d", (m.workers+1+web.PageSize-1)/web.PageSize)) {
		t.Errorf("the pager says %q; want page 2 of every node's pages", got)
	}

	const key = "node-04250.app-a.database" // failed: 4250 is a multiple of 50
	within(t, tab, "searching node-04250",
		chromedp.SendKeys(chromedp.CSS(`#q`), "node-04250 app-a\r"),
		chromedp.WaitVisible(chromedp.CSS(`#found tr[data-key="`+key+`"][data-state="failed"]`)))
	if got := text(tctx, `#found .count`); got != "2" {
		t.Errorf("the search found %s keys; want node-04250's two of app-a", got)
	}
	if got := text(tctx, `#found tr[data-key="`+key+`"] td.key`); got != key {
		t.Errorf("the found row's key = %q; want it whole, %q", got, key)
	}
	within(t, tab, "clicking "+key,
		chromedp.Click(chromedp.CSS(`#found tr[data-key="`+key+`"] td.key a`)),
		chromedp.WaitVisible(chromedp.CSS(`#why tr.step`)))
	shoot(t, tab, "key-10k")
	if got := text(tctx, `#key h2`); got != key {
		t.Errorf("the key's view is titled %q; want the whole key %q", got, key)
	}
	if got := text(tctx, `#why tr.step:first-child`); !strings.Contains(got, key) || !strings.Contains(got, "role app-a exists") {
		t.Errorf("the why walk's first step = %q; want %s and its why", got, key)
	}

	within(t, tab, "drilling down to control",
		chromedp.Navigate(hs.URL+"/?node=control"),
		chromedp.WaitVisible(chromedp.CSS(`#provides`)))
	shoot(t, tab, "node-control-10k")
	if got := text(tctx, `#provides .count`); got != strconv.Itoa(4*m.workers) {
		t.Errorf("control provides %s keys on its page; want %d", got, 4*m.workers)
	}
	if got := text(tctx, `#plans .count`); got != "2" {
		t.Errorf("control shows %s plans; want postgres and redis", got)
	}

	within(t, tab, "drilling down to app-a",
		chromedp.Navigate(hs.URL+"/?module=app-a"),
		chromedp.WaitVisible(chromedp.CSS(`#consumes`)))
	for sel, want := range map[string]string{
		"#planned .count":  strconv.Itoa(m.workers),
		"#consumes .count": strconv.Itoa(2 * m.workers),
		"#provides .count": "0",
	} {
		if got := text(tctx, sel); got != want {
			t.Errorf("app-a's %s = %q; want %q", sel, got, want)
		}
	}
	within(t, tab, "searching state:failed",
		chromedp.Navigate(hs.URL+"/?q="+url.QueryEscape("state:failed module:app-a")),
		chromedp.WaitVisible(chromedp.CSS(`#found`)))
	if got := text(tctx, "#found .count"); got != strconv.Itoa(m.counts[mesh.Failed]) {
		t.Errorf("state:failed module:app-a found %s keys; want %d", got, m.counts[mesh.Failed])
	}
	within(t, tab, "searching node:control state:waits",
		chromedp.Navigate(hs.URL+"/?q="+url.QueryEscape("node:control state:waits")),
		chromedp.WaitVisible(chromedp.CSS(`#found`)))
	if got := text(tctx, "#found .count"); got != strconv.Itoa(m.counts[mesh.Waits]) {
		t.Errorf("node:control state:waits found %s keys; want every waiting key control provides, %d", got, m.counts[mesh.Waits])
	}

	// A change reaches an open summary as a delta of what it shows.
	within(t, tab, "the summary again", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#live.on`)))
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	version := strings.Split(strings.Split(string(first), `data-version="`)[1], `"`)[0]
	events := stream(t, sctx, hs.Client(), hs.URL+"/events?v="+version)
	if e := next(t, events, "the stream's first event"); strings.Contains(e, `"content"`) {
		t.Fatalf("the stream's first event at the page's own version carries the view: %.200s", e)
	}
	b, _ := json.Marshal(mesh.Provision{Provision: "database", Consumer: mesh.Ref{Module: "app-a", Node: worker(1)},
		Provider: mesh.Ref{Module: "postgres", Node: "control"}, State: mesh.Failed, Why: "postgres on control said: disk full",
		At: time.Now()})
	page.Take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: worker(1) + ".app-a.database", Value: b, Revision: 2})
	d := next(t, events, "the delta of "+worker(1))
	t.Logf("delta of one key at %d nodes: %d bytes", m.workers+1, len(d))
	if len(d) > 8<<10 || strings.Contains(d, `"content"`) || !strings.Contains(d, `"summary"`) ||
		!strings.Contains(d, `"nodes/`+worker(1)+`"`) {
		t.Errorf("the delta = %d bytes %.300s; want under 8 KB: the summary and %s's row", len(d), d, worker(1))
	}
	want := fmt.Sprintf("failed %d", m.counts[mesh.Failed]+1)
	within(t, tab, "the summary to count the change",
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="`+worker(1)+`"] [data-count="failed"]`)))
	pctx, pcancel := context.WithTimeout(tab, 20*time.Second)
	defer pcancel()
	if _, err := chromedp.Run(pctx, chromedp.Poll[bool](
		`document.querySelector('#summary [data-count="failed"]').textContent === `+strconv.Quote(want))); err != nil {
		t.Errorf("the summary does not say %q after the delta: %v", want, err)
	}
}
