package meshfile

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A manifest's templates and reload are read from the mesh file; a
// template into no directory of the module, or to a path rather than a
// file name, is refused at its line.
func TestParseTemplatesAndReload(t *testing.T) {
	const file = `nodes: [ace]
modules:
  gitea:
    builds:
      - fp: b7c100
        manifest:
          module: gitea
          dirs: [{name: config}]
          templates:
            - {dir: config, file: app.ini, text: "password=${secret:postgres_database}"}
          reload: [systemctl, reload, gitea]
placement:
  ace: [gitea]
`
	f, err := Parse("ok.yaml", []byte(file))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	m := f.Modules[0].Trunk().Manifest
	want := []mesh.Template{{Dir: "config", File: "app.ini", Text: "password=${secret:postgres_database}"}}
	if !reflect.DeepEqual(m.Templates, want) || !reflect.DeepEqual(m.Reload, []string{"systemctl", "reload", "gitea"}) {
		t.Errorf("templates %+v, reload %q; want %+v and [systemctl reload gitea]", m.Templates, m.Reload, want)
	}
	for _, c := range []struct{ from, to, says string }{
		{"dir: config, file: app.ini", "dir: state, file: app.ini", `templates[0].dir "state" is none of the manifest's dirs`},
		{"dir: config, file: app.ini", "dir: config, file: ../app.ini", `templates[0].file "../app.ini" is not a file name`},
		{`, text: "password=${secret:postgres_database}"`, "", "templates[0] text is missing"},
	} {
		_, err := Parse("bad.yaml", []byte(strings.Replace(file, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "bad.yaml:") {
			t.Errorf("Parse with %q = %v; want %q at its line", c.to, err, c.says)
		}
	}
}
