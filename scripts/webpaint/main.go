// Command webpaint measures the operator's page of a running mesh (issue
// 17): for each view it prints the first response's size and time, and the
// first contentful paint in headless Chromium (/usr/bin/chromium), the
// median of -runs loads.
//
// Run it against a page, for example up's on a generated mesh:
//
//	go run ./cmd/mesh-provisioner gen --nodes 10000 --modules 8 -o /tmp/g.yaml
//	go run ./cmd/mesh-provisioner up /tmp/g.yaml --data /tmp/g --web 127.0.0.1:4392 &
//	go run ./scripts/webpaint -url http://127.0.0.1:4392 [-runs 5] [-views /,/?node=node-0042]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
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
	base := flag.String("url", "http://127.0.0.1:4280", "the page's address")
	views := flag.String("views", "/,/?node=node-0042,/?q=state:asked", "views to load, comma-separated")
	runs := flag.Int("runs", 5, "loads per view (the median is printed)")
	flag.Parse()
	if err := run(*base, strings.Split(*views, ","), *runs); err != nil {
		fmt.Fprintln(os.Stderr, "webpaint:", err)
		os.Exit(1)
	}
}

func run(base string, views []string, runs int) error {
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
	fmt.Printf("%-28s %12s %10s %10s\n", "view", "bytes", "response", "paint")
	for _, v := range views {
		var sizes []int
		var took, paints []float64
		for range runs {
			start := time.Now()
			resp, err := http.Get(base + v)
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
