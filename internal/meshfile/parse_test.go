package meshfile

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

const homelab = "../../examples/homelab.yaml"

// TestParseBroken parses one file holding many distinct problems and
// checks that each is said once, on its line, and nothing else.
func TestParseBroken(t *testing.T) {
	want := []Error{
		{2, `node "Bad_Node" is not a valid name`},
		{2, `node "ace" listed twice`},
		{3, `unknown key "colour"`},
		{10, `provides[0] credential "personal" is not one of own, shared, none`},
		{12, `manifest: ports is text; want a list`},
		{13, `dirs[0] unknown "delete" is not one of program, sweep`},
		{14, `module postgres: build "3f2a91" listed twice (first at line 7)`},
		{20, `module is "gitee"; want "gitea"`},
		{22, `requires[0] local "Main" is not a valid name`},
		{23, `requires[1]: unknown field "form"`},
		{23, `requires[1] from is missing`},
		{24, `requires[2] is text; want a mapping`},
		{25, `secrets[1]: "key" listed twice`},
		{26, `manifest: unknown field "colour"`},
		{27, `reads[0] "plans" is not a read <module>.<state>`},
		{28, `manifest: config is a mapping; want a list`},
		{29, `manifest: duplicate key "module" (first at line 20)`},
		{31, `module redis has no builds`},
		{32, `module "Wiki" is not a valid name`},
		{35, `module is "wiki"; want "Wiki"`},
		{37, `module grafana: unknown field "version"`},
		{39, `module grafana: build has no fp`},
		{40, `module grafana build 6f6f00 has no manifest`},
		{42, `module "postgres" placed twice on control (first at line 42)`},
		{43, `placement of ace: module "prometheus" is not in modules`},
		{44, `placement: node "g14" is not in nodes`},
		{45, `placement: duplicate key "control" (first at line 42)`},
		{47, `gitea wants build "ffffff", which gitea does not list (builds: b7c100)`},
		{48, `wants of control: module "gitea" is not placed on control`},
		{49, `wants: node "shanks" is not in nodes`},
		{52, `postgres: unknown field "colour"`},
		{52, `postgres: phase "sleeping" is not one of running, starting, stopped, failed`},
		{53, `haves of control: module "gitea" is not placed on control`},
		{55, `haves of ace: gitea: health is missing`},
	}
	f, err := ParseFile("testdata/broken.yaml")
	if f != nil {
		t.Fatalf("ParseFile(broken.yaml) returned a file; want none")
	}
	errs, ok := errors.AsType[*Errors](err)
	if !ok {
		t.Fatalf("ParseFile(broken.yaml) error = %v; want *Errors", err)
	}
	if errs.File != "testdata/broken.yaml" {
		t.Errorf("Errors.File = %q; want testdata/broken.yaml", errs.File)
	}
	got := errs.List
	for i, w := range want {
		if i >= len(got) {
			t.Errorf("missing error %d: line %d: %s", i, w.Line, w.Msg)
			continue
		}
		if got[i].Line != w.Line || !strings.Contains(got[i].Msg, w.Msg) {
			t.Errorf("error %d = line %d: %s; want line %d: ...%s...", i, got[i].Line, got[i].Msg, w.Line, w.Msg)
		}
	}
	for _, extra := range got[min(len(want), len(got)):] {
		t.Errorf("unexpected error: line %d: %s", extra.Line, extra.Msg)
	}
	// Error() prints one line per problem, FILE:LINE: message.
	lines := strings.Split(errs.Error(), "\n")
	if len(lines) != len(got) {
		t.Fatalf("Error() has %d lines; want %d", len(lines), len(got))
	}
	if want := "testdata/broken.yaml:12: module postgres build 3f2a91: manifest: ports is text; want a list"; lines[4] != want {
		t.Errorf("Error() line 5 = %q; want %q", lines[4], want)
	}
}

