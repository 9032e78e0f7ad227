package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/client"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// mustWrite writes a file, making its folders.
func mustWrite(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestClientStaysInsideItsRoot plants symlinks pointing outside the root at
// <root>/<module> and at <root>/<module>/<dir>, and a file where a folder
// should be: the client makes no folder and moves no file outside its root,
// says each in the applied record's problems, and applies the rest.
func TestClientStaysInsideItsRoot(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, seat := bustest.Connect(t, s, "seat")
	plans := plansBucket(t, ctx, seat)
	dirs := []mesh.Dir{{Name: "state", Unknown: mesh.UnknownProgram}, {Name: "tmp", Unknown: mesh.UnknownSweep}}
	for _, m := range []string{"linked", "half", "fine"} {
		putPlan(t, ctx, plans, mesh.Plan{Node: "ace", Module: m, Fingerprint: "f1", Manifest: "sha256:f1", Dirs: dirs})
	}
	top := t.TempDir()
	root := filepath.Join(top, "ace")
	outside := filepath.Join(top, "outside")
	// linked: the module's folder is a symlink to a folder outside, which
	// holds a tmp with a file.
	mustWrite(t, filepath.Join(outside, "linked", "tmp", "precious.txt"), "keep me")
	os.MkdirAll(root, 0o755)
	if err := os.Symlink(filepath.Join(outside, "linked"), filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	// half: its tmp (sweep) is a symlink outside, its state a plain file.
	mustWrite(t, filepath.Join(outside, "half-tmp", "precious.txt"), "keep me")
	mustWrite(t, filepath.Join(root, "half", "state"), "a file, not a folder")
	if err := os.Symlink(filepath.Join(outside, "half-tmp"), filepath.Join(root, "half", "tmp")); err != nil {
		t.Fatal(err)
	}
	// fine: a stray file in its tmp is swept as usual.
	mustWrite(t, filepath.Join(root, "fine", "tmp", "stray.txt"), "stray")

	start(t, s, "ace", root)
	app := reader(t, ctx, s, mesh.AppliedBucket)
	bustest.WaitFor(t, 0, "three applied records", func() bool { return app.Len() == 3 })

	linked, _ := applied(t, app, "ace.linked")
	if len(linked.Dirs) != 0 || len(linked.Problems) != 2 {
		t.Errorf("applied ace.linked = %+v; want no dirs and two problems", linked)
	}
	for _, p := range linked.Problems {
		if !strings.Contains(p, filepath.Join(root, "linked")+" is a symlink (to "+filepath.Join(outside, "linked")+")") {
			t.Errorf("problem of ace.linked = %q; want it to name the symlink and its target", p)
		}
	}
	half, _ := applied(t, app, "ace.half")
	if len(half.Dirs) != 0 || len(half.Problems) != 2 ||
		!strings.Contains(strings.Join(half.Problems, "\n"), filepath.Join(root, "half", "state")+" is not a directory") ||
		!strings.Contains(strings.Join(half.Problems, "\n"), filepath.Join(root, "half", "tmp")+" is a symlink") {
		t.Errorf("applied ace.half = %+v; want no dirs, and state not a directory and tmp a symlink said", half)
	}
	fine, _ := applied(t, app, "ace.fine")
	if len(fine.Problems) != 0 || fine.Dirs["state"] != filepath.Join(root, "fine", "state") ||
		len(fine.Swept) != 1 || fine.Swept[0] != filepath.Join(root+".quarantine", "fine", "tmp", "stray.txt") {
		t.Errorf("applied ace.fine = %+v; want both dirs, stray.txt swept, no problems", fine)
	}

	// Nothing outside the root was made or moved.
	for _, p := range []string{filepath.Join(outside, "linked", "tmp", "precious.txt"), filepath.Join(outside, "half-tmp", "precious.txt")} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "keep me" {
			t.Errorf("%s outside the root = %q, %v; want it untouched", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(outside, "linked", "state")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the client made %s outside its root (Lstat: %v)", filepath.Join(outside, "linked", "state"), err)
	}
	for _, m := range []string{"linked", "half"} {
		if _, err := os.Lstat(filepath.Join(root+".quarantine", m)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the quarantine holds %s (Lstat: %v); want nothing of it", m, err)
		}
	}
}

// TestWriteRefusesASymlinkedFolder: Client.Write never writes through a
// symlink under the root.
func TestWriteRefusesASymlinkedFolder(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "ace")
	outside := filepath.Join(top, "outside")
	os.MkdirAll(filepath.Join(root, "gitea"), 0o755)
	os.MkdirAll(outside, 0o755)
	if err := os.Symlink(outside, filepath.Join(root, "gitea", "state")); err != nil {
		t.Fatal(err)
	}
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "client-ace")
	c, err := client.New(client.Config{Node: "ace", Root: root, JS: js})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Write("gitea", "state", "app.ini", []byte("x"))
	if !errors.Is(err, client.ErrNotAFolder) {
		t.Fatalf("Write through a symlinked folder = %v; want ErrNotAFolder", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "app.ini")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Write made app.ini outside the root (Lstat: %v)", err)
	}
	if err := c.Write("gitea", "tmp", "sub/app.ini", []byte("x")); err != nil {
		t.Errorf("Write into a real folder: %v", err)
	}
}

// TestRootAndQuarantineAreNoSymlinks plants relative symlinks in the
// root's parent, where another local user may write: at ace's quarantine
// folder and at bee's root, each to a folder beside them (a relative link
// that stays in the parent is one os.Root would follow). Neither client
// sweeps, makes or writes anything there: each says the link in its
// applied record's problems, and the folders the links point to stay empty.
func TestRootAndQuarantineAreNoSymlinks(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, seat := bustest.Connect(t, s, "seat")
	plans := plansBucket(t, ctx, seat)
	dirs := []mesh.Dir{{Name: "state", Unknown: mesh.UnknownProgram}, {Name: "tmp", Unknown: mesh.UnknownSweep}}
	for _, n := range []string{"ace", "bee"} {
		putPlan(t, ctx, plans, mesh.Plan{Node: n, Module: "wiki", Fingerprint: "f1", Manifest: "sha256:f1", Dirs: dirs})
	}
	top := t.TempDir()
	for _, d := range []string{"evil-q", "evil-root"} {
		if err := os.Mkdir(filepath.Join(top, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	ace, bee := filepath.Join(top, "ace"), filepath.Join(top, "bee")
	mustWrite(t, filepath.Join(ace, "wiki", "tmp", "stray.txt"), "stray")
	if err := os.Symlink("evil-q", ace+".quarantine"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("evil-root", bee); err != nil {
		t.Fatal(err)
	}
	start(t, s, "ace", ace)
	start(t, s, "bee", bee)
	app := reader(t, ctx, s, mesh.AppliedBucket)
	bustest.WaitFor(t, 0, "the applied records of ace and bee", func() bool { return app.Len() == 2 })
	for key, want := range map[string]string{
		"ace.wiki": ace + ".quarantine is a symlink (to evil-q)",
		"bee.wiki": bee + " is a symlink (to evil-root)",
	} {
		a, _ := applied(t, app, key)
		if len(a.Dirs) != 0 || len(a.Swept) != 0 || !strings.Contains(strings.Join(a.Problems, "\n"), want) {
			t.Errorf("applied %s = %+v; want no dirs, nothing swept, and the problem %q", key, a, want)
		}
	}
	for _, d := range []string{"evil-q", "evil-root"} {
		if names, _ := os.ReadDir(filepath.Join(top, d)); len(names) != 0 {
			t.Errorf("%s, where a planted link points, holds %v; want nothing", d, names)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ace, "wiki", "tmp", "stray.txt")); err != nil || string(b) != "stray" {
		t.Errorf("ace's stray file = %q, %v; want it left in place", b, err)
	}
}
