// Package pagecheck runs the operator's page over a generated mesh on the
// real path and reports what it saw, for the page's test (a small mesh)
// and scripts/webpaint (10,000 nodes): a real embedded nats-server with
// JetStream, the mesh of [gen.Generate] applied to it ([meshfile.Apply]),
// the seat writing its plans and provisions, the ask router, the page
// following the buckets ([web.New]) and served on loopback behind its
// login (its secret in Dir/web-login), headless Chromium logging in with
// the login URL and loading it. Run measures and observes; [Report.Problems] says
// which of the page's promises a report breaks (first response under
// 1 MB, the summary's counts the bus's, a key's why walk one click away
// from its row, a change of one key sent live as a small delta of that
// key's row and its counts only, nothing shown without the login).
package pagecheck

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/internal/web"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Node is the node the check drills down to and changes a key of: gen's
// first worker, the same in every size.
const Node = "node-0001"

// MaxFirst is the most bytes the page's first response may have, and
// MaxDelta the most a change of one key may send.
const (
	MaxFirst = 1 << 20
	MaxDelta = 8 << 10
)

// Config configures [Run].
type Config struct {
	Nodes, Modules int    // the generated mesh (gen --nodes --modules)
	Dir            string // the server's store; the caller removes it
	Chromium       string // the browser's binary; empty means /usr/bin/chromium
	// Searches are the searches (the box's text) whose first response is
	// timed, Runs times each (the median and fastest are reported; 0
	// means 5), after a collection of the garbage left by reading the bus.
	Searches []string
	Runs     int
	// Logf receives the check's progress; nil drops it. Log receives the
	// components' logs; nil drops them.
	Logf func(format string, args ...any)
	Log  *slog.Logger
}

// Report is what [Run] saw. Times are wall times on the machine it ran on.
type Report struct {
	Nodes             int           // nodes of the generated mesh
	Plans, Provisions int           // keys of the plans and provisions buckets once the seat settled
	Applied, Settled  time.Duration // the mesh file applied; the seat settled after that
	PageRead          time.Duration // the page's copies read the buckets
	FirstBytes        int           // the summary's first response
	FirstTook         time.Duration
	FirstPaint        float64           // ms, first contentful paint in Chromium
	Shown             map[string]string // the summary's counts in Chromium: nodes, plans, provisions
	Key               string            // the key the check walks and changes: Node's first route (from route-proxy)
	WalkClicked       bool              // one click on the key's row in Node's view showed its why walk
	WalkFirst         string            // the walk's first step, as shown
	DeltaBytes        int               // the event the change of Key sent to Node's view
	DeltaParts        []string          // its parts' ids
	DeltaContent      bool              // it sent the whole view
	ShownLive         bool              // Chromium showed Key failed without loading the page again
	Unlogged          int               // the status of the summary asked without the login
	Searches          []Timed           // each search's first response
}

// Timed is one view's first response: its bytes, the median time of Runs
// loads, its status.
type Timed struct {
	View        string
	Bytes       int
	Median, Min time.Duration
	Status      int
	Found       int // the provisions a search found (its count), -1 when not said
}

// foundRe finds the count of a search's provisions in its view.
var foundRe = regexp.MustCompile(`data-id="found" id="found">\s*<h2>Provisions <span class="count">([0-9]+)<`)

// Problems returns each promise of the page r breaks, said; none when it
// keeps every one.
func (r Report) Problems() []string {
	var out []string
	if r.FirstBytes >= MaxFirst {
		out = append(out, fmt.Sprintf("the first response has %d bytes; want under %d", r.FirstBytes, MaxFirst))
	}
	for name, want := range map[string]int{"nodes": r.Nodes, "plans": r.Plans, "provisions": r.Provisions} {
		if got := r.Shown[name]; got != strconv.Itoa(want) {
			out = append(out, fmt.Sprintf("the summary shows %q %s; want the bus's %d", got, name, want))
		}
	}
	if !r.WalkClicked || !strings.Contains(r.WalkFirst, r.Key) {
		out = append(out, fmt.Sprintf("one click on %s's row gave no why walk of it (clicked %v, first step %q)", r.Key, r.WalkClicked, r.WalkFirst))
	}
	want := []string{"summary", "node/" + Node, "consumes/" + r.Key}
	extra := slices.DeleteFunc(slices.Clone(r.DeltaParts), func(id string) bool { return slices.Contains(want, id) })
	if r.DeltaContent || r.DeltaBytes >= MaxDelta || len(extra) > 0 || !slices.Contains(r.DeltaParts, "consumes/"+r.Key) {
		out = append(out, fmt.Sprintf("the change of %s sent %d bytes, parts %v, whole view %v; want under %d bytes of %v only",
			r.Key, r.DeltaBytes, r.DeltaParts, r.DeltaContent, MaxDelta, want))
	}
	if !r.ShownLive {
		out = append(out, fmt.Sprintf("Chromium did not show %s failed on the open page without loading it again", r.Key))
	}
	if r.Unlogged != http.StatusUnauthorized {
		out = append(out, fmt.Sprintf("the summary without the login answered %d; want 401", r.Unlogged))
	}
	for _, s := range r.Searches {
		if s.Status != http.StatusOK {
			out = append(out, fmt.Sprintf("%s answered %d; want 200", s.View, s.Status))
		}
	}
	return out
}

