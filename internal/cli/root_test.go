package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestUsageErrors checks that errors in how a command is called are usage
// errors (exit code 2) and name what is wrong, and that a failure while a
// command runs is not.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		args  []string
		usage bool
		says  string
	}{
		{"unknown command", []string{"frobnicate"}, true, `unknown command "frobnicate"`},
		{"missing required flag", []string{"client"}, true, `required flag(s) "node" not set`},
		{"missing flags of render", []string{"render", "t.tmpl"}, true, `"module", "node"`},
		{"unknown flag", []string{"get", "plans", "--colour"}, true, "unknown flag: --colour"},
		{"too many arguments", []string{"get", "plans", "ace.gitea", "refused"}, true, "accepts at most 2 arg(s)"},
		{"unknown kind", []string{"get", "plants"}, true, `get: unknown "plants"`},
		{"bad output", []string{"get", "plans", "-o", "xml"}, true, `-o "xml"`},
		{"apply without file", []string{"apply"}, true, "-f MESHFILE is required"},
		{"no replicas", []string{"serve", "--replicas", "0"}, true, `"0" for "--replicas" flag: a bucket has 1 to 5 replicas`},
		{"too many replicas", []string{"router", "--replicas", "6"}, true, `"6" for "--replicas" flag: a bucket has 1 to 5 replicas`},
		{"replicas not a number", []string{"apply", "-f", "m.yaml", "--replicas", "three"}, true, "a bucket has 1 to 5 replicas"},
		{"dead url", []string{"get", "plans", "--nats", "nats://127.0.0.1:1"}, false,
			"no NATS server answers at nats://127.0.0.1:1: is `up` running? pass --nats URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, tc.args...)
			if err == nil {
				t.Fatalf("%v = nil; want an error", tc.args)
			}
			if got := isUsage(err); got != tc.usage {
				t.Errorf("isUsage(%v) = %v; want %v", err, got, tc.usage)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%v = %q; want it to say %q", tc.args, err, tc.says)
			}
		})
	}
}

// TestNoJetStream checks that a server without JetStream is named as such.
func TestNoJetStream(t *testing.T) {
	t.Parallel()
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	_, _, err = run(t, "get", "plans", "--nats", s.URL())
	if err == nil || !strings.Contains(err.Error(), "has no JetStream") || isUsage(err) {
		t.Fatalf("get on a server without JetStream = %v; want a failure saying it has no JetStream", err)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "mesh-provisioner ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version = %q, %v; want mesh-provisioner, a version and the Go version", out, err)
	}
}

// TestGetKinds checks that get with no kind lists the kinds.
func TestGetKinds(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "get")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"plans", "provisions", "refused", "registry", "applied", "collect", "needs"} {
		if !strings.Contains(out, "\n  "+k+" ") {
			t.Errorf("get listed no kind %s:\n%s", k, out)
		}
	}
}

// TestClientNotInMesh checks that a client of a node the mesh does not
// place says so.
func TestClientNotInMesh(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	if _, _, err := run(t, "apply", "-f", homelabFile, "--nats", s.URL()); err != nil {
		t.Fatal(err)
	}
	_, js := bustest.Connect(t, s, "test")
	got := notInMesh(bustest.Context(t), js, "acee")
	if want := "node acee is not in the mesh (mesh-controller_placement has no key acee; its nodes: ace, control, g14, shanks)"; got != want {
		t.Errorf("notInMesh(acee) = %q; want %q", got, want)
	}
	if got := notInMesh(bustest.Context(t), js, "ace"); got != "" {
		t.Errorf("notInMesh(ace) = %q; want none", got)
	}
}

// TestFitRows checks that a table is cut to 120 columns, widest first.
func TestFitRows(t *testing.T) {
	t.Parallel()
	header := []string{"NODE", "KEY", "WHY"}
	rows := [][]string{{"ace", "ace.gitea.database.main", strings.Repeat("w", 200)}}
	got := fitRows(header, rows, defaultWidth)
	// NODE (4) + KEY (23) + two gaps of 2 leave 89 columns for WHY.
	if n := len([]rune(got[0][2])); n != 89 {
		t.Errorf("cut WHY is %d columns; want 89: %q", n, got[0][2])
	}
	if got[0][0] != "ace" || got[0][1] != "ace.gitea.database.main" || !strings.HasSuffix(got[0][2], "w…") {
		t.Errorf("fitRows cut %q; want only WHY cut, ending in …", got[0])
	}
	if same := fitRows(header, [][]string{{"a", "b", "c"}}, defaultWidth); same[0][2] != "c" {
		t.Errorf("fitRows changed a narrow table: %q", same[0])
	}
}

