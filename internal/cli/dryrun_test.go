package cli

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/dryrun"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestApplyDryRunIsExact dry-runs a file that drops vaultwarden and adds
// a build wanted by nobody, checks what it says, applies the file and
// finds exactly the keys and states the dry run said.
func TestApplyDryRunIsExact(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	startRouter(t, s)
	st := startSeat(t, s, homelabFile)
	path := withoutVaultwarden(t)
	_, js := bustest.Connect(t, s, "test")
	plansBefore := keysOf(t, s, mesh.PlansBucket)

	out, errOut, err := run(t, "apply", "--dry-run", "-f", path, "-o", "json", "--nats", s.URL())
	if err != nil {
		t.Fatalf("apply --dry-run: %v (%s)", err, errOut)
	}
	var rep dryrun.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("apply --dry-run -o json printed %s: %v", out, err)
	}
	if got := keysOf(t, s, mesh.PlansBucket); !slices.Equal(got, plansBefore) {
		t.Fatalf("the dry run changed the plans: %v; were %v", got, plansBefore)
	}
	var removed, retiring bool
	for _, c := range rep.Changes {
		switch {
		case c.Node == "ace" && c.Bucket == mesh.PlansBucket && c.Key == "ace.vaultwarden":
			removed = c.Op == dryrun.Remove
		case c.Key == "ace.vaultwarden.database":
			retiring = c.Node == "ace" && c.Op == dryrun.Update && c.State == mesh.Retiring && c.Ask &&
				strings.Contains(c.Why, "no build wanted or placed on ace requires database of postgres")
		}
	}
	if !removed || !retiring {
		t.Fatalf("dry run = %+v; want ace.vaultwarden's plan removed and its database retiring with its why, asked", rep.Changes)
	}

	table, _, err := run(t, "apply", "--dry-run", "-f", path, "--nats", s.URL())
	if err != nil || !strings.Contains(table, "plan removed") ||
		!strings.Contains(table, "provision retiring, ask raised") {
		t.Errorf("apply --dry-run printed:\n%s (%v)", table, err)
	}
	// Its first line counts the file's keys and, apart, the seat's keys
	// the rows below it list.
	writes, removes := 0, 0
	for _, c := range rep.Changes {
		if c.Op == dryrun.Remove {
			removes++
		} else {
			writes++
		}
	}
	seatSays := fmt.Sprintf("; the seat would write %s and remove %d (below); nothing written", countKeys(writes), removes)
	if first, _, _ := strings.Cut(table, "\n"); !strings.Contains(first, "the file writes ") || !strings.HasSuffix(first, seatSays) {
		t.Errorf("apply --dry-run's first line = %q; want the file's keys, then %q", first, seatSays)
	}

	if _, _, err := run(t, "apply", "-f", path, "--nats", s.URL()); err != nil {
		t.Fatal(err)
	}
	waitSeat(t, s, st)
	// The report's Plans, Refusals and After are of the keys the run
	// wrote; every key the dry run found is in the buckets as it said.
	plans := keysOf(t, s, mesh.PlansBucket)
	if slices.Contains(plans, "ace.vaultwarden") {
		t.Errorf("plans after apply = %v; the dry run said ace.vaultwarden is removed", plans)
	}
	for _, k := range rep.Plans {
		if !slices.Contains(plans, k) {
			t.Errorf("plan %s is not there after apply; the dry run said it is kept", k)
		}
	}
	if got := keysOf(t, s, mesh.RefusedBucket); len(got) != 0 || len(rep.Refusals) != 0 {
		t.Errorf("refusals after apply = %v; dry run said %v", got, rep.Refusals)
	}
	states := map[string]mesh.State{}
	c := bus.Follow(ctx, js, mesh.ProvisionsBucket, bus.Options{})
	<-c.Ready()
	c.Range(func(k string, it bus.Item) bool {
		var p mesh.Provision
		_ = json.Unmarshal(it.Value, &p)
		states[k] = p.State
		return true
	})
	if len(rep.After) != 3 {
		t.Errorf("the dry run wrote %d provisions (%v); want vaultwarden's 3", len(rep.After), rep.After)
	}
	for k, s := range rep.After {
		if states[k] != s {
			t.Errorf("provision %s is %q after apply; dry run said %q", k, states[k], s)
		}
	}
}

// keysOf reads the keys of bucket, sorted.
func keysOf(t *testing.T, s *bus.Server, bucket string) []string {
	t.Helper()
	_, js := bustest.Connect(t, s, "keys")
	c := bus.Follow(bustest.Context(t), js, bucket, bus.Options{Create: true})
	<-c.Ready()
	var keys []string
	c.Range(func(k string, _ bus.Item) bool {
		keys = append(keys, k)
		return true
	})
	sort.Strings(keys)
	return keys
}

func TestCountKeys(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0 keys", 1: "1 key", 2: "2 keys"} {
		if got := countKeys(n); got != want {
			t.Errorf("countKeys(%d) = %q; want %q", n, got, want)
		}
	}
}
