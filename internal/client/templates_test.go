package client_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/internal/registry"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A module's templates are rendered into its folder (mode 0600); its
// reload runs only on a client allowed to run reloads, and a client that
// is not says so in the applied record. A template's placeholder that
// does not resolve is said there too, and its file is not written.
func TestTemplatesAreRenderedAndReloadedWhenAllowed(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	plans := plansBucket(t, ctx, js)
	plan := mesh.Plan{Node: "ace", Module: "wiki", Fingerprint: "f1", Dirs: []mesh.Dir{{Name: "config", Unknown: mesh.UnknownProgram}},
		Templates: []mesh.Template{
			{Dir: "config", File: "wiki.conf", Text: "listen=8080\n"},
			{Dir: "config", File: "broken.conf", Text: "x=${nosuch:thing}\n"},
		},
		Reload: []string{"sh", "-c", "echo reloaded >> reloads.log"}}
	rec := reader(t, ctx, s, mesh.AppliedBucket)

	for _, c := range []struct {
		name   string
		reload bool
		broken bool // the plan holds a template that does not render
		says   string
		runs   int
	}{
		{"a template not rendered", true, true, "", 0},
		{"no reloads", false, false, `the reload "sh -c echo reloaded >> reloads.log" was not run: this client runs no reload commands`, 0},
		{"reloads", true, false, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := plan
			if !c.broken {
				p.Templates = p.Templates[:1]
			}
			putPlan(t, ctx, plans, p)
			root := t.TempDir()
			r := start(t, s, "ace", root, func(cfg *client.Config) { cfg.Reload = c.reload })
			defer r.stop()
			file := filepath.Join(root, "wiki", "config", "wiki.conf")
			bustest.WaitFor(t, 0, "wiki.conf rendered and the record written", func() bool {
				b, _ := os.ReadFile(file)
				a, ok := rec.Get("ace.wiki")
				return string(b) == "listen=8080\n" && ok && strings.Contains(string(a.Value), "broken.conf") == c.broken &&
					strings.Contains(string(a.Value), root)
			})
			if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
				t.Errorf("wiki.conf mode = %v; want 0600", fi.Mode().Perm())
			}
			if _, err := os.Stat(filepath.Join(root, "wiki", "config", "broken.conf")); err == nil {
				t.Error("broken.conf was written; want no file for a template not rendered")
			}
			a, _ := applied(t, rec, "ace.wiki")
			problems := strings.Join(a.Problems, "\n")
			if strings.Contains(problems, "template config/broken.conf not rendered") != c.broken || !strings.Contains(problems, c.says) || a.Reloaded != (c.runs > 0) {
				t.Errorf("applied = %+v; want broken.conf said %v, %q, reloaded %v", a, c.broken, c.says, c.runs > 0)
			}
			log, _ := os.ReadFile(filepath.Join(root, "wiki", "reloads.log"))
			if n := strings.Count(string(log), "reloaded"); n != c.runs {
				t.Errorf("the reload ran %d times; want %d", n, c.runs)
			}
		})
	}
}

// logLines is a slog handler that keeps each record's level and message.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	if r.Level >= slog.LevelWarn {
		r.Attrs(func(a slog.Attr) bool { l.lines[len(l.lines)-1] += " " + a.String(); return true })
	}
	return nil
}

func (l *logLines) count(line string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if s == line {
			n++
		}
	}
	return n
}

func (l *logLines) warns() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var w []string
	for _, s := range l.lines {
		if strings.HasPrefix(s, "WARN") || strings.HasPrefix(s, "ERROR") {
			w = append(w, s)
		}
	}
	return w
}

