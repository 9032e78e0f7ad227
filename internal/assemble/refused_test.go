package assemble

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestOwnWritesSaysARoutineRefusalOnce: a refused write of the node's own
// applied or collect key is said at info level once per subject (debug
// after); a refused write of another node's key, or any other refusal, at
// error level.
func TestOwnWritesSaysARoutineRefusalOnce(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	refused := ownWrites(log, "client-dell", "dell", true)
	violation := func(subject string) error {
		return errors.New(`nats: permissions violation: Permissions Violation for Publish to "` + subject + `"`)
	}
	refused(violation("$KV.mesh-provisioner_applied.dell.prometheus"))
	refused(violation("$KV.mesh-provisioner_applied.dell.prometheus"))
	refused(violation("$KV.mesh-provisioner_collect.dell.environment.prometheus"))
	refused(violation("$KV.mesh-provisioner_applied.dellx.prometheus"))
	refused(violation("$KV.mesh-provisioner_applied.ace.prometheus"))
	refused(violation("$KV.mesh-provisioner_plans.dell.prometheus"))
	refused(errors.New(`nats: permissions violation: Permissions Violation for Subscription to "mesh-vault.secret.x"`))
	var levels []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		i := strings.Index(line, "level=")
		levels = append(levels, strings.Fields(line[i:])[0])
	}
	want := []string{"level=INFO", "level=DEBUG", "level=INFO", "level=ERROR", "level=ERROR", "level=ERROR", "level=ERROR"}
	if strings.Join(levels, " ") != strings.Join(want, " ") {
		t.Errorf("levels said %v; want %v:\n%s", levels, want, out.String())
	}
}

// TestOwnWritesSaysWhoIssuesTheUser: a client whose process issues the
// mesh's users (up) says its refused own write waits for its user issued
// anew; a standalone client (nobody issues it) says the operator runs auth
// gen --push and hands the node its new file.
func TestOwnWritesSaysWhoIssuesTheUser(t *testing.T) {
	violation := errors.New(`nats: permissions violation: Permissions Violation for Publish to "$KV.mesh-provisioner_collect.web1.shell=3Azsh=3Anormal.shopfront"`)
	for _, tc := range []struct {
		issued bool
		want   string
	}{
		{true, `msg="assemble: a write of the node's own record refused: its user is being issued anew for its new plan; the apply is tried again"`},
		{false, `msg="assemble: a write of the node's own record refused: its credentials do not allow this key of its new plan: ` +
			`the operator runs \"auth gen -f MESHFILE -o DIR --push URL\" and hands this node its new credentials file; the apply is tried again"`},
	} {
		var out bytes.Buffer
		ownWrites(slog.New(slog.NewTextHandler(&out, nil)), "client-web1", "web1", tc.issued)(violation)
		if !strings.Contains(out.String(), "level=INFO "+tc.want) {
			t.Errorf("issued %v said %s; want %s", tc.issued, out.String(), tc.want)
		}
	}
}
