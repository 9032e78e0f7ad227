// Package gen writes synthetic mesh files (spec 9) of any size for
// benchmarks and load tests: a control node with the mesh's infrastructure
// and worker nodes running app modules with realistic requirements. Every
// file it writes is valid for package meshfile. Gen is pure: the same
// arguments give the same bytes.
package gen

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"go.yaml.in/yaml/v3"
)

// Control is the name of the node that runs the mesh's infrastructure
// (mesh-vault, postgres, redis, keycloak, route-proxy).
const Control = "control"

// kinds are the kinds of app modules; a pool module is named
// "<kind>-<n>", so that each name is unique and many nodes run the same
// module.
var kinds = []string{
	"forge", "wiki", "chat", "photos", "metrics", "dashboard", "notes", "ci", "mail", "files",
	"music", "books", "recipes", "budget", "tasks", "bookmarks", "status", "search", "paste", "calendar",
}

// Generate returns a mesh file (YAML) of nodes nodes: the control node
// ("control") with mesh-vault, postgres, redis, keycloak, route-proxy and
// node-tools, and nodes-1 workers ("node-0001", ...) each with node-tools
// and modulesPerNode distinct app modules drawn from a pool of
// max(3*modulesPerNode, 12) modules. App modules have one or two builds
// (the second may add a requirement) and require some of database
// (postgres), cache (redis), oidc-client (keycloak) and route
// (route-proxy), all on the control node. Most placed modules have a want
// (some at the older build) and a have; a few have only a have. seed
// chooses everything random; nodes < 1 counts as 1 and modulesPerNode < 0
// as 0.
func Generate(nodes, modulesPerNode int, seed int64) []byte {
	if nodes < 1 {
		nodes = 1
	}
	if modulesPerNode < 0 {
		modulesPerNode = 0
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0x6d657368))
	g := &generator{r: r}

	f := file{Modules: map[string]module{}, Placement: map[string]*yaml.Node{}, Wants: map[string]*yaml.Node{}, Haves: map[string]*yaml.Node{}}
	infra := g.infra()
	for _, m := range infra {
		f.Modules[m.name] = m.module
	}
	poolSize := max(3*modulesPerNode, 12)
	pool := make([]app, poolSize)
	for i := range pool {
		pool[i] = g.app(fmt.Sprintf("%s-%d", kinds[i%len(kinds)], i/len(kinds)+1))
		f.Modules[pool[i].name] = pool[i].module
	}

	f.Nodes = append(f.Nodes, Control)
	var placed []string
	var wants, haves []any
	for _, m := range infra {
		placed = append(placed, m.name)
		wants = append(wants, m.name, m.newest())
		haves = append(haves, m.name, have("running", "ok", m.newest()))
	}
	f.Placement[Control] = flowList(placed)
	f.Wants[Control] = flowMap(wants...)
	f.Haves[Control] = blockMap(haves...)

	tools := infra[len(infra)-1]
	for n := 1; n < nodes; n++ {
		node := fmt.Sprintf("node-%04d", n)
		f.Nodes = append(f.Nodes, node)
		placed = []string{tools.name}
		wants = []any{tools.name, tools.newest()}
		haves = []any{tools.name, have("running", "ok", tools.newest())}
		for _, i := range r.Perm(poolSize)[:modulesPerNode] {
			a := pool[i]
			placed = append(placed, a.name)
			fp := a.newest()
			if len(a.fps) > 1 && r.IntN(10) < 3 {
				fp = a.fps[0] // runs the older build; the newest is asked ahead of its want
			}
			switch roll := r.IntN(20); {
			case roll == 0: // no want: composed at the build its have runs
				haves = append(haves, a.name, have("running", "ok", fp))
			case roll < 3:
				wants = append(wants, a.name, fp)
				haves = append(haves, a.name, have("starting", "unknown", fp))
			case roll < 6:
				wants = append(wants, a.name, fp) // no have yet
			default:
				wants = append(wants, a.name, fp)
				haves = append(haves, a.name, have("running", "ok", fp))
			}
		}
		f.Placement[node] = flowList(placed)
		f.Wants[node] = flowMap(wants...)
		f.Haves[node] = blockMap(haves...)
	}
	f.Nodes = flowStrings(f.Nodes)
	var out bytes.Buffer
	fmt.Fprintf(&out, "# A synthetic mesh: %d nodes, %d app modules per worker, seed %d (mesh-provisioner gen).\n", nodes, modulesPerNode, seed)
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&f); err != nil {
		panic(fmt.Sprintf("gen: encode: %v", err)) // the values above always encode
	}
	if err := enc.Close(); err != nil {
		panic(fmt.Sprintf("gen: encode: %v", err))
	}
	return out.Bytes()
}