// paintJS waits for the next frame and returns the first contentful paint
// in ms since navigation (the load's end when Chromium gives no entry).
const paintJS = `new Promise((done) => requestAnimationFrame(() => setTimeout(() => {
  const p = performance.getEntriesByName("first-contentful-paint")[0];
  done(p ? p.startTime : performance.getEntriesByType("navigation")[0].loadEventEnd);
}, 0)))`

// Run builds the mesh of cfg on a new server, runs the seat, the router
// and the page over it and checks the page in Chromium, until every step
// is done or ctx ends. It returns what it saw, and an error when a step
// could not be made (the server, the mesh, the browser, a wait past ctx);
// what the page does wrong is in [Report.Problems].
func Run(ctx context.Context, cfg Config) (Report, error) {
	rep := Report{Nodes: max(cfg.Nodes, 1), Shown: map[string]string{}}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Chromium == "" {
		cfg.Chromium = "/usr/bin/chromium"
	}
	if cfg.Runs <= 0 {
		cfg.Runs = 5
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	srv, err := bus.StartServer(bus.ServerConfig{Dir: cfg.Dir, Listen: "127.0.0.1:0"})
	if err != nil {
		return rep, err
	}
	defer srv.Shutdown()
	dial := func(name string) (jetstream.JetStream, func(), error) {
		nc, js, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: name, Log: log})
		if err != nil {
			return nil, nil, err
		}
		return js, nc.Close, nil
	}
	ojs, closeOp, err := dial("operator")
	if err != nil {
		return rep, err
	}
	defer closeOp()
	anc, ajs, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "mesh-asks", Log: log})
	if err != nil {
		return rep, err
	}
	defer anc.Close()
	if _, err := asks.Start(ctx, anc, ajs, log); err != nil {
		return rep, err
	}

	start := time.Now()
	f, err := meshfile.Parse("gen.yaml", gen.Generate(rep.Nodes, cfg.Modules, 1))
	if err != nil {
		return rep, err
	}
	if _, err := meshfile.Apply(ctx, ojs, f, time.Now()); err != nil {
		return rep, fmt.Errorf("applying the mesh: %w", err)
	}
	rep.Applied = time.Since(start)
	logf("%d nodes: applied in %.1f s", rep.Nodes, rep.Applied.Seconds())

	start = time.Now()
	sjs, closeSeat, err := dial("seat")
	if err != nil {
		return rep, err
	}
	defer closeSeat()
	st := seat.New(sjs, seat.Config{Log: log})
	sctx, stopSeat := context.WithCancel(ctx)
	seatDone := make(chan error, 1)
	go func() { seatDone <- st.Run(sctx) }()
	defer func() {
		stopSeat()
		<-seatDone
	}()
	marks := seat.Marks(ctx, ojs)
	if err := poll(ctx, 100*time.Millisecond, func() bool { return st.Settled(marks) }); err != nil {
		return rep, fmt.Errorf("waiting for the seat to settle: %w", err)
	}
	rep.Settled = time.Since(start)
	if rep.Plans, err = countKeys(ctx, ojs, mesh.PlansBucket); err != nil {
		return rep, err
	}
	if rep.Provisions, err = countKeys(ctx, ojs, mesh.ProvisionsBucket); err != nil {
		return rep, err
	}
	logf("%d nodes: the seat settled in %.1f s: %d plans, %d provisions", rep.Nodes, rep.Settled.Seconds(), rep.Plans, rep.Provisions)

	start = time.Now()
	wnc, wjs, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "operator-web", Log: log})
	if err != nil {
		return rep, err
	}
	defer wnc.Close()
	loginFile := filepath.Join(cfg.Dir, web.LoginFile)
	secret, err := web.ReadLogin(loginFile)
	if err != nil {
		return rep, err
	}
	page := web.New(ctx, web.Config{JS: wjs, NC: wnc, User: "operator", Log: log, Login: secret, LoginFile: loginFile})
	select {
	case <-page.Ready():
	case <-ctx.Done():
		return rep, fmt.Errorf("waiting for the page to read the bus: %w", ctx.Err())
	}
	rep.PageRead = time.Since(start)
	pctx, stopPage := context.WithCancel(ctx)
	defer stopPage()
	addr, err := web.Serve(pctx, "127.0.0.1:0", page, log)
	if err != nil {
		return rep, err
	}
	base := "http://" + addr.String()
	logf("%d nodes: the page read the bus in %.1f s, serves %s", rep.Nodes, rep.PageRead.Seconds(), base)

	if _, _, rep.Unlogged, err = load(ctx, http.DefaultClient, base+"/"); err != nil {
		return rep, err
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		return rep, err
	}
	op := &http.Client{Jar: jar} // the operator's browser, logged in
	if _, _, status, err := load(ctx, op, web.LoginURL(addr, secret)); err != nil || status != http.StatusOK {
		return rep, fmt.Errorf("logging in to the page: %d, %v", status, err)
	}
	first, took, _, err := load(ctx, op, base+"/")
	if err != nil {
		return rep, err
	}
	rep.FirstBytes, rep.FirstTook = len(first), took

	runtime.GC() // the searches' times are not of the garbage reading the bus left
	for _, q := range cfg.Searches {
		view := "/?q=" + url.QueryEscape(q)
		t := Timed{View: view}
		var tooks []time.Duration
		for range cfg.Runs {
			b, took, status, err := load(ctx, op, base+view)
			if err != nil {
				return rep, err
			}
			t.Bytes, t.Status, t.Found = len(b), status, -1
			if m := foundRe.FindSubmatch(b); m != nil {
				t.Found, _ = strconv.Atoi(string(m[1]))
			}
			tooks = append(tooks, took)
		}
		slices.Sort(tooks)
		t.Median, t.Min = tooks[len(tooks)/2], tooks[0]
		rep.Searches = append(rep.Searches, t)
	}

	key, provider, err := keyFrom(ctx, ojs, Node, "route-proxy")
	if err != nil {
		return rep, err
	}
	rep.Key = key
	if err := inChromium(ctx, cfg.Chromium, base, web.LoginURL(addr, secret), op, provider, ojs, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// inChromium logs in with the login URL, loads the summary, clicks key's
// row on Node's view for its walk, and changes key through its provider's
// entry while Node's view is open (its event stream read by op, the
// operator's client), noting what it sees in rep.
func inChromium(ctx context.Context, chromium, base, login string, op *http.Client, provider string, js jetstream.JetStream, rep *Report) error {
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-extensions", true),
		chromedp.WindowSize(1280, 1000))
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil {
		return fmt.Errorf("starting %s: %w", chromium, err)
	}
	within := func(what string, steps ...chromedp.Action[chromedp.Void]) error {
		c, cancel := context.WithTimeout(tab, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(c, steps...); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	// text reads sel's text, read again (for up to 10 s) while empty: a
	// node the page's event stream replaced just then reads empty.
	text := func(sel string) string {
		c, cancel := context.WithTimeout(tab, 10*time.Second)
		defer cancel()
		var s string
		var err error
		_ = poll(c, 100*time.Millisecond, func() bool {
			s, err = chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
			s = strings.TrimSpace(s)
			return err != nil || s != ""
		})
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return s
	}

	if err := within("logging in and loading the summary", chromedp.Navigate(login), chromedp.WaitVisible(chromedp.CSS(`#live.on`))); err != nil {
		return err
	}
	c, cancel := context.WithTimeout(tab, 10*time.Second)
	paint, err := chromedp.Run(c, chromedp.Evaluate[float64](paintJS, chromedp.EvalAwaitPromise))
	cancel()
	if err != nil {
		return fmt.Errorf("reading the first paint: %w", err)
	}
	rep.FirstPaint = paint
	for _, name := range []string{"nodes", "plans", "provisions"} {
		rep.Shown[name] = text("#summary .n-" + name)
	}

	nodeView := base + "/?" + url.Values{"node": {Node}}.Encode()
	row := `#consumes tr[data-key="` + rep.Key + `"]`
	if err := within("loading "+Node+"'s view", chromedp.Navigate(nodeView), chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
		return err
	}
	if err := within("clicking "+rep.Key, chromedp.Click(chromedp.CSS(row+` td.key a`)),
		chromedp.WaitVisible(chromedp.CSS(`#why tr.step`))); err == nil {
		rep.WalkClicked = true
		rep.WalkFirst = text(`#why tr.step:first-child`)
	}

	if err := within("loading "+Node+"'s view again", chromedp.Navigate(nodeView), chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`)(ctx, tg)
			return err
		})); err != nil {
		return err
	}
	b, _, _, err := load(ctx, op, nodeView)
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`data-version="([0-9]+)"`).FindSubmatch(b)
	if m == nil {
		return fmt.Errorf("%s's view has no version", Node)
	}
	sctx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	events, err := stream(sctx, op, base+"/events?"+url.Values{"node": {Node}, "v": {string(m[1])}}.Encode())
	if err != nil {
		return err
	}
	if _, err := nextEvent(ctx, events); err != nil { // the view's own version: nothing to send
		return err
	}
	kv, err := js.KeyValue(ctx, mesh.BoundBucket(provider))
	if err != nil {
		return fmt.Errorf("the bucket of %s's entries: %w", provider, err)
	}
	entry, _ := json.Marshal(mesh.Entry{State: mesh.Failed, Why: "pagecheck: the disk is full"})
	if _, err := kv.Put(ctx, rep.Key, entry); err != nil {
		return fmt.Errorf("writing %s's entry of %s: %w", provider, rep.Key, err)
	}
	d, err := nextEvent(ctx, events)
	if err != nil {
		return fmt.Errorf("waiting for the delta of %s: %w", rep.Key, err)
	}
	rep.DeltaBytes = len(d)
	var delta struct {
		Content string `json:"content"`
		Parts   []struct {
			ID string `json:"id"`
		} `json:"parts"`
	}
	if err := json.Unmarshal([]byte(d), &delta); err != nil {
		return fmt.Errorf("the delta of %s does not decode: %w", rep.Key, err)
	}
	rep.DeltaContent = delta.Content != ""
	for _, p := range delta.Parts {
		rep.DeltaParts = append(rep.DeltaParts, p.ID)
	}
	if err := within(rep.Key+" to turn failed on the open page", chromedp.WaitVisible(chromedp.CSS(row+`[data-state="failed"]`))); err == nil {
		c, cancel := context.WithTimeout(tab, 10*time.Second)
		kept, err := chromedp.Run(c, chromedp.Evaluate[bool](`window.notReloaded === true`))
		cancel()
		rep.ShownLive = err == nil && kept
	}
	return nil
}

// load gets url with c and returns its body, how long it took, and its
// status.
func load(ctx context.Context, c *http.Client, url string) ([]byte, time.Duration, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, 0, err
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, time.Since(start), resp.StatusCode, err
}

// stream reads the server-sent events of url with c and hands each
// event's data on the channel, closed when the stream ends.
func stream(ctx context.Context, c *http.Client, url string) (<-chan string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
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
	return events, nil
}

// nextEvent waits up to 30 s for the stream's next event.
func nextEvent(ctx context.Context, events <-chan string) (string, error) {
	select {
	case e, ok := <-events:
		if !ok {
			return "", errors.New("the event stream ended")
		}
		return e, nil
	case <-time.After(30 * time.Second):
		return "", errors.New("no event in 30 s")
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// countKeys returns how many keys bucket holds.
func countKeys(ctx context.Context, js jetstream.JetStream, bucket string) (int, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", bucket, err)
	}
	l, err := kv.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", bucket, err)
	}
	defer l.Stop()
	n := 0
	for range l.Keys() {
		n++
	}
	return n, nil
}

// keyFrom returns node's first provision key (sorted) whose provider is
// the module provider, and the provider, reading node's keys only.
func keyFrom(ctx context.Context, js jetstream.JetStream, node, provider string) (string, string, error) {
	kv, err := js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		return "", "", err
	}
	l, err := kv.ListKeysFiltered(ctx, node+".>")
	if err != nil {
		return "", "", err
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	l.Stop()
	slices.Sort(keys)
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			return "", "", err
		}
		var p mesh.Provision
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			return "", "", fmt.Errorf("%s: %w", k, err)
		}
		if p.Provider.Module == provider {
			return k, provider, nil
		}
	}
	return "", "", fmt.Errorf("no provision of %s is provided by %s (of %d keys)", node, provider, len(keys))
}

// poll calls cond every d until it is true or ctx ends.
func poll(ctx context.Context, d time.Duration, cond func() bool) error {
	t := time.NewTicker(d)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
