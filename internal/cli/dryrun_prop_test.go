package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/dryrun"
	"github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestDryRunPredictsWhatTheSeatWrites is a property test: for a random
// mesh and a run of random changes to it (a module placed or unplaced, the
// vault moved, a want or a have changed, a provider's offer changed by a
// new build), each file is dry-run (apply --dry-run -o json) and then
// applied with the real seat and ask router running on a real server, and
// the dry run's changes must equal what the seat then wrote: every plan,
// provision and refusal key written or removed, on every node, with each
// provision's state and why and each refusal's why (no provider runs, so
// nothing answers meanwhile). The dry run reads each node's keys by
// subject, only the nodes it needs, and of placement, wants and haves
// only the nodes the seat's verb says differ from the file; apply too.
// MESH_DRYRUN_SEED picks the seed and MESH_DRYRUN_STEPS the number of
// changes (24 by default); MESH_DRYRUN_NOVERB=1 runs it with no seat verb
// (placement, wants and haves read whole).
func TestDryRunPredictsWhatTheSeatWrites(t *testing.T) {
	t.Parallel()
	seed := uint64(20261201)
	if s := os.Getenv("MESH_DRYRUN_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	steps := 24
	if s := os.Getenv("MESH_DRYRUN_STEPS"); s != "" {
		steps, _ = strconv.Atoi(s)
	}
	// Each node's keys read by subject, never whole buckets (a small mesh
	// would read whole buckets at its second node).
	// The file's nodes too, as the seat's verb says which differ.
	zero := 0
	byNode := testHooks{wholeShare: &zero, nodeShare: &zero}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := bustest.Server(t)
	startRouter(t, s)
	if os.Getenv("MESH_DRYRUN_NOVERB") == "" {
		startVerb(t, s)
	}
	m := randomMesh(rng)
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	write := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(m.render())
	st := startSeat(t, s, path)
	for step := 0; step < steps; step++ {
		what := m.change(rng)
		text := m.render()
		write(text)
		before := seatValues(t, s)
		out, errOut, err := runWith(t, byNode, "apply", "--dry-run", "-f", path, "-o", "json", "--nats", s.URL())
		if err != nil {
			t.Fatalf("seed %d step %d (%s): apply --dry-run: %v (%s)\n%s", seed, step, what, err, errOut, text)
		}
		var rep dryrun.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("apply --dry-run -o json printed %s: %v", out, err)
		}
		if os.Getenv("MESH_DRYRUN_NOVERB") == "" && strings.Contains(errOut, " whole (") {
			t.Fatalf("seed %d step %d: apply --dry-run read the file's buckets whole: %s", seed, step, errOut)
		}
		if _, errOut, err := runWith(t, byNode, "apply", "--yes", "-f", path, "--nats", s.URL()); err != nil {
			t.Fatalf("seed %d step %d (%s): apply: %v (%s)\n%s", seed, step, what, err, errOut, text)
		}
		waitSeat(t, s, st)
		after := seatValues(t, s)
		got := seatChanges(before, after)
		want := predicted(rep)
		if !slices.Equal(got, want) {
			for _, c := range rep.Changes {
				if c.Bucket == mesh.ProvisionsBucket {
					t.Logf("%s before %s\n  after %s", c.Key, before[c.Bucket][c.Key], after[c.Bucket][c.Key])
				}
			}
			t.Errorf("seed %d step %d (%s): the seat wrote\n  %s\nthe dry run said\n  %s\nonly written: %v\nonly said: %v\nfile:\n%s",
				seed, step, what, strings.Join(got, "\n  "), strings.Join(want, "\n  "), minus(got, want), minus(want, got), text)
			return
		}
	}
}

// predicted lists a dry run's changes as seatChanges lists the seat's.
func predicted(rep dryrun.Report) []string {
	var out []string
	for _, c := range rep.Changes {
		out = append(out, changeLine(c))
	}
	slices.Sort(out)
	return out
}

