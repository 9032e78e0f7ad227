package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Plans of the homelab mesh (examples/homelab.yaml) on control and ace, at
// the wanted builds, written by hand as the seat writes them.
func homelabPlans() []mesh.Plan {
	nodeTools := func(node string) mesh.Plan {
		return mesh.Plan{Node: node, Module: "node-tools", Fingerprint: "0d0d01", Manifest: "sha256:0d",
			Contributes: []mesh.Contribution{
				{Collection: "shell:zsh:normal", Item: "export PATH=$PATH:/opt/node-tools/bin"},
				{Collection: "environment", Item: "EDITOR=vi"},
			}}
	}
	return []mesh.Plan{
		{Node: "control", Module: "mesh-vault", Fingerprint: "9c0d51", Manifest: "sha256:9c",
			Dirs: []mesh.Dir{{Name: "state", Unknown: "program"}}},
		{Node: "control", Module: "postgres", Fingerprint: "3f2a91", Manifest: "sha256:3f",
			Dirs: []mesh.Dir{{Name: "state", Unknown: "program"}}, Ports: []mesh.Port{{Name: "pg"}},
			Secrets: []string{"superuser-password"}},
		{Node: "control", Module: "redis", Fingerprint: "71be02", Manifest: "sha256:71",
			Dirs: []mesh.Dir{{Name: "state"}}, Ports: []mesh.Port{{Name: "resp"}}},
		{Node: "control", Module: "keycloak", Fingerprint: "a11ce5", Manifest: "sha256:a1",
			Ports: []mesh.Port{{Name: "http"}}, Secrets: []string{"admin-password"}, Config: []string{"domain"},
			Provisions: []mesh.PlanProvision{{Provision: "database", Provider: "control", ProviderModule: "postgres", Credential: "own"}}},
		{Node: "control", Module: "route-proxy", Fingerprint: "5e77aa", Manifest: "sha256:5e",
			Ports: []mesh.Port{{Name: "http"}, {Name: "https"}}, Dirs: []mesh.Dir{{Name: "certs", Unknown: "program"}},
			Config: []string{"domain"}},
		nodeTools("control"),
		{Node: "ace", Module: "gitea", Fingerprint: "b7c100", Manifest: "sha256:b7",
			Dirs:    []mesh.Dir{{Name: "state", Unknown: "program"}, {Name: "repos", Unknown: "program"}, {Name: "tmp", Unknown: "sweep"}},
			Ports:   []mesh.Port{{Name: "http"}, {Name: "ssh"}},
			Secrets: []string{"secret-key"}, Config: []string{"domain"},
			Provisions: []mesh.PlanProvision{
				{Provision: "database", Local: "main", Provider: "control", ProviderModule: "postgres", Credential: "own"},
				{Provision: "oidc-client", Provider: "control", ProviderModule: "keycloak", Credential: "own"},
				{Provision: "route", Provider: "control", ProviderModule: "route-proxy"},
			}},
		{Node: "ace", Module: "vaultwarden", Fingerprint: "4a4a4a", Manifest: "sha256:4a",
			Dirs: []mesh.Dir{{Name: "state", Unknown: "program"}}, Ports: []mesh.Port{{Name: "http"}},
			Secrets: []string{"admin-token"}},
		nodeTools("ace"),
	}
}

// putPlan writes p at <node>.<module> of the plans bucket.
func putPlan(t *testing.T, ctx context.Context, kv jetstream.KeyValue, p mesh.Plan) {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, mesh.NodeModule{Node: p.Node, Module: p.Module}.String(), b); err != nil {
		t.Fatal(err)
	}
}

func plansBucket(t *testing.T, ctx context.Context, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	kv, err := bus.Bucket(ctx, js, mesh.PlansBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
