package seat

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// fillValue sets every field of v, a field added later included: strings
// by name, integers to n, times to at, pointers to a new filled value (nil
// when n < 0), slices to n filled elements (nil when n < 0).
func fillValue(v reflect.Value, n int, at time.Time, name func() string) {
	switch {
	case v.Type() == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(at))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(name())
	case reflect.Int64:
		v.SetInt(int64(n) * 1_000_003)
	case reflect.Struct:
		for i := range v.NumField() {
			fillValue(v.Field(i), n, at, name)
		}
	case reflect.Pointer:
		if n < 0 {
			v.SetZero()
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fillValue(v.Elem(), n, at, name)
	case reflect.Slice:
		if n < 0 {
			v.SetZero()
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fillValue(v.Index(i), n, at, name)
		}
	default:
		panic(fmt.Sprintf("fillValue: a %s in %s: teach encodeProvision, encodeRefusal and fillValue about it", v.Kind(), v.Type()))
	}
}

// checkEncode compares enc(v) with json.Marshal(v): the same bytes, or
// both an error.
func checkEncode[T any](t *testing.T, v *T, enc func(*T) ([]byte, error)) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, err := enc(v)
	if (err != nil) != (wantErr != nil) || string(got) != string(want) {
		t.Errorf("encode(%+v) = %s, %v;\nwant (json.Marshal) %s, %v", *v, got, err, want, wantErr)
	}
}

// encodeProvision and encodeRefusal give the bytes of json.Marshal for
// values with every field set (lists nil, empty or full; pointers nil or
// set), strings that need escaping (quotes, backslashes, HTML, control
// bytes, U+2028, bytes not UTF-8) or none, and times JSON writes (UTC with
// and without nanoseconds, zones) or cannot (years past 9999, offsets of a
// day).
func TestEncodeIsMarshal(t *testing.T) {
	plainAt := time.Date(2026, 12, 1, 5, 40, 12, 345678901, time.UTC)
	for _, c := range []struct {
		name  string
		n     int
		at    time.Time
		value func(i int) string
	}{
		{"nil lists and pointers", -1, plainAt, func(i int) string { return fmt.Sprintf("v%d", i) }},
		{"empty lists", 0, plainAt, func(i int) string { return fmt.Sprintf("v%d", i) }},
		{"full", 2, plainAt, func(i int) string { return fmt.Sprintf("name-%d.x_y:z/~%%!#$()*+;=?@[]^`{|}'\x7f", i) }},
		{"empty strings", 2, plainAt, func(int) string { return "" }},
		{"some strings empty", 2, plainAt, func(i int) string { return map[bool]string{true: "", false: "v"}[i%3 == 0] }},
		{"quotes and backslashes", 1, plainAt, func(i int) string { return fmt.Sprintf(`w"a\i%d"`, i) }},
		{"html", 1, plainAt, func(i int) string { return fmt.Sprintf("<a&b%d>", i) }},
		{"control bytes", 1, plainAt, func(i int) string { return fmt.Sprintf("a\nb\tc\rd\be\ff\x00g\x1f%d", i) }},
		{"not ascii", 1, plainAt, func(i int) string { return fmt.Sprintf("café ✓ \u2028 \u2029 𝄞 %d", i) }},
		{"not utf-8", 1, plainAt, func(i int) string { return fmt.Sprintf("a\xffb\xc3%d\xe2\x80", i) }},
		{"whole seconds", 1, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), func(i int) string { return "v" }},
		{"zone", 1, time.Date(2026, 1, 2, 3, 4, 5, 60, time.FixedZone("x", -(5*3600+30*60))), func(i int) string { return "v" }},
		{"zone with seconds", 1, time.Date(2026, 1, 2, 3, 4, 5, 60, time.FixedZone("x", 3600+17)), func(i int) string { return "v" }},
		{"zero time", 1, time.Time{}, func(i int) string { return "v" }},
		{"year 10000", 1, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), func(i int) string { return "v" }},
		{"year -1", 1, time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), func(i int) string { return "v" }},
		{"offset of a day", 1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 24*3600)), func(i int) string { return "v" }},
		{"offset of 100 hours", 1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("x", -100*3600)), func(i int) string { return "v" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := 0
			name := func() string { i++; return c.value(i) }
			var p mesh.Provision
			fillValue(reflect.ValueOf(&p).Elem(), c.n, c.at, name)
			checkEncode(t, &p, encodeProvision)
			var r mesh.Refusal
			fillValue(reflect.ValueOf(&r).Elem(), c.n, c.at, name)
			checkEncode(t, &r, encodeRefusal)
		})
	}
}

// FuzzEncodeProvision compares encodeProvision and encodeRefusal with
// json.Marshal on any strings, times and generation, with and without a
// reference and a warrant.
func FuzzEncodeProvision(f *testing.F) {
	f.Add("database", "main", "waits for web1.app.credential.pg_database", "ask-1", int64(1764567612), int64(345678901), int64(0), int64(3), true, true)
	f.Add(`a"b\c`, "<&>", "\u2028\x00\xff", "", int64(0), int64(0), int64(-5*3600), int64(-1), false, true)
	f.Add("", "", "", "", int64(-62135596800), int64(-1), int64(3600+17), int64(1<<62), true, false)
	f.Add("café", "\t\n", "𝄞", "x", int64(253402300800), int64(0), int64(24*3600), int64(0), false, false)
	f.Fuzz(func(t *testing.T, s1, s2, why, ask string, sec, nsec, offset, generation int64, ref, warrant bool) {
		loc := time.UTC
		if offset != 0 {
			loc = time.FixedZone("z", int(offset%(200*3600)))
		}
		at := time.Unix(sec, nsec).In(loc)
		p := mesh.Provision{Provision: s1, Local: s2, Consumer: mesh.Ref{Module: s2, Node: s1}, Provider: mesh.Ref{Module: why, Node: ask},
			State: mesh.State(s1), Why: why, DependsOn: []string{s1, why}, Ask: ask, At: at}
		if ref {
			p.Reference = &mesh.Reference{ID: s2, Generation: generation}
		}
		if warrant {
			p.Warrant = &mesh.Warrant{Ask: ask, Option: s1, By: mesh.Identity{Who: why, Kind: s2, Identity: s1}, At: at.Add(time.Duration(generation))}
		}
		checkEncode(t, &p, encodeProvision)
		checkEncode(t, &mesh.Refusal{Node: s1, Module: s2, Why: why, Since: at}, encodeRefusal)
	})
}

// BenchmarkEncodeProvision encodes a provision as the seat writes most of
// them at a cold start (asked, with a why and a depends-on), by hand and
// with json.Marshal, after checking both give the same bytes.
func BenchmarkEncodeProvision(b *testing.B) {
	p := mesh.Provision{Provision: "database", Local: "main", Consumer: mesh.Ref{Module: "app-3", Node: "node-0042"},
		Provider: mesh.Ref{Module: "pg", Node: "db-01"}, State: mesh.Waits,
		Why:       `waits for node-0042.app-3.credential.pg_database_main, which is asked of mesh-vault on "vault"`,
		DependsOn: []string{"node-0042.app-3.credential.pg_database_main"}, At: time.Date(2026, 12, 1, 5, 40, 12, 345678901, time.UTC)}
	want, _ := json.Marshal(&p)
	if got, _ := encodeProvision(&p); string(got) != string(want) {
		b.Fatalf("encodeProvision = %s; want %s", got, want)
	}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodeProvision(&p)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(&p)
		}
	})
}
