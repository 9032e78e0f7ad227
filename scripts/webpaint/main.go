// Command webpaint measures and checks the operator's page (issue 17).
//
// With -sizes it runs the page on the real path at each mesh size
// (internal/web/pagecheck): a real embedded nats-server with JetStream, the
// mesh of "gen --nodes N --modules M" applied, the seat writing plans and
// provisions, the page following the buckets behind its login, headless
// Chromium (/usr/bin/chromium) logging in and loading it. It prints per size the first response's
// bytes and time, the first contentful paint, the summary's counts beside
// the bus's, the walk one click away, the delta of one key changed on the
// bus (through its provider's entry), and each search's first response,
// then each search's time against the first size's (the ratio). It exits 1
// when the page breaks a promise at some size (a first response of 1 MB or
// more, the summary's counts not the bus's, no walk one click from a key's
// row, a change sent as more than that key's row and counts or not shown
// live, the summary answered without the login):
//
//	go run ./scripts/webpaint -sizes 30,3000,10000 [-modules 8] [-runs 5]
//
// With -url (the login URL the page printed) it measures a page already
// running, for example up's on a generated mesh: for each view the first
// response's size and time, and the first contentful paint, the median of
// -runs loads:
//
//	go run ./cmd/mesh-provisioner gen --nodes 10000 --modules 8 -o /tmp/g.yaml
//	go run ./cmd/mesh-provisioner up /tmp/g.yaml --data /tmp/g --web 127.0.0.1:4392 &
//	go run ./scripts/webpaint -url "http://127.0.0.1:4392/?login=$(cat /tmp/g/web-login)" [-runs 5] [-views /,/?node=node-0042]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// paintJS waits for the next frame and returns the first contentful paint
// in ms since navigation (the load's end when Chromium gives no entry).
const paintJS = `new Promise((done) => requestAnimationFrame(() => setTimeout(() => {
  const p = performance.getEntriesByName("first-contentful-paint")[0];
  done(p ? p.startTime : performance.getEntriesByType("navigation")[0].loadEventEnd);
}, 0)))`

func main() {
	base := flag.String("url", "", "the login URL of a page already running (http://ADDR/?login=SECRET, as it printed)")
	views := flag.String("views", "/,/?node=node-0042,/?q=state:asked", "views to load, comma-separated (with -url)")
	runs := flag.Int("runs", 5, "loads per view (the median is printed)")
	sizes := flag.String("sizes", "", "mesh sizes (nodes) to run the page at, comma-separated; the first is the base of the ratios")
	modules := flag.Int("modules", 8, "app modules per worker node (with -sizes)")
	searches := flag.String("searches", "node-0001,0001,node-0001.bookmarks-1,module:books-1,route,state:asked", "searches timed at each size, comma-separated (with -sizes)")
	flag.Parse()
	var err error
	switch {
	case *sizes != "":
		err = check(*sizes, *modules, strings.Split(*searches, ","), *runs)
	case *base != "":
		err = run(*base, strings.Split(*views, ","), *runs)
	default:
		err = fmt.Errorf("give -sizes (run the page on a generated mesh) or -url (measure a running page)")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "webpaint:", err)
		os.Exit(1)
	}
}

// run logs in to the page with the login URL login, as a browser and as
// an HTTP client, then loads each view runs times.
func run(login string, views []string, runs int) error {
	u, err := url.Parse(login)
	if err != nil || !u.Query().Has("login") {
		return fmt.Errorf("-url %q: want the page's login URL, http://ADDR/?login=SECRET", login)
	}
	base := u.Scheme + "://" + u.Host
	jar, err := cookiejar.New(nil)
	if err != nil {
		return err
	}
	client := &http.Client{Jar: jar}
	resp, err := client.Get(login)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("logging in with -url: %s", resp.Status)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath("/usr/bin/chromium"), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1000))
	defer cancelAlloc()
	tab, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(tab); err != nil {
		return fmt.Errorf("starting chromium: %w", err)
	}
	ctx, c := context.WithTimeout(tab, 60*time.Second)
	err = chromedp.Do(ctx, chromedp.Navigate(login), chromedp.WaitVisible(chromedp.CSS(`#summary`)))
	c()
	if err != nil {
		return fmt.Errorf("logging in in chromium: %w", err)
	}
	fmt.Printf("%-28s %12s %10s %10s\n", "view", "bytes", "response", "paint")
	for _, v := range views {
		var sizes []int
		var took, paints []float64
		for range runs {
			start := time.Now()
			resp, err := client.Get(base + v)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			took = append(took, float64(time.Since(start).Microseconds())/1000)
			sizes = append(sizes, len(b))
			ctx, c := context.WithTimeout(tab, 60*time.Second)
			err = chromedp.Do(ctx, chromedp.Navigate(base+v), chromedp.WaitVisible(chromedp.CSS(`#summary`)))
			if err == nil {
				var ms float64
				ms, err = chromedp.Run(ctx, chromedp.Evaluate[float64](paintJS, chromedp.EvalAwaitPromise))
				paints = append(paints, ms)
			}
			c()
			if err != nil {
				return fmt.Errorf("loading %s: %w", v, err)
			}
		}
		fmt.Printf("%-28s %12d %8.0fms %8.0fms\n", v, median(sizes), median(took), median(paints))
	}
	return nil
}

func median[T int | float64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
