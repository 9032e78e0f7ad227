package state

import (
	"fmt"
	"testing"
)

// TestFewKeepsItsMembers adds and removes members of a few in several
// orders and checks its sorted members and its map after each step: one
// member inline with no map, the map only for members beyond the first,
// and the entry gone with its last member.
func TestFewKeepsItsMembers(t *testing.T) {
	m := map[string]few{}
	steps := []struct {
		add, remove string
		want        string
		maps        int // members held in the map beside the inline one
	}{
		{add: "b", want: "[b]"},
		{add: "b", want: "[b]"},
		{add: "a", want: "[a b]", maps: 1},
		{add: "c", want: "[a b c]", maps: 2},
		{remove: "b", want: "[a c]", maps: 1},
		{remove: "x", want: "[a c]", maps: 1},
		{remove: "a", want: "[c]"},
		{remove: "c", want: "[]"},
	}
	for i, st := range steps {
		if st.add != "" {
			addToFew(m, "k", st.add)
		} else {
			removeFromFew(m, "k", st.remove)
		}
		f, ok := m["k"]
		if got := fmt.Sprint(f.sorted()); got != st.want || len(f.more) != st.maps || (f.more != nil && len(f.more) == 0) {
			t.Errorf("step %d (+%q -%q): members %s, map of %d (nil %v); want %s, map of %d", i, st.add, st.remove, got, len(f.more), f.more == nil, st.want, st.maps)
		}
		if ok != (st.want != "[]") {
			t.Errorf("step %d: entry held %v; want %v", i, ok, st.want != "[]")
		}
	}
}
