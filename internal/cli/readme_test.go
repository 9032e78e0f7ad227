package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// readmeBlocks returns the lines of the README's code blocks after the
// line from, up to the line to (or the next "## " heading), comments cut.
func readmeBlocks(t *testing.T, from, to string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+from+"\n")
	if !ok {
		t.Fatalf("README.md has no line %q", from)
	}
	if i := strings.Index(rest, "\n"+to+"\n"); to != "" && i >= 0 {
		rest = rest[:i]
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	var lines []string
	in := false
	for _, l := range strings.Split(rest, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if in && strings.TrimSpace(l) != "" {
			if i := strings.Index(l, "  # "); i >= 0 {
				l = l[:i]
			}
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// TestReadmeTour runs every command of the README's five-minute tour, in
// its order, against a real server with a seat and the ask router over
// the bundled mesh (what "up" runs; "up" itself is run by the up tests):
// status, get, why, the sed that writes less.yaml, the dry run, the apply,
// asks, the answer of the ask asks printed (its id taken from asks), then
// the watch, yaml, a nats CLI context (the file "nats context add"
// writes), $NATS_URL and completion. A command the README shows that this
// test does not know fails it.
func TestReadmeTour(t *testing.T) {
	s := bustest.Server(t)
	startRouter(t, s)
	startSeat(t, s, homelabFile)
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CONTEXT", "")
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mp := func(line string) []string {
		t.Helper()
		args := strings.Fields(strings.TrimPrefix(line, "./mesh-provisioner "))
		for i, a := range args {
			if a == "less.yaml" {
				args[i] = filepath.Join(dir, "less.yaml")
			}
		}
		return args
	}
	ran := 0
	must := func(line string, args []string, want ...string) string {
		t.Helper()
		out, errOut, err := run(t, args...)
		if err != nil {
			t.Fatalf("%s: %v (%s)", line, err, errOut)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s printed:\n%s\nwant %q in it", line, out, w)
			}
		}
		ran++
		return out
	}
	const more = "Following changes, connecting elsewhere, completing:"
	tour := readmeBlocks(t, "## A five-minute tour", more)
	for _, line := range tour {
		withNats := append(mp(line), "--nats", s.URL())
		switch {
		case line == "go run ./cmd/mesh-provisioner up", line == "go build -o mesh-provisioner ./cmd/mesh-provisioner":
			ran++ // the up tests run up; the test binary is this build
		case strings.HasPrefix(line, "sed "):
			sh := exec.Command("sh", "-c", strings.ReplaceAll(line, "less.yaml", filepath.Join(dir, "less.yaml")))
			sh.Dir = repo
			if out, err := sh.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v (%s)", line, err, out)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "less.yaml")); bytes.Contains(b, []byte("vaultwarden: 4a4a4a")) || !bytes.Contains(b, []byte("ace: [gitea, node-tools]")) {
				t.Fatalf("%s left vaultwarden on ace", line)
			}
			ran++
		case line == "./mesh-provisioner status":
			must(line, withNats, "holds the lease", "mesh: 4 nodes")
		case strings.HasPrefix(line, "./mesh-provisioner get provisions --node ace") && !strings.Contains(line, "-w"):
			must(line, withNats, "ace.gitea.database")
		case strings.HasPrefix(line, "./mesh-provisioner why "):
			must(line, withNats, "g14.grafana.database")
		case strings.HasSuffix(line, "--dry-run"):
			must(line, withNats, "dry run of ", "ace.vaultwarden.database")
		case strings.HasPrefix(line, "./mesh-provisioner apply -f less.yaml"):
			must(line, append(withNats, "--yes"), "applied ")
			bustest.WaitFor(t, 0, "vaultwarden's database ask", func() bool {
				out, _, err := run(t, "asks", "-o", "json", "--nats", s.URL())
				return err == nil && strings.Contains(out, "retire-ace-vaultwarden-database-")
			})
		case line == "./mesh-provisioner asks":
			must(line, withNats, "retire-ace-vaultwarden-database-")
		case strings.HasPrefix(line, "./mesh-provisioner answer "):
			out, _, err := run(t, "asks", "-o", "json", "--nats", s.URL())
			var l struct {
				Asks []askView `json:"asks"`
			}
			if err != nil || json.Unmarshal([]byte(out), &l) != nil {
				t.Fatalf("asks -o json: %v", err)
			}
			id := ""
			for _, a := range l.Asks {
				if strings.HasPrefix(a.Ask.ID, "retire-ace-vaultwarden-database-") {
					id = a.Ask.ID
				}
			}
			args := mp(line)
			args[1] = id
			must(line, append(args, "--nats", s.URL()), "yes")
		default:
			t.Errorf("the README's tour shows %q, which this test does not run", line)
		}
	}
	if ran != len(tour) {
		t.Errorf("ran %d of the tour's %d commands", ran, len(tour))
	}

	for _, line := range readmeBlocks(t, more, "") {
		switch {
		case strings.HasSuffix(line, " -w"):
			ctx, cancel := context.WithCancel(bustest.Context(t))
			root := Root()
			var out syncBuffer
			root.SetOut(&out)
			root.SetErr(&bytes.Buffer{})
			root.SetArgs(append(mp(line), "--nats", s.URL()))
			done := make(chan error, 1)
			go func() { done <- root.ExecuteContext(ctx) }()
			bustest.WaitFor(t, 0, "the watch's table", func() bool { return strings.Contains(out.String(), "ace.gitea.database") })
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", line, err)
			}
		case line == "./mesh-provisioner status -o yaml":
			must(line, append(mp(line), "--nats", s.URL()), "seat:\n  held: true", "nodes:\n")
		case strings.HasPrefix(line, "nats context add lab --server nats://127.0.0.1:4222 --creds "):
			// What "nats context add" writes, pointed at this test's server.
			ctxDir := filepath.Join(dir, "config", "nats", "context")
			if err := os.MkdirAll(ctxDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ctxDir, "lab.json"), []byte(`{"url":"`+s.URL()+`"}`), 0o600); err != nil {
				t.Fatal(err)
			}
		case line == "./mesh-provisioner status --context lab":
			must(line, mp(line), "mesh: 4 nodes")
		case strings.HasPrefix(line, "NATS_URL=nats://127.0.0.1:4222 ./mesh-provisioner asks"):
			t.Setenv("NATS_URL", s.URL())
			must(line, []string{"asks", "--all"}, "retire-ace-vaultwarden-database-")
			t.Setenv("NATS_URL", "")
		case line == "source <(./mesh-provisioner completion bash)":
			must(line, []string{"completion", "bash"}, "__mesh-provisioner_")
		default:
			t.Errorf("the README shows %q, which this test does not run", line)
		}
	}
}
