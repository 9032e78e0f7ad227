package compose

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// fill sets every string of v (a struct, a field added later included) to
// a new value made by name, and every slice to n elements filled the same
// way (nil when n < 0).
func fill(v reflect.Value, n int, name func() string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(name())
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n, name)
		}
	case reflect.Slice:
		if n < 0 {
			v.SetZero()
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fill(v.Index(i), n, name)
		}
	default:
		panic(fmt.Sprintf("fill: a %s in mesh.Plan: teach appendPlan and fill about it", v.Kind()))
	}
}

// appendPlan gives the bytes of json.Marshal for every plan whose strings
// need no escaping (with slices nil, empty or full, and strings empty), and
// declines the others, leaving the buffer as it was.
func TestAppendPlanIsMarshal(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		value func(i int) string
		plain bool
	}{
		{"nil slices", -1, func(i int) string { return fmt.Sprintf("v%d", i) }, true},
		{"empty slices", 0, func(i int) string { return fmt.Sprintf("v%d", i) }, true},
		{"full", 2, func(i int) string { return fmt.Sprintf("name-%d.x_y:z/~%%!#$()*+;=?@[]^`{|}'\x7f", i) }, true},
		{"empty strings", 2, func(int) string { return "" }, true},
		{"dir unknown omitted", 2, func(i int) string { return map[bool]string{true: "", false: "v"}[i%3 == 0] }, true},
		{"quote", 2, func(i int) string { return map[bool]string{true: `a"b`, false: "v"}[i == 7] }, false},
		{"backslash", 2, func(i int) string { return map[bool]string{true: `a\b`, false: "v"}[i == 11] }, false},
		{"html", 1, func(i int) string { return map[bool]string{true: "<a&b>", false: "v"}[i == 3] }, false},
		{"control", 1, func(i int) string { return map[bool]string{true: "a\nb", false: "v"}[i == 5] }, false},
		{"not ascii", 1, func(i int) string { return map[bool]string{true: "café\u2028", false: "v"}[i == 9] }, false},
		{"not utf-8", 1, func(i int) string { return map[bool]string{true: "a\xffb", false: "v"}[i == 1] }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p mesh.Plan
			i := 0
			fill(reflect.ValueOf(&p).Elem(), c.n, func() string { i++; return c.value(i) })
			want, err := json.Marshal(&p)
			if err != nil {
				t.Fatal(err)
			}
			prefix := []byte("kept")
			got, ok := appendPlan(prefix, &p)
			if ok != c.plain {
				t.Fatalf("appendPlan(%+v) reports %v; want %v", p, ok, c.plain)
			}
			if !ok {
				if string(got) != "kept" {
					t.Errorf("appendPlan declined but left %q; want %q", got, "kept")
				}
				return
			}
			if string(got) != "kept"+string(want) {
				t.Errorf("appendPlan(%+v) =\n%s\nwant (json.Marshal)\n%s", p, got[len(prefix):], want)
			}
		})
	}
}

// Whatever string a plan holds, appendPlan gives json.Marshal's bytes or
// declines.
func FuzzAppendPlan(f *testing.F) {
	for _, s := range []string{"", "gitea", "a\"b", "<", "é", "\x00", "\u2028", "\xff"} {
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		var p mesh.Plan
		fill(reflect.ValueOf(&p).Elem(), n%3, func() string { return s })
		want, _ := json.Marshal(&p)
		got, ok := appendPlan(nil, &p)
		if ok && string(got) != string(want) {
			t.Errorf("appendPlan = %s; want %s", got, want)
		}
		if !ok && len(got) != 0 {
			t.Errorf("appendPlan declined but appended %q", got)
		}
	})
}