func changeLine(c dryrun.Change) string {
	s := fmt.Sprintf("%s %s %s", c.Op, c.Bucket, c.Key)
	if c.State != "" {
		s += " " + string(c.State)
	}
	if c.Why != "" {
		s += " (" + c.Why + ")"
	}
	if c.Ask {
		s += " ask"
	}
	return s
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// seatValues reads the plans, provisions and refusals the seat keeps:
// bucket -> key -> value.
func seatValues(t *testing.T, s *bus.Server) map[string]map[string][]byte {
	t.Helper()
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "read")
	out := map[string]map[string][]byte{}
	for _, b := range []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket} {
		held := map[string][]byte{}
		out[b] = held
		if _, err := js.KeyValue(ctx, b); err != nil {
			continue // not made yet
		}
		c := bus.Follow(ctx, js, b, bus.Options{})
		<-c.Ready()
		c.Range(func(k string, it bus.Item) bool {
			held[k] = it.Value
			return true
		})
	}
	return out
}

// seatChanges lists what the seat wrote between two reads, as the dry run
// says it: a provision whose value changed besides its at, a refusal whose
// why changed, a plan whose bytes changed.
func seatChanges(before, after map[string]map[string][]byte) []string {
	var out []string
	provision := func(v []byte) mesh.Provision {
		var p mesh.Provision
		_ = json.Unmarshal(v, &p)
		return p
	}
	refusal := func(v []byte) mesh.Refusal {
		var r mesh.Refusal
		_ = json.Unmarshal(v, &r)
		return r
	}
	for _, b := range []string{mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket} {
		for k, v := range after[b] {
			c := dryrun.Change{Bucket: b, Key: k, Op: dryrun.Add}
			old, had := before[b][k]
			switch b {
			case mesh.PlansBucket:
				if had && string(old) == string(v) {
					continue
				}
			case mesh.RefusedBucket:
				c.Why = refusal(v).Why
				if had && refusal(old).Why == c.Why {
					continue
				}
			case mesh.ProvisionsBucket:
				p := provision(v)
				c.State, c.Why = p.State, p.Why
				if had {
					o := provision(old)
					c.Ask = p.Ask != "" && o.Ask != p.Ask && p.State == mesh.Retiring
					o.At = p.At
					if a, b := marshalJSON(o), marshalJSON(p); a == b {
						continue
					}
				} else {
					c.Ask = p.Ask != "" && p.State == mesh.Retiring
				}
			}
			if had {
				c.Op = dryrun.Update
			}
			out = append(out, changeLine(c))
		}
		for k, v := range before[b] {
			if _, ok := after[b][k]; ok {
				continue
			}
			c := dryrun.Change{Bucket: b, Key: k, Op: dryrun.Remove}
			switch b {
			case mesh.RefusedBucket:
				c.Why = refusal(v).Why
			case mesh.ProvisionsBucket:
				c.State, c.Why = provision(v).State, provision(v).Why
			}
			out = append(out, changeLine(c))
		}
	}
	slices.Sort(out)
	return out
}

func marshalJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// randMesh is a random mesh: nodes, the vault, providers with one offer
// each (their credential, and whether entries or the have answer it),
// consumers with two builds each (the newer may require more), and where
// each module is placed, wanted and had.
type randMesh struct {
	nodes     []string
	providers []randProvider
	consumers []randConsumer
	// placed: node -> modules placed there (in this order).
	placed map[string][]string
	// wants: node -> module -> build index (0 or 1; providers have builds
	// 0..len-1).
	wants map[string]map[string]int
	// haves: node -> module -> phase.
	haves map[string]map[string]string
}

type randProvider struct {
	name, offer string
	// builds lists each build's credential (own, shared, none) and
	// whether entries answer it; the last is the trunk.
	builds []randOffer
}

type randOffer struct {
	credential string
	helper     bool
}

type randConsumer struct {
	name string
	// requires[b] lists the providers build b requires an offer of.
	requires [2][]int
	on       map[int]string // provider index -> a pinned node
}

