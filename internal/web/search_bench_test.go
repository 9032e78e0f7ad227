package web

import (
	"context"
	"testing"
)

// BenchmarkSearch makes the view of searches over a page of 10,000 nodes
// (40,000 keys, see searchPage): a node's word, a word that starts a part
// of a name, a node's keys of a state, and a state of many keys (its
// answer is 10,000 keys: it costs those). A search reads what its
// narrowest term holds, not the mesh.
func BenchmarkSearch(b *testing.B) {
	p := searchPage(b, 10_000)
	for _, q := range []string{"node-0042", "0042", "node-0042 state:waits", "key:node-0042.app-a", "fail", "state:waits"} {
		b.Run(q, func(b *testing.B) {
			for b.Loop() {
				if _, err := p.view(context.Background(), query{Q: q, Pages: map[string]int{}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
