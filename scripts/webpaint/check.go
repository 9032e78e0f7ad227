package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/web/pagecheck"
)

// check runs pagecheck at each size and prints its figures, then the
// searches' ratios to the first size; it fails when a size breaks a
// promise of the page.
func check(sizeList string, modules int, searches []string, runs int) error {
	var sizes []int
	for _, s := range strings.Split(sizeList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return fmt.Errorf("-sizes: %q is not a mesh size of at least 2 nodes", s)
		}
		sizes = append(sizes, n)
	}
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if dirty, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(dirty) > 0 {
		commit = append([]byte(strings.TrimSpace(string(commit))), "+changes"...)
	}
	fmt.Printf("webpaint at commit %s on %s, load average %s\n", strings.TrimSpace(string(commit)),
		time.Now().UTC().Format("2006-01-02 15:04Z"), loadavg())
	var reps []pagecheck.Report
	failed := false
	for _, n := range sizes {
		dir, err := os.MkdirTemp("", "webpaint-")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		rep, err := pagecheck.Run(ctx, pagecheck.Config{Nodes: n, Modules: modules, Dir: dir, Searches: searches, Runs: runs,
			Logf: func(f string, a ...any) { fmt.Printf("  "+f+"\n", a...) }})
		cancel()
		os.RemoveAll(dir)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		reps = append(reps, rep)
		fmt.Printf("%d nodes (%d plans, %d provisions): applied %.1f s, seat settled %.1f s, the page read the bus in %.1f s\n",
			n, rep.Plans, rep.Provisions, rep.Applied.Seconds(), rep.Settled.Seconds(), rep.PageRead.Seconds())
		fmt.Printf("  summary: first response %d bytes in %.1f ms, first paint %.0f ms; shows %s nodes, %s plans, %s provisions\n",
			rep.FirstBytes, ms(rep.FirstTook), rep.FirstPaint, rep.Shown["nodes"], rep.Shown["plans"], rep.Shown["provisions"])
		fmt.Printf("  without the login the summary answers %d; the operator's browser logs in with the login URL\n", rep.Unlogged)
		fmt.Printf("  one click on %s: walk %v, first step %q\n", rep.Key, rep.WalkClicked, rep.WalkFirst)
		fmt.Printf("  its provider's entry failed: delta %d bytes, parts %v, whole view %v, shown live %v\n",
			rep.DeltaBytes, rep.DeltaParts, rep.DeltaContent, rep.ShownLive)
		for _, p := range rep.Problems() {
			fmt.Printf("  PROBLEM: %s\n", p)
			failed = true
		}
	}
	fmt.Printf("\n| search |")
	for _, n := range sizes {
		fmt.Printf(" %d nodes: median (fastest), found |", n)
	}
	for _, n := range sizes[1:] {
		fmt.Printf(" %d / %d (median, min) |", n, sizes[0])
	}
	fmt.Printf("\n|---|")
	for range 2*len(sizes) - 1 {
		fmt.Printf("---:|")
	}
	fmt.Println()
	for i, s := range searches {
		fmt.Printf("| `%s` |", s)
		for _, r := range reps {
			fmt.Printf(" %.1f ms (%.1f), %d found |", ms(r.Searches[i].Median), ms(r.Searches[i].Min), r.Searches[i].Found)
		}
		for _, r := range reps[1:] {
			fmt.Printf(" %.2fx, %.2fx |", float64(r.Searches[i].Median)/float64(reps[0].Searches[i].Median),
				float64(r.Searches[i].Min)/float64(reps[0].Searches[i].Min))
		}
		fmt.Println()
	}
	fmt.Printf("load average after: %s\n", loadavg())
	if failed {
		return errors.New("the page broke a promise (PROBLEM above)")
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// loadavg returns the machine's load averages (1, 5, 15 min).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
