package jsonhead

import (
	"slices"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestFolds(t *testing.T) {
	names := [][]byte{[]byte("state"), []byte("depends-on")}
	for quoted, want := range map[string]bool{
		`"State"`:        true,
		`"DEPENDS-ON"`:   true,
		`"st\u0061te"`:   true,  // escaped
		`"ſtate"`:        true,  // long s folds to s
		`"stat"`:         false, // another length
		`"reason"`:       false,
		`"st\u0061tes"`:  false,
		`"\ud800state"`:  true, // an escape that does not unquote: left to encoding/json
		`"depends_on"`:   false,
		`"provisioning"`: false,
		`"dependsâ€‘on"`: false,
	} {
		if got := Folds([]byte(quoted), names...); got != want {
			t.Errorf("Folds(%s) = %v, want %v", quoted, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	var r Reader
	for value, want := range map[string][]string{
		`null`:            nil,
		`[]`:              {},
		`["a","b\u0063"]`: {"a", "bc"},
		`["x.y.z","w"]`:   {"x.y.z", "w"},
		`[null]`:          {"error"},
		`"a"`:             {"error"},
		`[1]`:             {"error"},
	} {
		var got []string
		err := r.Read([]byte(value), func(dec *jsontext.Decoder) (err error) {
			got, err = Names(dec)
			return err
		})
		if slices.Equal(want, []string{"error"}) {
			if err == nil {
				t.Errorf("Names(%s) = %q, want an error", value, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("Names(%s) = %q, %v; want %q", value, got, err, want)
		}
	}
}

// TestUnmarshal decodes values whose names are spelled exactly, escaped,
// in another case and twice: only a name that is the field's name once
// unescaped is the field's (encoding/json would match the others too).
func TestUnmarshal(t *testing.T) {
	type ref struct {
		Module string `json:"module"`
		Node   string `json:"node"`
	}
	type value struct {
		Provider  ref      `json:"provider"`
		DependsOn []string `json:"depends-on"`
	}
	for _, c := range []struct {
		in   string
		want value
	}{
		{`{"provider":{"module":"p","node":"n"}}`, value{Provider: ref{"p", "n"}}},
		{`{"provider":{"MODULE":"p","node":"n"}}`, value{Provider: ref{"", "n"}}},
		{`{"Provider":{"module":"p","node":"n"}}`, value{}},
		{`{"provid\u0065r":{"module":"p"}}`, value{Provider: ref{Module: "p"}}},
		{`{"provider":{"module":"p"},"provider":{"node":"n"}}`, value{Provider: ref{"p", "n"}}},
		{`{"Depends-On":["a"],"depends-on":["b"]}`, value{DependsOn: []string{"b"}}},
		{"{\"\u017fomething\":1,\"depends-on\":[]}", value{DependsOn: []string{}}},
	} {
		var got value
		if err := Unmarshal([]byte(c.in), &got); err != nil || got.Provider != c.want.Provider || !slices.Equal(got.DependsOn, c.want.DependsOn) {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{`{"provider":{"MODULE":"p"},"at":5`, `{"provider":"p"}`, `{"provider":{}} x`} {
		var got value
		if err := Unmarshal([]byte(in), &got); err == nil {
			t.Errorf("Unmarshal(%s) = %+v; want an error", in, got)
		}
	}
}
