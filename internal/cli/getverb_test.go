package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/cli"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/internal/registry"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// runCmd runs the command line args in process under ctx and returns its
// output, its error output and its error.
func runCmd(ctx context.Context, args ...string) (string, string, error) {
	root := cli.Root()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func TestClientGetAndRenderCommands(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	seatNC, seat := bustest.Connect(t, s, "seat")
	reg := bus.Follow(ctx, seat, mesh.RegistryBucket, bus.Options{Create: true})
	<-reg.Ready()
	if _, err := registry.Sync(ctx, reg, registry.Compiled()); err != nil {
		t.Fatal(err)
	}
	plans, err := bus.Bucket(ctx, seat, mesh.PlansBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(mesh.Plan{Node: "control", Module: "node-tools", Fingerprint: "0d0d01", Manifest: "sha256:0d",
		Dirs:        []mesh.Dir{{Name: "cache", Unknown: "sweep"}},
		Contributes: []mesh.Contribution{{Collection: "shell:zsh:normal", Item: "export PATH=$PATH:/opt/node-tools/bin"}}})
	plans.Put(ctx, "control.node-tools", b)
	if err := provisioning.Start(ctx, seatNC, seat, provisioning.Options{}); err != nil {
		t.Fatal(err)
	}

	root := filepath.Join(t.TempDir(), "control")
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := runCmd(cctx, "client", "--node", "control", "--root", root, "--nats", s.URL(), "--log-level", "error")
		done <- err
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("client command after cancel = %v; want nil", err)
		}
	}()

	var out string
	bustest.WaitFor(t, 0, "get collect to show node-tools' item", func() bool {
		out, _, err = runCmd(ctx, "get", "collect", "--collection", "shell:zsh:normal", "--nats", s.URL(), "-o", "json")
		return err == nil && strings.Contains(out, "node-tools")
	})
	want := `{
  "control.shell=3Azsh=3Anormal.node-tools": {
    "item": "export PATH=$PATH:/opt/node-tools/bin",
    "module": "node-tools",
    "collection": "shell:zsh:normal"
  }
}
`
	if out != want {
		t.Errorf("get collect --collection shell:zsh:normal -o json =\n%s\nwant\n%s", out, want)
	}

	out, _, err = runCmd(ctx, "get", "collect", "--node", "control", "--nats", s.URL())
	if err != nil || !strings.Contains(out, "NODE") ||
		!strings.Contains(out, "control  shell:zsh:normal  node-tools   export PATH=$PATH:/opt/node-tools/bin") {
		t.Errorf("get collect --node control = %q, %v; want a table row of node-tools' item", out, err)
	}
	out, _, err = runCmd(ctx, "get", "needs", "--node", "control", "--nats", s.URL(), "-o", "json")
	if err != nil || !strings.Contains(out, `"control.node-tools.dir.cache"`) ||
		!strings.Contains(out, `"control.node-tools.contribution.shell=3Azsh=3Anormal"`) {
		t.Errorf("get needs --node control = %q, %v; want the dir and the contribution", out, err)
	}
	out, _, err = runCmd(ctx, "get", "registry", "--nats", s.URL())
	if err != nil || !strings.Contains(out, "secret") || !strings.Contains(out, "verb mesh-vault.secret") {
		t.Errorf("get registry = %q, %v; want the secret kind answered by a verb", out, err)
	}
	out, _, err = runCmd(ctx, "get", "applied", "--node", "control", "-o", "wide", "--nats", s.URL())
	if err != nil || !strings.Contains(out, "cache="+filepath.Join(root, "node-tools", "cache")) {
		t.Errorf("get applied --node control = %q, %v; want node-tools' cache folder", out, err)
	}

	tmpl := filepath.Join(t.TempDir(), "zshrc.in")
	os.WriteFile(tmpl, []byte("# zshrc\n${shell:zsh:normal}\ncache=${dir:cache}\n"), 0o644)
	out, _, err = runCmd(ctx, "render", "--node", "control", "--module", "node-tools", tmpl, "--nats", s.URL())
	if want := "# zshrc\nexport PATH=$PATH:/opt/node-tools/bin\ncache=" + filepath.Join(root, "node-tools", "cache") + "\n"; out != want || err != nil {
		t.Errorf("render = %q, %v; want %q", out, err, want)
	}
	os.WriteFile(tmpl, []byte("${port:http} ${dir:cache}"), 0o644)
	out, errOut, err := runCmd(ctx, "render", "--node", "control", "--module", "node-tools", tmpl, "--nats", s.URL())
	if err == nil || out != "" || errOut != "render: ${port:http}: mesh-provisioner_applied control.node-tools holds no ports named \"http\"\n" {
		t.Errorf("render of an unknown port = %q, %q, %v; want nothing printed and the placeholder said", out, errOut, err)
	}
}
