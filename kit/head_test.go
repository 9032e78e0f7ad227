package kit

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// headCases are values of provisions as a provider's kit may meet them in
// mesh-provisioner_provisions: as the seat writes them, and odd or forged.
// want is the head read, or nil when the value is decoded whole by the
// kit instead (not plain, or naming the reader's provider, shelf on
// control).
var headCases = []struct {
	name  string
	value string
	want  *head
}{
	{"the seat's asked, depending on a credential",
		`{"provision":"database","local":"","consumer":{"module":"keycloak","node":"control"},"provider":{"module":"postgres","node":"control"},"state":"asked","why":"asked of postgres on control; waits for its entry in postgres_bound","depends-on":["control.keycloak.credential.postgres_database"],"at":"2026-12-01T05:25:12.856591144Z"}`,
		&head{provider: mesh.Ref{Module: "postgres", Node: "control"}, state: mesh.Asked, dependsOn: []string{"control.keycloak.credential.postgres_database"}}},
	{"no names depended on",
		`{"provider":{"module":"p","node":"n"},"depends-on":[]}`,
		&head{provider: mesh.Ref{Module: "p", Node: "n"}, dependsOn: []string{}}},
	{"escaped names depended on",
		`{"provider":{"module":"p","node":"n"},"depends-on":[ "a\u002eb" , "c" ]}`,
		&head{provider: mesh.Ref{Module: "p", Node: "n"}, dependsOn: []string{"a.b", "c"}}},
	{"a surrogate pair escaped in a name depended on", `{"depends-on":["a\ud83d\ude00b"]}`, &head{dependsOn: []string{"a\U0001F600b"}}},
	{"the seat's provided credential, with its reference",
		`{"provision":"credential","local":"postgres_database","consumer":{"module":"keycloak","node":"control"},"provider":{"module":"mesh-vault","node":"control"},"state":"provided","reference":{"id":"control.keycloak.credential.postgres_database","generation":3},"at":"2026-12-01T05:25:08.853449773Z"}`,
		&head{provider: mesh.Ref{Module: "mesh-vault", Node: "control"}, state: mesh.Provided, reference: &mesh.Reference{ID: "control.keycloak.credential.postgres_database", Generation: 3}}},
	{"spaces, fields in another order, a state not in the spec",
		` { "state" : "thinking" , "provider" : { "node" : "n1" , "module" : "redis" } , "depends-on" : null , "reference" : null } `,
		&head{provider: mesh.Ref{Module: "redis", Node: "n1"}, state: "thinking"}},
	{"a provider named inside another field is not the provision's",
		`{"provider":{"module":"postgres","node":"control"},"warrant":{"ask":"a","provider":{"module":"shelf","node":"control"}},"x":{"provider":{"module":"shelf","node":"control"}},"state":"retiring"}`,
		&head{provider: mesh.Ref{Module: "postgres", Node: "control"}, state: mesh.Retiring}},
	{"a field the kit does not read need not decode",
		`{"provider":{"module":"route-proxy","node":"control"},"state":"asked","at":5,"why":["x"]}`,
		&head{provider: mesh.Ref{Module: "route-proxy", Node: "control"}, state: mesh.Asked}},
	{"no provider", `{"state":"asked"}`, &head{state: mesh.Asked}},
	{"an escaped state", `{"provider":{"module":"p","node":"n"},"state":"aske\u0064"}`, &head{provider: mesh.Ref{Module: "p", Node: "n"}, state: mesh.Asked}},
	{"a reference's names in another case are none of its names", `{"reference":{"ID":"x","Generation":2}}`, &head{reference: &mesh.Reference{}}},

	{"the reader's provider", `{"provider":{"module":"shelf","node":"control"},"state":"asked","at":5}`, nil},
	{"the reader's provider, then another", `{"provider":{"module":"shelf","node":"control"},"provider":{"module":"postgres","node":"control"}}`, nil},
	{"the provider's name in another case", `{"Provider":{"module":"shelf","node":"control"},"state":"asked"}`, nil},
	{"the provider's module in another case", `{"provider":{"MODULE":"shelf","node":"control"},"state":"asked"}`, nil},
	{"the provider's node escaped", `{"provider":{"module":"shelf","n\u006fde":"control"}}`, nil},
	{"the state's name with a long s (folds to s)", "{\"\u017ftate\":\"asked\"}", nil},
	{"the provider's name escaped", `{"provid\u0065r":{"module":"shelf","node":"control"}}`, nil},
	{"the provider given twice", `{"provider":{"module":"postgres","node":"control"},"provider":{"module":"shelf","node":"control"}}`, nil},
	{"depends-on given twice in another case", `{"depends-on":[],"Depends-On":["a"]}`, nil},
	{"a provider that is not an object", `{"provider":"shelf"}`, nil},
	{"a state that is not a string", `{"provider":{"module":"p","node":"n"},"state":7}`, nil},
	{"a reference whose generation is not a whole number", `{"reference":{"id":"x","generation":1.5}}`, nil},
	{"depends-on that is not a list of names", `{"depends-on":[1]}`, nil},
	{"depends-on naming null", `{"depends-on":["a",null]}`, nil},
	{"depends-on that is not a list", `{"depends-on":"a"}`, nil},
	{"a lone surrogate escaped in a name depended on", `{"depends-on":["\ud800"]}`, nil},
	{"cut short", `{"provision":"shelf","provider":{"module":"shelf","node":"control"},`, nil},
	{"text after the object", `{"provider":{"module":"p","node":"n"}} {}`, nil},
	{"not an object", `["provider"]`, nil},
	{"null", `null`, nil},
	{"empty", ``, nil},
	{"invalid UTF-8 in a skipped string", "{\"why\":\"\xff\",\"provider\":{\"module\":\"p\",\"node\":\"n\"}}", nil},
}