type file struct {
	Nodes     flowStrings           `yaml:"nodes"`
	Modules   map[string]module     `yaml:"modules"`
	Placement map[string]*yaml.Node `yaml:"placement"`
	Wants     map[string]*yaml.Node `yaml:"wants"`
	Haves     map[string]*yaml.Node `yaml:"haves,omitempty"`
}

type module struct {
	Builds []build `yaml:"builds"`
}

type build struct {
	Fingerprint string   `yaml:"fp"`
	Manifest    manifest `yaml:"manifest"`
}

type manifest struct {
	Module      string         `yaml:"module"`
	Requires    []requirement  `yaml:"requires,omitempty,flow"`
	Provides    []offer        `yaml:"provides,omitempty,flow"`
	Dirs        []dir          `yaml:"dirs,omitempty,flow"`
	Ports       []port         `yaml:"ports,omitempty,flow"`
	Secrets     []string       `yaml:"secrets,omitempty,flow"`
	Config      []string       `yaml:"config,omitempty,flow"`
	Contributes []contribution `yaml:"contributes,omitempty,flow"`
	State       []string       `yaml:"state,omitempty,flow"`
	Reads       []string       `yaml:"reads,omitempty,flow"`
}

type requirement struct {
	Provision string `yaml:"provision"`
	From      string `yaml:"from"`
	Local     string `yaml:"local,omitempty"`
}

type offer struct {
	Name       string `yaml:"name"`
	Credential string `yaml:"credential,omitempty"`
	AnsweredBy string `yaml:"answered-by,omitempty"`
}

type dir struct {
	Name    string `yaml:"name"`
	Unknown string `yaml:"unknown,omitempty"`
}

type port struct {
	Name string `yaml:"name"`
}

type contribution struct {
	Collection string `yaml:"collection"`
	Item       string `yaml:"item"`
}

// flowStrings is a list of names written on one line.
type flowStrings []string

// MarshalYAML writes the list in flow style.
func (l flowStrings) MarshalYAML() (any, error) { return flowList(l), nil }

type generator struct {
	r    *rand.Rand
	used map[string]bool
}

// fp returns a new fingerprint: six hex digits, unique in the file.
func (g *generator) fp() string {
	if g.used == nil {
		g.used = map[string]bool{}
	}
	for {
		s := fmt.Sprintf("%06x", g.r.Uint32()&0xffffff)
		if !g.used[s] {
			g.used[s] = true
			return s
		}
	}
}

// app is a module with the fingerprints of its builds, oldest first.
type app struct {
	name   string
	fps    []string
	module module
}

func (a app) newest() string { return a.fps[len(a.fps)-1] }

func (g *generator) with(name string, manifests ...manifest) app {
	a := app{name: name}
	for _, m := range manifests {
		m.Module = name
		fp := g.fp()
		a.fps = append(a.fps, fp)
		a.module.Builds = append(a.module.Builds, build{Fingerprint: fp, Manifest: m})
	}
	return a
}