func randomMesh(rng *rand.Rand) *randMesh {
	m := &randMesh{placed: map[string][]string{}, wants: map[string]map[string]int{}, haves: map[string]map[string]string{}}
	for i := range 2 + rng.IntN(4) {
		m.nodes = append(m.nodes, fmt.Sprintf("n%d", i+1))
	}
	creds := []string{mesh.CredentialOwn, mesh.CredentialShared, mesh.CredentialNone}
	for i := range 3 {
		m.providers = append(m.providers, randProvider{
			name: fmt.Sprintf("p%d", i+1), offer: []string{"db", "cache", "route"}[i],
			builds: []randOffer{{credential: creds[rng.IntN(3)], helper: rng.IntN(2) == 0}},
		})
	}
	for i := range 4 {
		c := randConsumer{name: fmt.Sprintf("c%d", i+1), on: map[int]string{}}
		for p := range m.providers {
			if rng.IntN(2) == 0 {
				c.requires[0] = append(c.requires[0], p)
			}
		}
		c.requires[1] = slices.Clone(c.requires[0])
		if p := rng.IntN(len(m.providers)); !slices.Contains(c.requires[1], p) {
			c.requires[1] = append(c.requires[1], p)
		}
		if rng.IntN(4) == 0 && len(c.requires[1]) > 0 {
			c.on[c.requires[1][0]] = m.nodes[rng.IntN(len(m.nodes))]
		}
		m.consumers = append(m.consumers, c)
	}
	m.place(mesh.VaultModule, m.nodes[0])
	for _, p := range m.providers {
		m.place(p.name, m.nodes[rng.IntN(len(m.nodes))])
	}
	for _, c := range m.consumers {
		for _, n := range m.nodes {
			if rng.IntN(3) == 0 {
				m.place(c.name, n)
			}
		}
	}
	for _, n := range m.nodes {
		for _, mod := range m.placed[n] {
			m.randomWantAndHave(rng, n, mod)
		}
	}
	return m
}

func (m *randMesh) place(module, node string) {
	if !slices.Contains(m.placed[node], module) {
		m.placed[node] = append(m.placed[node], module)
	}
}

func (m *randMesh) unplace(module, node string) {
	m.placed[node] = slices.DeleteFunc(m.placed[node], func(s string) bool { return s == module })
	delete(m.wants[node], module)
	delete(m.haves[node], module)
}

// builds returns how many builds module has.
func (m *randMesh) builds(module string) int {
	for _, p := range m.providers {
		if p.name == module {
			return len(p.builds)
		}
	}
	if module == mesh.VaultModule {
		return 1
	}
	return 2
}

func (m *randMesh) randomWantAndHave(rng *rand.Rand, node, module string) {
	delete(m.wants[node], module)
	delete(m.haves[node], module)
	if rng.IntN(4) != 0 {
		if m.wants[node] == nil {
			m.wants[node] = map[string]int{}
		}
		m.wants[node][module] = rng.IntN(m.builds(module))
	}
	if rng.IntN(2) == 0 {
		if m.haves[node] == nil {
			m.haves[node] = map[string]string{}
		}
		m.haves[node][module] = []string{mesh.PhaseRunning, mesh.PhaseRunning, mesh.PhaseFailed, mesh.PhaseStarting}[rng.IntN(4)]
	}
}

// change makes one random change and says it.
func (m *randMesh) change(rng *rand.Rand) string {
	switch rng.IntN(6) {
	case 0: // the vault moves, or is placed on one more node
		from := m.nodeOf(mesh.VaultModule)
		to := m.nodes[rng.IntN(len(m.nodes))]
		if from != "" && rng.IntN(2) == 0 {
			m.unplace(mesh.VaultModule, from)
		}
		m.place(mesh.VaultModule, to)
		return "the vault placed on " + to
	case 1: // a provider moves
		p := m.providers[rng.IntN(len(m.providers))]
		from, to := m.nodeOf(p.name), m.nodes[rng.IntN(len(m.nodes))]
		if from != "" {
			m.unplace(p.name, from)
		}
		m.place(p.name, to)
		return p.name + " moved to " + to
	case 2: // a provider's offer changes with a new build
		i := rng.IntN(len(m.providers))
		p := &m.providers[i]
		p.builds = append(p.builds, randOffer{credential: []string{mesh.CredentialOwn, mesh.CredentialShared, mesh.CredentialNone}[rng.IntN(3)], helper: rng.IntN(2) == 0})
		return fmt.Sprintf("%s build %d offers %s credential %s", p.name, len(p.builds)-1, p.offer, p.builds[len(p.builds)-1].credential)
	case 3, 4: // a consumer placed or unplaced
		c := m.consumers[rng.IntN(len(m.consumers))]
		n := m.nodes[rng.IntN(len(m.nodes))]
		if slices.Contains(m.placed[n], c.name) {
			m.unplace(c.name, n)
			return c.name + " unplaced from " + n
		}
		m.place(c.name, n)
		m.randomWantAndHave(rng, n, c.name)
		return c.name + " placed on " + n
	default: // a want or a have changes
		n := m.nodes[rng.IntN(len(m.nodes))]
		if len(m.placed[n]) == 0 {
			return "nothing"
		}
		mod := m.placed[n][rng.IntN(len(m.placed[n]))]
		m.randomWantAndHave(rng, n, mod)
		return "the want and have of " + mod + " on " + n
	}
}

