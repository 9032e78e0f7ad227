// Package meshprovisioner_test holds the rules of the tree that no
// compiler checks: one package doc per package, and which packages may
// import what.
package meshprovisioner_test

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const modulePath = "github.com/mesh-provisioner/mesh-provisioner"

// packages lists the module's packages with their non-test Go files and
// their transitive imports.
func packages(t *testing.T) map[string]struct {
	dir   string
	files []string
	deps  []string
} {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \",\"}}|{{join .Deps \",\"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]struct {
		dir   string
		files []string
		deps  []string
	}{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 4 || f[2] == "" {
			continue
		}
		pkgs[f[0]] = struct {
			dir   string
			files []string
			deps  []string
		}{f[1], strings.Split(f[2], ","), strings.Split(f[3], ",")}
	}
	return pkgs
}

// TestPackageDocs requires exactly one package doc comment per package.
func TestPackageDocs(t *testing.T) {
	pkgs := packages(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; want the whole module", len(pkgs))
	}
	for path, p := range pkgs {
		docs := 0
		for _, name := range p.files {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if f.Doc != nil {
				docs++
			}
		}
		if docs != 1 {
			t.Errorf("package %s has %d package doc comments; want exactly 1", path, docs)
		}
	}
}

// TestImports keeps pure packages free of the bus and the public vocabulary
// free of anything but the standard library.
func TestImports(t *testing.T) {
	rules := []struct {
		pkg    string
		banned func(dep string) bool
		why    string
	}{
		{"mesh", notStd, "mesh is the public vocabulary: standard library only"},
		{"mesh/token", notStd, "token is public: standard library only"},
		{"internal/compose", busOrNATS, "composition is pure: state in, result out"},
		{"internal/retire", busOrNATS, "asks and decisions are pure"},
		{"internal/access", busOrNATS, "who may do what is data: pure"},
		{"internal/why", busOrNATS, "walking a key to its root cause is pure"},
		{"internal/digest", busOrNATS, "summing a node's keys is pure"},
	}
	pkgs := packages(t)
	for _, r := range rules {
		p, ok := pkgs[modulePath+"/"+r.pkg]
		if !ok {
			t.Errorf("package %s not found", r.pkg)
			continue
		}
		for _, d := range p.deps {
			if r.banned(d) {
				t.Errorf("%s imports %s: %s", r.pkg, d, r.why)
			}
		}
	}
	for path, p := range pkgs {
		for _, d := range p.deps {
			if strings.HasSuffix(d, "test") && strings.HasPrefix(d, modulePath) {
				t.Errorf("%s imports the test package %s", path, d)
			}
		}
	}
}

func notStd(dep string) bool {
	first, _, _ := strings.Cut(dep, "/")
	return strings.Contains(first, ".") && !strings.HasPrefix(dep, modulePath+"/mesh")
}

// busOrNATS reports a dependency that talks to the bus: package bus,
// nats.go, nats-server. NATS's JWT and nkeys libraries are pure (a claim
// decoded, a signature verified: no I/O), so a pure package may use them
// (package retire checks an operator's signed warrant with them).
func busOrNATS(dep string) bool {
	if dep == "github.com/nats-io/jwt/v2" || dep == "github.com/nats-io/nkeys" {
		return false
	}
	return strings.HasPrefix(dep, "github.com/nats-io/") || dep == modulePath+"/internal/bus"
}