// TestParseErrors checks single problems, one per case.
func TestParseErrors(t *testing.T) {
	const ok = `nodes: [control]
modules:
  redis:
    builds:
      - fp: 71be02
        manifest: {module: redis, provides: [{name: cache, credential: shared}]}
placement:
  control: [redis]
`
	for _, tc := range []struct {
		name, text string
		line       int
		gist       string
	}{
		{"empty", "", 0, "the file is empty"},
		{"only a comment", "# nothing\n", 0, "the file is empty"},
		{"not yaml", "nodes: [control\nmodules: {}\n", 2, "not YAML: did not find expected ',' or ']'"},
		{"unclosed [ on line 2", "modules: {}\nnodes: [control\nplacement: {}\n", 2, "not YAML: did not find expected ',' or ']'"},
		{"unclosed [ on line 3", "modules: {}\n# nodes\nnodes: [control,\n  ace\n\nplacement: {}\n", 3, "not YAML: did not find expected ',' or ']'"},
		{"unclosed [ on one line", "nodes: [control, ace", 1, "not YAML: did not find expected ',' or ']'"},
		{"unclosed { on line 2", "nodes: [a]\nplacement: {a: [b]\nmodules: {}\n", 2, "not YAML: did not find expected ',' or '}'"},
		{"a ] too many on line 3", "nodes: [a]\nmodules: {}\nplacement: {a: [b]]}\n", 3, "not YAML: did not find expected ',' or '}'"},
		{"a ] too many at a line's end", "nodes: [a]\nmodules: {}\nplacement: [b]]\n", 3, "not YAML: did not find expected key"},
		{"bad indentation", "nodes: [a]\n  modules: x\n", 2, "not YAML: did not find expected key"},
		{"bad indentation on line 4", "nodes: [a]\nplacement:\n  - a\n b: 2\n", 4, "not YAML: did not find expected key"},
		{"a key indented too far", "nodes: [a]\nmodules: {}\n placement: {}\n", 3, "not YAML: did not find expected key"},
		{"a value after a key's value", "nodes: [a]\nmodules: {}\nplacement: x\n  y: z\n", 4, "not YAML: mapping values are not allowed in this context"},
		{"tab indentation", "nodes: [a]\nplacement:\n\ta: [b]\n", 3, "not YAML: found character that cannot start any token"},
		{"unclosed quote on line 2", "nodes: [a]\nmodules: \"x\nplacement: {}\n", 2, "not YAML: found unexpected end of stream"},
		{"two documents", ok + "---\nnodes: [x]\n", 9, "a second YAML document"},
		{"a list", "- control\n", 1, "the file is a list"},
		{"no nodes", "modules: {}\n", 1, "no nodes"},
		{"nodes empty", "nodes: []\n", 1, "nodes lists no node"},
		{"nodes not a list", "nodes: control\n", 1, "nodes is text; want a list"},
		{"node is a mapping", "nodes: [{a: b}]\n", 1, "node is a mapping; want text"},
		{"node is a boolean", "nodes: [true]\n", 1, "node is a boolean; want text"},
		{"merge key", "nodes: [a]\nbase: &b {x: 1}\nplacement:\n  <<: *b\n", 4, "merge keys (<<) are not supported"},
		{"module named as the operator", strings.ReplaceAll(ok, "redis", "operator"), 3, `module "operator" may not have that name: it is the operator's bus user`},
		{"module named as the seat", strings.ReplaceAll(ok, "redis", "mesh-provisioner"), 3, `module "mesh-provisioner" may not have that name: it is the seat's bus user`},
		{"module named as the router", strings.ReplaceAll(ok, "redis", "mesh-asks"), 3, `module "mesh-asks" may not have that name: it is the ask router's bus user`},
		{"module named as a client", strings.ReplaceAll(ok, "redis", "client-db"), 3, `module "client-db" may not have that name: names beginning "client-" are the nodes' clients' bus users`},
		{"manifest missing module", strings.Replace(ok, "{module: redis, ", "{", 1), 6, `module is missing; want "redis"`},
		{"manifest null", strings.Replace(ok, "manifest: {module: redis, provides: [{name: cache, credential: shared}]}", "manifest:", 1), 5, "has no manifest"},
		{"bad fp", strings.Replace(ok, "fp: 71be02", "fp: 71BE02", 1), 5, `fp "71BE02" is not a valid name`},
		{"fp is a list", strings.Replace(ok, "fp: 71be02", "fp: [a]", 1), 5, `fp is a list; want text`},
		{"answered-by", strings.Replace(ok, "credential: shared", "answered-by: human", 1), 6, `answered-by "human" is not one of helper`},
		{"offer without name", strings.Replace(ok, "name: cache, ", "", 1), 6, `provides[0] name is missing`},
		{"offer listed twice", strings.Replace(ok, "[{name: cache, credential: shared}]", "[{name: cache}, {name: cache}]", 1), 6, `provides[1]: "cache" listed twice`},
		{"requirement twice", strings.Replace(ok, "provides: [{name: cache, credential: shared}]", "requires: [{provision: db, from: redis}, {provision: db, from: redis}]", 1), 6, `requires[1]: db listed twice`},
		{"bad provision name", strings.Replace(ok, "provides: [{name: cache, credential: shared}]", "requires: [{provision: my_db, from: redis}]", 1), 6, `requires[0] provision "my_db" is not a valid name`},
		{"state item a list", strings.Replace(ok, "credential: shared}]", "credential: shared}], state: [[bound]]", 1), 6, `state[0] is a list; want a name or {name: ..}`},
		{"state mapping without name", strings.Replace(ok, "credential: shared}]", "credential: shared}], state: [{kind: bound}]", 1), 6, `state[0]: unknown field "kind"`},
		{"contribution without collection", strings.Replace(ok, "credential: shared}]", "credential: shared}], contributes: [{item: x}]", 1), 6, `contributes[0] collection is missing`},
		{"empty config name", strings.Replace(ok, "credential: shared}]", `credential: shared}], config: [""]`, 1), 6, `config[0] is empty`},
		{"port name a number is fine but a float is not a name", strings.Replace(ok, "credential: shared}]", "credential: shared}], ports: [{name: 1.5}]", 1), 6, `ports[0] name "1.5" is not a valid name`},
		{"placement not a list", ok + "  control: redis\n", 9, `placement: duplicate key "control"`},
		{"placement of a node is a mapping", strings.Replace(ok, "control: [redis]", "control: {redis: 1}", 1), 8, `placement of control is a mapping; want a list`},
		{"want fp a number that is no build", ok + "wants:\n  control: {redis: 123}\n", 10, `redis wants build "123", which redis does not list`},
		{"want of an unknown module", ok + "wants:\n  control: {gitea: b7c100}\n", 10, `wants of control: module "gitea" is not in modules`},
		{"have of an unknown node", ok + "haves:\n  ace: {redis: {phase: running, health: ok}}\n", 10, `haves: node "ace" is not in nodes`},
		{"have is text", ok + "haves:\n  control: {redis: running}\n", 10, `haves of control: redis is text; want a mapping`},
		{"module is a list", "nodes: [a]\nmodules:\n  redis: [a]\n", 3, `module redis is a list; want a mapping with builds`},
		{"module without builds key", "nodes: [a]\nmodules:\n  redis: {}\n", 3, `module redis has no builds`},
		{"mesh name not a name", "mesh: Home_Lab\n" + ok, 1, `mesh name "Home_Lab" is not a valid name`},
		{"mesh name a list", ok + "mesh: [a]\n", 9, `mesh name is a list; want text`},
		{"mesh name empty", ok + "mesh:\n", 9, `mesh name is empty`},
		{"mesh name twice", "mesh: a\n" + ok + "mesh: b\n", 10, `duplicate key "mesh"`},
		{"mesh name too long", "mesh: " + strings.Repeat("m", MaxName+1) + "\n" + ok, 1, `longer than a name may be`},
		{"unknown top-level key", "meshes: a\n" + ok, 1, `unknown key "meshes" (known: mesh, nodes, modules, placement, wants, haves)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("m.yaml", []byte(tc.text))
			errs, ok := errors.AsType[*Errors](err)
			if !ok {
				t.Fatalf("Parse = %v; want *Errors", err)
			}
			for _, e := range errs.List {
				if e.Line == tc.line && strings.Contains(e.Msg, tc.gist) {
					return
				}
			}
			t.Errorf("Parse errors =\n%v\nwant one at line %d with %q", errs, tc.line, tc.gist)
		})
	}
	if f, err := Parse("ok.yaml", []byte(ok)); err != nil || f.Mesh != "" {
		t.Fatalf("Parse(ok) = %v, %v; want no mesh name, no error", f, err)
	}
	if f, err := Parse("named.yaml", []byte("mesh: home-lab\n"+ok)); err != nil || f.Mesh != "home-lab" {
		t.Fatalf("Parse(named) = %v, %v; want mesh home-lab", f, err)
	}
}

// TestParseWarnings checks what is said but does not refuse the file: a
// provider that is a module of the file placed on no node yet, an on node
// where the provider is not placed yet, a have of a build the file does not
// list, and what an older build no want names requires.
func TestParseWarnings(t *testing.T) {
	text := `nodes: [control, g14]
modules:
  gitea:
    builds:
      - fp: a0a0a0
        manifest: {module: gitea, requires: [{provision: route, from: proxy}]}
      - fp: b7c100
        manifest:
          module: gitea
          requires: [{provision: database, from: postgres}, {provision: route, from: gitea, on: g14}]
          provides: [{name: route}]
  postgres:
    builds: [{fp: f1, manifest: {module: postgres, provides: [{name: database}]}}]
placement:
  control: [gitea]
haves:
  control: {gitea: {phase: running, health: ok, fp: c0ffee}}
`
	f, err := Parse("w.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse = %v; want no error", err)
	}
	want := []Error{
		{6, `gitea requires route from "proxy", which is no module of this file`},
		{10, `gitea requires database from postgres, which is placed on no node yet: the seat holds gitea until postgres is placed`},
		{10, `gitea requires route from gitea on g14, where gitea is not placed yet`},
		{17, `haves of control: gitea runs build "c0ffee", which gitea does not list (builds: a0a0a0, b7c100)`},
	}
	if len(f.Warnings) != len(want) {
		t.Fatalf("Warnings = %v; want %d", f.Warnings, len(want))
	}
	for i, w := range want {
		if f.Warnings[i].Line != w.Line || !strings.HasPrefix(f.Warnings[i].Msg, w.Msg) {
			t.Errorf("Warnings[%d] = %v; want line %d: %s...", i, f.Warnings[i], w.Line, w.Msg)
		}
	}
	if got := f.Haves["control"]["gitea"]; got != (mesh.Have{Phase: "running", Health: "ok", Fingerprint: "c0ffee"}) {
		t.Errorf("have of gitea on control = %+v", got)
	}
}

// TestParseWarnsOnlyForPlacedConsumers checks that a requirement whose
// provider is placed nowhere (or not on its on node) is said only for a
// consumer placed on some node: with nothing placed no warning is said
// (woodpecker, placed nowhere, is held nowhere), and once woodpecker is
// placed on shanks, the two are.
func TestParseWarnsOnlyForPlacedConsumers(t *testing.T) {
	text := `nodes: [shanks, ace]
modules:
  gitea:
    builds: [{fp: a1, manifest: {module: gitea, provides: [{name: forge-account}]}}]
  woodpecker:
    builds:
      - fp: b2
        manifest:
          module: woodpecker
          requires: [{provision: forge-account, from: gitea}, {provision: forge-account, from: gitea, on: ace, local: ace}]
placement:
  shanks: [%s]
`
	f, err := Parse("w.yaml", []byte(strings.Replace(text, "%s", "", 1)))
	if err != nil {
		t.Fatalf("Parse = %v; want no error", err)
	}
	if len(f.Warnings) != 0 {
		t.Errorf("Warnings with nothing placed = %v; want none (woodpecker is placed nowhere)", f.Warnings)
	}
	f, err = Parse("w.yaml", []byte(strings.Replace(text, "%s", "woodpecker", 1)))
	if err != nil {
		t.Fatalf("Parse = %v; want no error", err)
	}
	want := []Error{
		{10, `woodpecker requires forge-account from gitea, which is placed on no node yet: the seat holds woodpecker until gitea is placed`},
		{10, `woodpecker requires forge-account (local ace) from gitea, which is placed on no node yet: the seat holds woodpecker until gitea is placed`},
	}
	if len(f.Warnings) != len(want) {
		t.Fatalf("Warnings with woodpecker on shanks = %v; want %v", f.Warnings, want)
	}
	for i, w := range want {
		if f.Warnings[i] != w {
			t.Errorf("Warnings[%d] = %v; want %v", i, f.Warnings[i], w)
		}
	}
}

// TestParseRefusesWhatNoProviderMeets checks that a requirement of a build
// the seat composes that no provider of the file can meet refuses the
// file at its line (these passed with a warning or with nothing, and only
// showed as a hold once applied): a from naming no module, a provision the
// provider does not offer (saying what it offers) and an on naming no
// node. A wanted older build is checked as the newest is. A credential
// provision with no node placing mesh-vault is a warning (a later file
// places it, and the running mesh follows).
func TestParseRefusesWhatNoProviderMeets(t *testing.T) {
	text := `nodes: [control, ace]
modules:
  gitea:
    builds:
      - fp: a0a0a0
        manifest: {module: gitea, requires: [{provision: cache, from: postgres}]}
      - fp: b7c100
        manifest:
          module: gitea
          requires:
            - {provision: databse, from: postgres}
            - {provision: database, from: postgress, local: a}
            - {provision: database, from: postgres, on: g14, local: b}
            - {provision: database, from: postgres, local: main}
  postgres:
    builds:
      - fp: f1
        manifest: {module: postgres, provides: [{name: database, credential: own}, {name: admin}]}
  mesh-vault:
    builds: [{fp: v1, manifest: {module: mesh-vault, provides: [{name: credential, answered-by: helper}]}}]
placement:
  control: [postgres]
  ace: [gitea]
wants:
  ace: {gitea: a0a0a0}
`
	want := []Error{
		{6, `gitea requires cache from postgres, which does not offer cache (postgres offers database, admin, at its newest build f1)`},
		{11, `gitea requires databse from postgres, which does not offer databse (postgres offers database, admin, at its newest build f1)`},
		{12, `gitea requires database (local a) from "postgress", which is no module of this file`},
		{13, `gitea requires database (local b) from postgres on node "g14", which is no node of this file`},
	}
	_, err := Parse("r.yaml", []byte(text))
	errs, ok := errors.AsType[*Errors](err)
	if !ok {
		t.Fatalf("Parse = %v; want *Errors", err)
	}
	if len(errs.List) != len(want) {
		t.Fatalf("Parse errors =\n%v\nwant %d", errs, len(want))
	}
	for i, w := range want {
		if errs.List[i].Line != w.Line || !strings.HasPrefix(errs.List[i].Msg, w.Msg) {
			t.Errorf("error %d = %v; want line %d: %s...", i, errs.List[i], w.Line, w.Msg)
		}
	}
	// With the names put right but no mesh-vault placed, the credential
	// provisions are warnings at their lines.
	named := strings.NewReplacer("databse", "database", "postgress", "postgres", "on: g14", "on: control",
		"provision: cache", "provision: admin").Replace(text)
	f, err := Parse("named.yaml", []byte(named))
	if err != nil {
		t.Fatalf("Parse(named) = %v; want no error", err)
	}
	vaultWarn := "whose offer has a credential (credential: own), and no node places mesh-vault, which provides every credential: it stays asked until a node places mesh-vault"
	var lines []int
	for _, w := range f.Warnings {
		if strings.Contains(w.Msg, vaultWarn) {
			lines = append(lines, w.Line)
		}
	}
	if !slices.Equal(lines, []int{11, 12, 13, 14}) {
		t.Errorf("Parse(named) warnings %v; want the credential warning at lines 11-14", f.Warnings)
	}
	// With mesh-vault placed, and the names put right, the file is valid.
	fixed := strings.NewReplacer("databse", "database", "postgress", "postgres", "on: g14", "on: control",
		"control: [postgres]", "control: [postgres, mesh-vault]", "provision: cache", "provision: admin").Replace(text)
	if f, err := Parse("fixed.yaml", []byte(fixed)); err != nil || len(f.Warnings) != 0 {
		t.Fatalf("Parse(fixed) = %v (warnings %v); want no error or warning", err, f.Warnings)
	}
}

// TestParseHomelab checks the bundled example: no problem, and the keys
// it writes per bucket.
func TestParseHomelab(t *testing.T) {
	f, err := ParseFile(homelab)
	if err != nil {
		t.Fatalf("ParseFile(homelab) = %v", err)
	}
	if len(f.Warnings) != 0 {
		t.Errorf("Warnings = %v; want none", f.Warnings)
	}
	keys := f.Keys()
	for bucket, n := range map[string]int{
		mesh.PlacementBucket: 4,
		mesh.WantsBucket:     17,
		mesh.ModulesBucket:   15,
		mesh.ManifestsBucket: 16, // gitea's two builds have two manifests
		mesh.HaveBucket:      8,
	} {
		if len(keys[bucket]) != n {
			t.Errorf("Keys()[%s] has %d keys; want %d", bucket, len(keys[bucket]), n)
		}
	}
	if got := len(f.Builds()); got != 16 {
		t.Errorf("Builds() = %d; want 16", got)
	}
	if got, want := string(keys[mesh.PlacementBucket]["ace"]), `{"modules":[{"module":"gitea"},{"module":"vaultwarden"},{"module":"node-tools"}]}`; got != want {
		t.Errorf("placement ace = %s; want %s", got, want)
	}
	if got, want := string(keys[mesh.WantsBucket]["want.ace.gitea"]), `{"fp":"b7c100","removed":false}`; got != want {
		t.Errorf("want.ace.gitea = %s; want %s", got, want)
	}
	if got, want := string(keys[mesh.HaveBucket]["ace.gitea"]), `{"phase":"starting","health":"unknown","fp":"b7c100","written-by":"mesh-file"}`; got != want {
		t.Errorf("have ace.gitea = %s; want %s", got, want)
	}
	if _, ok := keys[mesh.WantsBucket]["want.shanks.home-assistant"]; ok {
		t.Errorf("want.shanks.home-assistant is written; home-assistant has no want")
	}
	gitea := f.Module("gitea")
	if gitea == nil || len(gitea.Builds) != 2 || gitea.Trunk().Fingerprint != "b7c2f0" {
		t.Fatalf("module gitea = %+v; want two builds, trunk b7c2f0", gitea)
	}
	if got, want := string(keys[mesh.ModulesBucket]["gitea"]), `{"manifest":"`+gitea.Trunk().Digest+`"}`; got != want {
		t.Errorf("modules gitea = %s; want %s", got, want)
	}
	rec := keys[mesh.ManifestsBucket][mesh.ManifestKey(gitea.Trunk().Digest)]
	if rec == nil {
		t.Fatalf("no manifest at %s", mesh.ManifestKey(gitea.Trunk().Digest))
	}
	if mesh.Digest(gitea.Trunk().JSON) != gitea.Trunk().Digest {
		t.Errorf("digest of gitea's trunk is not the digest of its JSON")
	}
	m, err := mesh.ParseManifest(gitea.Trunk().JSON)
	if err != nil {
		t.Fatalf("ParseManifest(gitea trunk) = %v", err)
	}
	if len(m.Requires) != 4 || m.Requires[3] != (mesh.Requirement{Provision: "cache", From: "redis"}) {
		t.Errorf("gitea trunk requires = %+v; want the cache last", m.Requires)
	}
	vault := f.Module("mesh-vault").Trunk().Manifest
	if !slices.Equal(vault.State, []mesh.StateName{"bound", "store"}) || !vault.ReadsPlans() {
		t.Errorf("mesh-vault manifest = %+v", vault)
	}
	if !f.Placed("shanks", "home-assistant") || f.Placed("ace", "postgres") {
		t.Errorf("Placed is wrong")
	}
	if !slices.Equal(f.Nodes, []string{"control", "ace", "g14", "shanks"}) {
		t.Errorf("Nodes = %v", f.Nodes)
	}
}

// TestParseStateForms checks both forms of a state name, and that the
// same manifest always has the same text.
func TestParseStateForms(t *testing.T) {
	text := func(state string) []byte {
		return []byte("nodes: [a]\nmodules:\n  p:\n    builds:\n      - fp: f1\n        manifest: {module: p, state: " + state + "}\n")
	}
	a, err := Parse("a", text("[bound, store]"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b", text("[{name: bound}, {name: store}]"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Modules[0].Trunk().JSON) != string(b.Modules[0].Trunk().JSON) {
		t.Errorf("the two forms give %s and %s; want the same text", a.Modules[0].Trunk().JSON, b.Modules[0].Trunk().JSON)
	}
	if got, want := string(a.Modules[0].Trunk().JSON), `{"module":"p","state":["bound","store"]}`; got != want {
		t.Errorf("manifest JSON = %s; want %s", got, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, path := range []string{homelab, "testdata/broken.yaml"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("nodes: [a]\nx: &a [*a]\n"))
	f.Add([]byte("a: &a {b: *a}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.yaml", data)
		if err != nil {
			errs, ok := errors.AsType[*Errors](err)
			if !ok || len(errs.List) == 0 {
				t.Fatalf("Parse error = %v; want *Errors with at least one", err)
			}
			return
		}
		for _, m := range file.Modules {
			for _, b := range m.Builds {
				if _, err := mesh.ParseManifest(b.JSON); err != nil {
					t.Fatalf("manifest of %s %s does not parse back: %v", m.Name, b.Fingerprint, err)
				}
			}
		}
		_ = file.Keys()
		if d := file.Diff(nil, time.Time{}); len(d.Removes) != 0 || len(d.Odd) != 0 {
			t.Fatalf("Diff against empty buckets removes %v, odd %v", d.Removes, d.Odd)
		}
	})
}

// TestParseAliases checks that aliases work where a value is expected and
// that neither a cycle nor an expansion bomb makes the walk run away.
func TestParseAliases(t *testing.T) {
	good := `nodes: [control, ace]
modules:
  redis:
    builds:
      - fp: f1
        manifest: &m {module: redis, ports: [{name: resp}]}
      - fp: f2
        manifest: *m
placement:
  control: &both [redis]
  ace: *both
`
	f, err := Parse("good", []byte(good))
	if err != nil {
		t.Fatalf("Parse(aliases) = %v", err)
	}
	if !f.Placed("ace", "redis") || f.Module("redis").Builds[0].Digest != f.Module("redis").Builds[1].Digest {
		t.Errorf("aliases not followed: %+v", f)
	}
	_, err = Parse("cycle", []byte("nodes: [a]\nplacement: &p {a: *p}\n"))
	if errs, ok := errors.AsType[*Errors](err); !ok || !strings.Contains(errs.Error(), "names a value that holds it") {
		t.Errorf("Parse(cycle) = %v; want the cycle said", err)
	}
	var bomb strings.Builder
	bomb.WriteString("nodes: [a]\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&bomb, "l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	_, err = Parse("bomb", []byte(bomb.String()))
	if errs, ok := errors.AsType[*Errors](err); !ok || !strings.Contains(errs.Error(), "aliases expand the file") {
		t.Errorf("Parse(bomb) = %v; want the expansion said", err)
	}
}

// TestErrorsCount checks the wording of how many problems a file has.
func TestErrorsCount(t *testing.T) {
	one := &Errors{File: "t.yaml", List: []Error{{Line: 1, Msg: "a"}}}
	two := &Errors{File: "t.yaml", List: []Error{{Line: 1, Msg: "a"}, {Line: 2, Msg: "b"}}}
	if one.Count() != "1 error" || two.Count() != "2 errors" {
		t.Errorf("Count = %q and %q; want \"1 error\" and \"2 errors\"", one.Count(), two.Count())
	}
}

// TestParseRefusesNull puts a YAML null (~) in each field of a mesh file
// that holds text, required or not, and checks that the file is refused
// with the null said at its line: a null is no text, and it was written as
// "" into plans and collect (contributes item, have detail) or read as the
// field left out.
func TestParseRefusesNull(t *testing.T) {
	const ok = `nodes: [control]
modules:
  redis:
    builds:
      - fp: 71be02
        manifest:
          module: redis
          provides: [{name: cache, credential: shared, answered-by: helper}, {name: db}]
          requires: [{provision: db, from: redis, local: main, on: control}]
          dirs: [{name: state, unknown: sweep}]
          ports: [{name: resp}]
          secrets: [key]
          config: [domain]
          contributes: [{collection: "shell:zsh:normal", item: "alias r=redis-cli"}]
          state: [bound, {name: store}]
          reads: [mesh-provisioner.plans]
placement:
  control: [redis]
wants:
  control: {redis: 71be02}
haves:
  control: {redis: {phase: running, health: ok, fp: 71be02, detail: up}}
`
	if _, err := Parse("ok.yaml", []byte(ok)); err != nil {
		t.Fatalf("Parse(ok) = %v", err)
	}
	for _, tc := range []struct {
		field, from, to string
		line            int
	}{
		{"contributes item", `item: "alias r=redis-cli"`, "item: ~", 14},
		{"contributes collection", `collection: "shell:zsh:normal"`, "collection: ~", 14},
		{"have detail", "detail: up", "detail: ~", 22},
		{"have fp", "fp: 71be02, detail", "fp: ~, detail", 22},
		{"have phase", "phase: running", "phase: ~", 22},
		{"have health", "health: ok", "health: null", 22},
		{"offer credential", "credential: shared", "credential: ~", 8},
		{"offer answered-by", "answered-by: helper", "answered-by: ~", 8},
		{"offer name", "name: cache", "name: ~", 8},
		{"requirement local", "local: main", "local: ~", 9},
		{"requirement on", "on: control", "on: ~", 9},
		{"requirement provision", "provision: db", "provision: ~", 9},
		{"requirement from", "from: redis", "from: ~", 9},
		{"dir unknown", "unknown: sweep", "unknown: ~", 10},
		{"dir name", "name: state", "name: ~", 10},
		{"port name", "name: resp", "name: ~", 11},
		{"secret", "secrets: [key]", "secrets: [~]", 12},
		{"config", "config: [domain]", "config: [~]", 13},
		{"state", "state: [bound,", "state: [~,", 15},
		{"state name", "{name: store}", "{name: ~}", 15},
		{"read", "reads: [mesh-provisioner.plans]", "reads: [~]", 16},
		{"manifest module", "module: redis", "module: ~", 7},
		{"want fp", "{redis: 71be02}", "{redis: ~}", 20},
		{"placed module", "control: [redis]", "control: [~]", 18},
		{"node", "nodes: [control]", "nodes: [control, ~]", 1},
		{"mesh name", "nodes:", "mesh: ~\nnodes:", 1},
	} {
		t.Run(tc.field, func(t *testing.T) {
			text := strings.Replace(ok, tc.from, tc.to, 1)
			if text == ok {
				t.Fatalf("%q is not in the file", tc.from)
			}
			_, err := Parse("m.yaml", []byte(text))
			errs, isErrs := errors.AsType[*Errors](err)
			if !isErrs {
				t.Fatalf("Parse with %s = %v; want *Errors", tc.to, err)
			}
			for _, e := range errs.List {
				if e.Line == tc.line && strings.Contains(e.Msg, "is empty (YAML null)") {
					return
				}
			}
			t.Errorf("Parse with %s: errors =\n%v\nwant one at line %d saying the null", tc.to, errs, tc.line)
		})
	}
}