func (m *randMesh) nodeOf(module string) string {
	for _, n := range m.nodes {
		if slices.Contains(m.placed[n], module) {
			return n
		}
	}
	return ""
}

// render writes the mesh as a mesh file. A consumer whose requirement
// would be refused (a credential with no vault placed) is placed with its
// requirements as they are: render leaves the vault placed wherever it
// was, and change never unplaces it without placing it elsewhere.
func (m *randMesh) render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nodes: [%s]\nmodules:\n", strings.Join(m.nodes, ", "))
	fmt.Fprintf(&b, "  %s:\n    builds:\n      - fp: v0\n        manifest: {module: %s, provides: [{name: credential, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans, mesh-provisioner.provisions]}\n", mesh.VaultModule, mesh.VaultModule)
	for _, p := range m.providers {
		fmt.Fprintf(&b, "  %s:\n    builds:\n", p.name)
		for i, o := range p.builds {
			extra := ""
			helper := ""
			if o.helper {
				helper, extra = ", answered-by: helper", ", state: [bound], reads: [mesh-provisioner.plans]"
			}
			fmt.Fprintf(&b, "      - fp: f%d\n        manifest: {module: %s, provides: [{name: %s, credential: %s%s}]%s}\n", i, p.name, p.offer, o.credential, helper, extra)
		}
	}
	for _, c := range m.consumers {
		fmt.Fprintf(&b, "  %s:\n    builds:\n", c.name)
		for i, req := range c.requires {
			var rs []string
			for _, p := range req {
				r := fmt.Sprintf("{provision: %s, from: %s", m.providers[p].offer, m.providers[p].name)
				if on := c.on[p]; on != "" {
					r += ", on: " + on
				}
				rs = append(rs, r+"}")
			}
			fmt.Fprintf(&b, "      - fp: b%d\n        manifest: {module: %s, requires: [%s], ports: [{name: http}]}\n", i, c.name, strings.Join(rs, ", "))
		}
	}
	b.WriteString("placement:\n")
	for _, n := range m.nodes {
		fmt.Fprintf(&b, "  %s: [%s]\n", n, strings.Join(m.placed[n], ", "))
	}
	fps := func(module string, i int) string {
		switch {
		case module == mesh.VaultModule:
			return "v0"
		case strings.HasPrefix(module, "p"):
			return fmt.Sprintf("f%d", i)
		}
		return fmt.Sprintf("b%d", i)
	}
	b.WriteString("wants:\n")
	for _, n := range m.nodes {
		var ws []string
		for _, mod := range m.placed[n] {
			if i, ok := m.wants[n][mod]; ok {
				ws = append(ws, mod+": "+fps(mod, min(i, m.builds(mod)-1)))
			}
		}
		fmt.Fprintf(&b, "  %s: {%s}\n", n, strings.Join(ws, ", "))
	}
	b.WriteString("haves:\n")
	for _, n := range m.nodes {
		var hs []string
		for _, mod := range m.placed[n] {
			if phase, ok := m.haves[n][mod]; ok {
				i := m.builds(mod) - 1
				if w, wanted := m.wants[n][mod]; wanted {
					i = min(w, i)
				}
				hs = append(hs, fmt.Sprintf("%s: {phase: %s, health: ok, fp: %s}", mod, phase, fps(mod, i)))
			}
		}
		fmt.Fprintf(&b, "  %s: {%s}\n", n, strings.Join(hs, ", "))
	}
	return b.String()
}

