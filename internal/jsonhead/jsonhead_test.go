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
