package client_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
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