// TestTableKeepsKeysWhole cuts a table to a width narrower than its key:
// the key and ask id stay whole and the other cells are cut; the width is
// $COLUMNS, else 120 for an output that is not a terminal.
func TestTableKeepsKeysWhole(t *testing.T) {
	header := []string{"ASK", "KEY", "STATE", "WHY"}
	key := "node-0001.bookmarks-1.credential.postgres_database"
	ask := "retire-node-0001-bookmarks-1-credential-postgres_database-1796010250"
	rows := [][]string{{ask, key, "retiring (not asked yet)", strings.Repeat("w", 200)}}
	got := fitRows(header, rows, 60)
	if got[0][0] != ask || got[0][1] != key {
		t.Errorf("fitRows to 60 columns cut the ask or the key: %q", got[0])
	}
	if got[0][2] != "retiring …" || !strings.HasSuffix(got[0][3], "w…") || len([]rune(got[0][3])) != minColumn {
		t.Errorf("fitRows to 60 columns = %q; want STATE and WHY cut to %d columns", got[0], minColumn)
	}

	t.Setenv("COLUMNS", "")
	var b strings.Builder
	if n := tableWidth(&b); n != defaultWidth {
		t.Errorf("tableWidth of a buffer with no COLUMNS = %d; want %d", n, defaultWidth)
	}
	t.Setenv("COLUMNS", "200")
	if n := tableWidth(&b); n != 200 {
		t.Errorf("tableWidth with COLUMNS=200 = %d; want 200", n)
	}
	if err := writeTable(&b, header, rows, false); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n"); len([]rune(lines[1])) != 200 {
		t.Errorf("a table written with COLUMNS=200 is %d columns wide; want 200:\n%s", len([]rune(lines[1])), b.String())
	}
}

// TestTableKeepsProvidersWhole cuts the asks table to 120 columns and a
// provisions table to 80: a provider (its module, or module@node) stays
// whole, as the key, ask id and node do, and the headline, options and
// why are cut instead.
func TestTableKeepsProvidersWhole(t *testing.T) {
	t.Parallel()
	ask := "retire-shanks-woodpecker-forge-account-1796011200"
	asksHeader := []string{"ASK", "HEADLINE", "KEY", "PROVIDER", "NODE", "EXPIRES", "OPTIONS"}
	got := fitRows(asksHeader, [][]string{{ask, "Remove woodpecker's forge-account access?", "shanks.woodpecker.forge-account",
		"route-proxy", "control", "2026-12-07T04:00:00Z", "yes (Remove), no (Keep)"}}, defaultWidth)
	if got[0][0] != ask || got[0][2] != "shanks.woodpecker.forge-account" || got[0][3] != "route-proxy" || got[0][4] != "control" {
		t.Errorf("asks table fit to %d columns = %q; want the ask, key, provider route-proxy and node whole", defaultWidth, got[0])
	}
	if !strings.HasSuffix(got[0][1], "…") {
		t.Errorf("asks table fit to %d columns = %q; want the headline cut", defaultWidth, got[0])
	}

	header := []string{"NODE", "KEY", "STATE", "FOR", "PROVIDER", "WHY"}
	rows := [][]string{
		{"shanks", "shanks.immich.cache", "provided", "3h", "redis@control", "-"},
		{"shanks", "shanks.immich.route", "provided", "3h", "route-proxy@control", "-"},
		{"shanks", "shanks.immich.credential", "asked", "3h", "mesh-vault@control", "waits for mesh-vault on control to answer"},
	}
	got = fitRows(header, rows, 80)
	for i, r := range got {
		if r[4] != rows[i][4] || r[1] != rows[i][1] {
			t.Errorf("provisions table fit to 80 columns: row %q; want key %s and provider %s whole", r, rows[i][1], rows[i][4])
		}
	}
	if w := got[2][5]; !strings.HasSuffix(w, "…") || len([]rune(w)) != 80-(6+24+8+3+19+2*5) {
		t.Errorf("provisions table fit to 80 columns: why %q; want it cut to the %d columns left", w, 80-(6+24+8+3+19+2*5))
	}
}

// TestStateOf checks that get shows a kept key (the operator's no, by
// whom and when) apart from a retiring key not answered.
func TestStateOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		p    mesh.Provision
		want string
	}{
		{mesh.Provision{State: mesh.Asked}, "asked"},
		{mesh.Provision{State: mesh.Retiring}, "retiring (not asked yet)"},
		{mesh.Provision{State: mesh.Retiring, Ask: "a1"}, "retiring (asked)"},
		{mesh.Provision{State: mesh.Retiring, Ask: "a1", Warrant: &mesh.Warrant{Ask: "a1", Option: "no", By: mesh.Identity{Who: "operator"}, At: at}},
			"kept (no by operator 2026-11-30 03:00Z)"},
		{mesh.Provision{State: mesh.Retiring, Ask: "a1", Warrant: &mesh.Warrant{Ask: "a1", Option: "yes", By: mesh.Identity{Who: "ana"}, At: at}},
			"retiring (yes by ana 2026-11-30 03:00Z)"},
	} {
		if got := stateOf(tc.p); got != tc.want {
			t.Errorf("stateOf(%+v) = %q; want %q", tc.p, got, tc.want)
		}
	}
}