// TestHeadReadsAsJSONWould reads each value's head and checks it against
// what the kit's whole decode (jsonhead.Unmarshal: encoding/json's, names
// matched exactly) decodes of it, and that a value not plain is said so.
func TestHeadReadsAsJSONWould(t *testing.T) {
	r := headReader{self: mesh.Ref{Module: "shelf", Node: "control"}}
	for _, c := range headCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := r.read([]byte(c.value))
			if c.want == nil {
				if !errors.Is(err, errNotPlain) && err != errSelf {
					t.Fatalf("read(%s) = %+v, %v; want errNotPlain or errSelf", c.value, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("read(%s) = %v; want %+v", c.value, err, *c.want)
			}
			if !sameHead(got, *c.want) {
				t.Errorf("read(%s) = %+v (reference %+v); want %+v (reference %+v)", c.value, got, got.reference, *c.want, c.want.reference)
			}
			sameAsJSON(t, []byte(c.value), got)
		})
	}
}

// sameHead reports whether a and b read the same (the references by
// value; a list of no names is not none).
func sameHead(a, b head) bool {
	return a.provider == b.provider && a.state == b.state &&
		(a.dependsOn == nil) == (b.dependsOn == nil) && slices.Equal(a.dependsOn, b.dependsOn) &&
		(a.reference == nil) == (b.reference == nil) && (a.reference == nil || *a.reference == *b.reference)
}

// sameAsJSON checks that h is what the kit's whole decode decodes of
// value's four fields (it must decode them).
func sameAsJSON(t *testing.T, value []byte, h head) {
	t.Helper()
	var p struct {
		Provider  mesh.Ref        `json:"provider"`
		State     mesh.State      `json:"state"`
		Reference *mesh.Reference `json:"reference"`
		DependsOn []string        `json:"depends-on"`
	}
	if err := jsonhead.Unmarshal(value, &p); err != nil {
		t.Fatalf("read(%q) = %+v, but the whole decode does not decode it: %v", value, h, err)
	}
	if !sameHead(h, head{provider: p.Provider, state: p.State, reference: p.Reference, dependsOn: p.DependsOn}) {
		t.Fatalf("read(%q) = %+v; the whole decode decodes %+v", value, h, p)
	}
}

// FuzzHead checks that a head read is never other than what the whole
// decode decodes: the kit must never take a value for another provider's
// that its whole decode would give to this one.
func FuzzHead(f *testing.F) {
	for _, c := range headCases {
		f.Add([]byte(c.value))
	}
	r := headReader{self: mesh.Ref{Module: "shelf", Node: "control"}}
	f.Fuzz(func(t *testing.T, value []byte) {
		h, err := r.read(value)
		if err != nil {
			if !errors.Is(err, errNotPlain) && err != errSelf {
				t.Fatalf("read(%q) = %v; want errSelf or an error wrapping errNotPlain", value, err)
			}
			return
		}
		sameAsJSON(t, value, h)
	})
}

// TestHeadAllocations holds the head of a plain value of another provider
// to the allocations of what it keeps: its depends-on (a list and its
// one name) and no more; and the head of the provider's own value to none.
func TestHeadAllocations(t *testing.T) {
	var r headReader
	value := []byte(headCases[0].value)
	if _, err := r.read(value); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { r.read(value) }); n != 2 {
		t.Errorf("read of a plain value of another provider: %v allocations; want 2", n)
	}
	own := []byte(`{"provision":"credential","local":"postgres_database","consumer":{"module":"keycloak","node":"control"},"provider":{"module":"shelf","node":"control"},"state":"asked"}`)
	r.self = mesh.Ref{Module: "shelf", Node: "control"}
	if _, err := r.read(own); err != errSelf {
		t.Fatalf("read(%s) = %v; want errSelf", own, err)
	}
	if n := testing.AllocsPerRun(100, func() { r.read(own) }); n != 0 {
		t.Errorf("read of the provider's own value: %v allocations; want none", n)
	}
}

// BenchmarkHead reads the head of a value as the seat writes it: another
// provider's (read whole) and the reader's own (read up to its provider,
// then decoded whole by the kit); and, as before the head, another's
// decoded whole.
func BenchmarkHead(b *testing.B) {
	r := headReader{self: mesh.Ref{Module: "mesh-vault", Node: "control"}}
	another := []byte(`{"provision":"database","local":"","consumer":{"module":"keycloak","node":"control"},"provider":{"module":"postgres","node":"control"},"state":"asked","why":"asked of postgres on control; waits for its entry in postgres_bound","depends-on":["control.keycloak.credential.postgres_database"],"at":"2026-12-01T05:25:12.856591144Z"}`)
	own := []byte(`{"provision":"credential","local":"postgres_database","consumer":{"module":"keycloak","node":"control"},"provider":{"module":"mesh-vault","node":"control"},"state":"asked","why":"asked of mesh-vault on control; waits for its entry in mesh-vault_bound","at":"2026-12-01T05:25:08.853449773Z"}`)
	if _, err := r.read(another); err != nil {
		b.Fatalf("read(another's) = %v", err)
	}
	if _, err := r.read(own); err != errSelf {
		b.Fatalf("read(own) = %v; want errSelf", err)
	}
	b.Run("another's", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.read(another)
		}
	})
	b.Run("own, then decoded whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.read(own)
			var p mesh.Provision
			if err := json.Unmarshal(own, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name  string
		value []byte
	}{{"another's decoded whole (before)", another}, {"own decoded whole (before)", own}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var p mesh.Provision
				if err := json.Unmarshal(c.value, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