// infra returns the control node's modules; node-tools, which every node
// runs, is last.
func (g *generator) infra() []app {
	plans := []string{"mesh-provisioner.plans"}
	return []app{
		g.with("mesh-vault", manifest{
			Provides: []offer{{Name: "credential", AnsweredBy: "helper"}},
			State:    []string{"bound", "store"},
			Reads:    []string{"mesh-provisioner.plans", "mesh-provisioner.provisions"},
			Dirs:     []dir{{Name: "state", Unknown: "program"}},
		}),
		g.with("postgres", manifest{
			Provides: []offer{{Name: "database", Credential: "own", AnsweredBy: "helper"}},
			State:    []string{"bound"},
			Reads:    plans,
			Dirs:     []dir{{Name: "state", Unknown: "program"}},
			Ports:    []port{{Name: "pg"}},
			Secrets:  []string{"superuser-password"},
		}),
		g.with("redis", manifest{
			Provides: []offer{{Name: "cache", Credential: "shared"}},
			Dirs:     []dir{{Name: "state"}},
			Ports:    []port{{Name: "resp"}},
		}),
		g.with("keycloak", manifest{
			Requires: []requirement{{Provision: "database", From: "postgres"}},
			Provides: []offer{{Name: "oidc-client", Credential: "own", AnsweredBy: "helper"}},
			State:    []string{"bound"},
			Reads:    plans,
			Ports:    []port{{Name: "http"}},
			Secrets:  []string{"admin-password"},
			Config:   []string{"domain"},
		}),
		g.with("route-proxy", manifest{
			Provides: []offer{{Name: "route", AnsweredBy: "helper"}},
			State:    []string{"bound"},
			Reads:    plans,
			Ports:    []port{{Name: "http"}, {Name: "https"}},
			Dirs:     []dir{{Name: "certs", Unknown: "program"}},
			Config:   []string{"domain"},
		}),
		g.with("node-tools", manifest{
			Provides: []offer{{Name: "mcp-endpoint", AnsweredBy: "helper"}},
			State:    []string{"bound"},
			Reads:    plans,
			Contributes: []contribution{
				{Collection: "shell:zsh:normal", Item: "export PATH=$PATH:/opt/node-tools/bin"},
				{Collection: "environment", Item: "EDITOR=vi"},
			},
		}),
	}
}

// app returns an app module with one or two builds; a second build may
// add a requirement (a cache) or a port.
func (g *generator) app(name string) app {
	r := g.r
	m := manifest{Config: []string{"domain"}}
	if r.IntN(10) < 9 {
		m.Requires = append(m.Requires, requirement{Provision: "route", From: "route-proxy"})
	}
	if r.IntN(10) < 6 {
		req := requirement{Provision: "database", From: "postgres"}
		if r.IntN(3) == 0 {
			req.Local = "main"
			m.Requires = append(m.Requires, req, requirement{Provision: "database", From: "postgres", Local: "archive"})
		} else {
			m.Requires = append(m.Requires, req)
		}
	}
	if r.IntN(10) < 5 {
		m.Requires = append(m.Requires, requirement{Provision: "oidc-client", From: "keycloak"})
	}
	cache := r.IntN(10) < 3
	if cache {
		m.Requires = append(m.Requires, requirement{Provision: "cache", From: "redis"})
	}
	m.Dirs = []dir{{Name: "state", Unknown: "program"}}
	if r.IntN(3) == 0 {
		m.Dirs = append(m.Dirs, dir{Name: "tmp", Unknown: "sweep"})
	}
	m.Ports = []port{{Name: "http"}}
	if r.IntN(4) == 0 {
		m.Secrets = []string{"secret-key"}
	}
	if r.IntN(3) == 0 {
		m.Contributes = []contribution{{Collection: "environment", Item: fmt.Sprintf("%s_URL=http://localhost", name)}}
	}
	if r.IntN(2) == 0 {
		return g.with(name, m)
	}
	newer := m
	newer.Requires = append([]requirement(nil), m.Requires...)
	newer.Ports = append([]port(nil), m.Ports...)
	if !cache {
		newer.Requires = append(newer.Requires, requirement{Provision: "cache", From: "redis"})
	} else {
		newer.Ports = append(newer.Ports, port{Name: "metrics"})
	}
	return g.with(name, m, newer)
}

// have returns a have as one flow mapping.
func have(phase, health, fp string) *yaml.Node {
	return flowMap("phase", phase, "health", health, "fp", fp)
}

func text(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func flowList(items []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, s := range items {
		n.Content = append(n.Content, text(s))
	}
	return n
}

// flowMap returns a mapping written on one line from keys and values in
// turn; a value is a string or a node.
func flowMap(kv ...any) *yaml.Node {
	n := blockMap(kv...)
	n.Style = yaml.FlowStyle
	return n
}

func blockMap(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Content = append(n.Content, text(kv[i].(string)))
		switch v := kv[i+1].(type) {
		case string:
			n.Content = append(n.Content, text(v))
		case *yaml.Node:
			n.Content = append(n.Content, v)
		}
	}
	return n
}