// A template that waits for a provider's entry is the normal order of a
// start: the plan applied in part is said once at INFO (no WARN), and
// said again at INFO once the entry came and the file is rendered. The
// module's own ${port:..} resolves on its first apply, from the record
// being written.
func TestTemplateWaitingForAnEntryIsNoWarning(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	reg := bus.Follow(ctx, js, mesh.RegistryBucket, bus.Options{Create: true})
	<-reg.Ready()
	if _, err := registry.Sync(ctx, reg, registry.Compiled()); err != nil {
		t.Fatal(err)
	}
	plans := plansBucket(t, ctx, js)
	putPlan(t, ctx, plans, mesh.Plan{Node: "ace", Module: "wiki", Fingerprint: "f1",
		Dirs: []mesh.Dir{{Name: "config", Unknown: mesh.UnknownProgram}}, Ports: []mesh.Port{{Name: "http"}},
		Provisions: []mesh.PlanProvision{{Provision: "database", Provider: "control", ProviderModule: "postgres"}},
		Templates:  []mesh.Template{{Dir: "config", File: "wiki.conf", Text: "port=${port:http}\nrole=${bound:database/role}\n"}}})
	// The buckets the seat makes before any client runs.
	provisions, err := bus.Bucket(ctx, js, mesh.ProvisionsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Bucket(ctx, js, mesh.BoundBucket(mesh.VaultModule), 0); err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	root := t.TempDir()
	start(t, s, "ace", root, func(cfg *client.Config) { cfg.Log = slog.New(logs) })
	rec := reader(t, ctx, s, mesh.AppliedBucket)

	waiting := "INFO client: plan applied in part; it waits for other parties' writes"
	bustest.WaitFor(t, 0, "ace.wiki applied in part, waiting for postgres's entry", func() bool {
		a, ok := rec.Get("ace.wiki")
		return ok && strings.Contains(string(a.Value), "postgres_bound holds no key ace.wiki.database")
	})
	a, _ := applied(t, rec, "ace.wiki")
	if n := len(a.Problems); n != 1 || strings.Contains(a.Problems[0], "${port:http}") {
		t.Errorf("problems of ace.wiki = %q; want one, the template waiting for ${bound:database/role} only (its own port resolves)", a.Problems)
	}
	entries, err := bus.Bucket(ctx, js, mesh.BoundBucket("postgres"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := entries.Put(ctx, "ace.wiki.database", []byte(`{"state":"provided","vault-name":"v1","connection":{"role":"mesh_ace_wiki"}}`)); err != nil {
		t.Fatal(err)
	}
	// The seat judges the entry and writes the provision: the client
	// renders again on its node's provisions.
	key := mesh.ProvisionKey{Node: "ace", Consumer: "wiki", Provision: "database"}.String()
	b, _ := json.Marshal(mesh.Provision{State: mesh.Provided})
	if _, err := provisions.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "wiki", "config", "wiki.conf")
	bustest.WaitFor(t, 0, "wiki.conf rendered once postgres's entry is provided", func() bool {
		b, _ := os.ReadFile(file)
		return strings.HasSuffix(string(b), "\nrole=mesh_ace_wiki\n")
	})
	bustest.WaitFor(t, 0, "the plan said applied whole", func() bool { return logs.count("INFO client: plan applied whole") == 1 })
	a, _ = applied(t, rec, "ace.wiki")
	if b, _ := os.ReadFile(file); string(b) != "port="+strconv.Itoa(a.Ports["http"])+"\nrole=mesh_ace_wiki\n" || a.Ports["http"] == 0 {
		t.Errorf("wiki.conf = %q; want the port of the record (%d) and the role", b, a.Ports["http"])
	}
	if n := logs.count(waiting); n != 1 {
		t.Errorf("%q said %d times; want once", waiting, n)
	}
	if w := logs.warns(); len(w) > 0 {
		t.Errorf("warnings and errors %q; want none (waiting for a provider's entry is no fault)", w)
	}
}

// The client's record of the files it wrote is written through its root:
// a symlink planted at the record's temporary name, aimed at a file
// outside the root, is replaced by the client's own file, and the file
// outside keeps what it held.
func TestWrittenRecordFollowsNoSymlink(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "writer")
	plans := plansBucket(t, ctx, js)
	root := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim.txt")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(root, ".mesh-client-written.json.new")); err != nil {
		t.Fatal(err)
	}
	putPlan(t, ctx, plans, mesh.Plan{Node: "ace", Module: "wiki", Fingerprint: "f1", Dirs: []mesh.Dir{{Name: "config", Unknown: mesh.UnknownProgram}},
		Templates: []mesh.Template{{Dir: "config", File: "wiki.conf", Text: "listen=8080\n"}}})
	start(t, s, "ace", root)
	record := filepath.Join(root, ".mesh-client-written.json")
	bustest.WaitFor(t, 0, "the record of written files to name wiki.conf", func() bool {
		b, _ := os.ReadFile(record)
		return strings.Contains(string(b), "wiki/config/wiki.conf")
	})
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the file outside the root holds %q; want what it held", b)
	}
	if fi, err := os.Lstat(record); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the record is %v (%v); want a regular file", fi.Mode(), err)
	}
}
