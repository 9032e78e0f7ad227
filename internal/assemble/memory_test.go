package assemble

import "testing"

func TestMemoryBudgetGrowsWithTheMesh(t *testing.T) {
	for _, c := range []struct {
		nodes int
		want  uint64
	}{
		{0, 256 << 20},
		{10, 256 << 20},
		{1000, 256 << 20}, // 250 MiB of budget: the floor rules
		{1024, 256 << 20},
		{3000, 750 << 20},
		{10000, 2500 << 20},
	} {
		if got := MemoryBudget(c.nodes); got != c.want {
			t.Errorf("MemoryBudget(%d) = %d MiB, want %d MiB", c.nodes, got>>20, c.want>>20)
		}
	}
}