// TestDryRunReadsWhatTheChangeTouches dry-runs, over a settled generated
// mesh of 60 nodes, the same file with one more app module placed on
// node-0001, and checks what it read: the seat's keys of node-0001 and
// control only (the node composed, and the node of the credentials its keys
// depend on), no whole bucket, and a report of node-0001's keys alone; the
// same file as applied reads no node's keys and predicts nothing. Of the
// wants and haves (read whole with the file's buckets, for its diff) the
// run decodes those of node-0001 (and of its providers on control, at
// most), and of the placements node-0001's and control's, where it decoded
// every node's. It read
// every bucket whole and composed every node (issue 17: 16 s and 980 MB at
// 10,000 nodes; scripts/dryruncost measures it).
func TestDryRunReadsWhatTheChangeTouches(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	text := gen.Generate(60, 8, 1)
	path := filepath.Join(t.TempDir(), "gen.yaml")
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	startSeat(t, s, path)
	_, js := bustest.Connect(t, s, "dry")
	ctx := bustest.Context(t)

	f, err := meshfile.Parse("gen.yaml", text)
	if err != nil {
		t.Fatal(err)
	}
	rep, _, in, _, err := dryRun(ctx, js, asker{nc: js.Conn()}, f, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Changed() || in.loaded == nil || len(in.loaded.Nodes) != 0 {
		t.Errorf("the file as applied: changes %v, nodes read %v; want none", rep.Changes, in.loaded)
	}
	if took, placed := in.lazy.Took(), in.lazy.Placements(); len(took)+len(placed) != 0 {
		t.Errorf("the file as applied: the run took the wants and haves of %v and the placements of %v; want none", took, placed)
	}

	lines := strings.Split(string(text), "\n")
	var added string
	for i, l := range lines {
		if strings.HasPrefix(l, "  node-0001: [") {
			mine := strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "  node-0001: ["), "]"), ", ")
			for _, m := range []string{"forge-1", "wiki-1", "chat-1", "photos-1"} {
				if !slices.Contains(mine, m) {
					added = m
					break
				}
			}
			lines[i] = "  node-0001: [" + strings.Join(append(mine, added), ", ") + "]"
			break
		}
	}
	if added == "" {
		t.Fatal("found no module to place on node-0001")
	}
	f, err = meshfile.Parse("more.yaml", []byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	rep, _, in, _, err = dryRun(ctx, js, asker{nc: js.Conn()}, f, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if in.loaded == nil {
		t.Fatal("the dry run read whole buckets; want the keys of the nodes it needs")
	}
	if got := sortedNodes(in.loaded.Nodes); !slices.Equal(got, []string{"control", "node-0001"}) {
		t.Errorf("the dry run read the keys of %v; want control and node-0001", got)
	}
	// The wants and haves of the 60 nodes were read with the file's
	// buckets (what the file's diff needs); the run decodes only those of
	// node-0001's modules and of their providers on control.
	took := in.lazy.Took()
	t.Logf("wants and haves taken: %v", took)
	if len(took) == 0 || len(took) > 2*len(mine(lines)) {
		t.Errorf("the dry run took the wants and haves of %d modules %v; want node-0001's and their providers'", len(took), took)
	}
	for _, pair := range took {
		if n, _, _ := strings.Cut(pair, "."); n != "node-0001" && n != "control" {
			t.Errorf("the dry run took the want and have of %s; want node-0001's and control's only", pair)
		}
	}
	// Of the placements, those of node-0001 and of the nodes whose value
	// names a module it reads the nodes of (its providers', control's).
	placed := in.lazy.Placements()
	t.Logf("placements taken: %v", placed)
	if !slices.Contains(placed, "node-0001") || len(placed) > 2 {
		t.Errorf("the dry run took the placements of %v; want node-0001's and control's", placed)
	}
	var plan bool
	for _, c := range rep.Changes {
		if c.Node != "node-0001" {
			t.Errorf("change %+v of another node than node-0001", c)
		}
		plan = plan || c.Bucket == mesh.PlansBucket && c.Key == "node-0001."+added && c.Op == dryrun.Add
	}
	if !plan {
		t.Errorf("changes %+v; want node-0001.%s's plan added", rep.Changes, added)
	}
}

// mine returns the modules placed on node-0001 in a generated file's lines.
func mine(lines []string) []string {
	for _, l := range lines {
		if strings.HasPrefix(l, "  node-0001: [") {
			return strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "  node-0001: ["), "]"), ", ")
		}
	}
	return nil
}

func sortedNodes(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
