package compose

import (
	"fmt"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The whys made with append say, byte for byte, what their fmt templates
// (as they were written before) say.
func TestAppendedWhysAreTheTemplates(t *testing.T) {
	p := mesh.Ref{Module: "postgres", Node: "control"}
	running := mesh.Have{Phase: mesh.PhaseRunning, Health: mesh.HealthDegraded, Fingerprint: "b1"}
	failed := mesh.Have{Phase: mesh.PhaseFailed, Health: mesh.HealthFailed, Detail: "exit 3"}
	for _, c := range []struct {
		got, want string
	}{
		{string(appendWhyNoEntry(nil, p, true)),
			fmt.Sprintf("asked of %s on %s; waits for its entry in %s", p.Module, p.Node, mesh.BoundBucket(p.Module))},
		{string(appendWhyNoEntry(nil, p, false)),
			fmt.Sprintf("asked of %s on %s; waits for its entry in %s", p.Module, p.Node, mesh.BoundBucket(p.Module)) +
				fmt.Sprintf("; %s does not read mesh-provisioner.plans, so its helper will never answer this key", p.Module)},
		{string(appendWhyEntryOutcome(nil, p, mesh.Failed, "disk full")),
			fmt.Sprintf("%s on %s says %s: %s", p.Module, p.Node, mesh.Failed, "disk full")},
		{string(appendWhyEntryOutcome(nil, p, mesh.Waits, "")),
			fmt.Sprintf("%s on %s says %s: %s", p.Module, p.Node, mesh.Waits, "it gave no why")},
		{string(appendWhyDependsOn(nil, "ace.gitea.credential.postgres_database_main", "", "")),
			fmt.Sprintf("waits for %s, which is not asked yet", "ace.gitea.credential.postgres_database_main")},
		{string(appendWhyDependsOn(nil, "k", mesh.Asked, "")),
			fmt.Sprintf("waits for %s, which is %s: %s", "k", mesh.Asked, "it gives no why")},
		{string(appendWhyDependsOn(nil, "k", mesh.Waits, "waits for x")),
			fmt.Sprintf("waits for %s, which is %s: %s", "k", mesh.Waits, "waits for x")},
		{string(appendWhyNoProvider(nil, "k", "no node runs vault")),
			fmt.Sprintf("waits for %s, which has no provider: %s", "k", "no node runs vault")},
		{string(appendWhyNotRunning(nil, p)),
			fmt.Sprintf("waits for %s on %s to run", p.Module, p.Node)},
		{string(appendWhyHaveFailed(nil, p, failed)),
			fmt.Sprintf("%s on %s is %s with health %s: %s", p.Module, p.Node, failed.Phase, failed.Health, "exit 3")},
		{string(appendWhyHaveFailed(nil, p, mesh.Have{Phase: mesh.PhaseRunning, Health: mesh.HealthFailed})),
			fmt.Sprintf("%s on %s is %s with health %s: %s", p.Module, p.Node, mesh.PhaseRunning, mesh.HealthFailed, "no detail given")},
		{string(appendWhyHaveNotReady(nil, p, running, "")),
			fmt.Sprintf("%s on %s is %s with health %s", p.Module, p.Node, running.Phase, running.Health)},
		{string(appendWhyHaveNotReady(nil, p, running, "b1")),
			fmt.Sprintf("%s on %s is %s with health %s", p.Module, p.Node, running.Phase, running.Health)},
		{string(appendWhyHaveNotReady(nil, p, running, "b2")),
			fmt.Sprintf("%s on %s is %s with health %s", p.Module, p.Node, running.Phase, running.Health) +
				fmt.Sprintf(", running build %s where its want names %s", running.Fingerprint, "b2")},
	} {
		if c.got != c.want {
			t.Errorf("appended why = %q; want %q", c.got, c.want)
		}
	}
}

// TestNoProviderOfReadsTheJudgesWhy reads a need's NoProvider back from
// the whys the judge writes with one (a key depending on a credential, the
// credential itself), and none from other whys of the same keys.
func TestNoProviderOfReadsTheJudgesWhy(t *testing.T) {
	ck := "n5.p3.credential.p3_route"
	vault := mesh.Ref{Module: mesh.VaultModule, Node: "n2"}
	several := problemSeveralVaults(ck, []string{"n2", "n3"})
	dependent := mesh.Provision{Provision: "route", DependsOn: []string{ck}}
	cred := mesh.Provision{Provision: mesh.CredentialProvision, Provider: vault}
	for _, c := range []struct {
		p    mesh.Provision
		why  string
		want string
	}{
		{dependent, string(appendWhyNoProvider(nil, ck, several)), several},
		{dependent, string(appendWhyNoProvider(nil, ck, problemNoVault(ck))), problemNoVault(ck)},
		{dependent, string(appendWhyDependsOn(nil, ck, mesh.Asked, string(appendWhyNoEntry(nil, vault, true)))), ""},
		{cred, string(appendWhyHasNoProvider(nil, vault, several)), several},
		{cred, string(appendWhyNoEntry(nil, vault, true)), ""},
		{mesh.Provision{Provision: "route"}, string(appendWhyNoProvider(nil, ck, several)), ""},
	} {
		c.p.Why = c.why
		if got := NoProviderOf(c.p); got != c.want {
			t.Errorf("NoProviderOf(%q) = %q; want %q", c.why, got, c.want)
		}
	}
}
