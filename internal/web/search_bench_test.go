package web

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// BenchmarkSearch makes the view of a search over 300,000 keys (10,000
// nodes of 30 keys, every third waits).
func BenchmarkSearch(b *testing.B) {
	p := newPage(context.Background(), Config{})
	for i := range 10_000 {
		for j := range 30 {
			st := mesh.Provided
			if j%3 == 0 {
				st = mesh.Waits
			}
			node := fmt.Sprintf("node-%04d", i)
			v, _ := json.Marshal(mesh.Provision{Provision: "database", Consumer: mesh.Ref{Module: fmt.Sprintf("app-%d", j), Node: node},
				Provider: mesh.Ref{Module: "postgres", Node: "control"}, State: st})
			p.take(bus.Change{Bucket: mesh.ProvisionsBucket, Key: fmt.Sprintf("%s.app-%d.database", node, j), Value: v})
		}
	}
	for _, q := range []string{"state:waits", "node-0042", "node-0042 state:waits"} {
		b.Run(q, func(b *testing.B) {
			for b.Loop() {
				if _, err := p.view(context.Background(), query{Q: q, Pages: map[string]int{}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
