package vault

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
)

// planCases are plan values as the vault may meet them in
// mesh-provisioner_plans, with the secrets the whole decode
// (jsonhead.Unmarshal: names matched exactly) decodes of them.
var planCases = []struct {
	name  string
	value string
}{
	{"the seat's plan", `{"node":"ace","module":"gitea","fp":"7d66b1","manifest":"sha256:3f53","dirs":[{"name":"state","unknown":"program"}],"ports":[{"name":"http"}],"secrets":["secret-key","admin-password"],"config":["domain"],"contributes":[],"provisions":[{"provision":"database","local":"","provider":"control","provider-module":"postgres","credential":"own"}]}`},
	{"no secrets", `{"node":"ace","module":"gitea","secrets":[]}`},
	{"secrets null", `{"secrets":null}`},
	{"no secrets field", `{"node":"ace"}`},
	{"an escaped secret", `{"secrets":["a\u002db"]}`},
	{"secrets in another case", `{"Secrets":["x"]}`},
	{"secrets in another case beside them", `{"SECRETS":["x"],"secrets":["y"]}`},
	{"secrets in another case, the plan cut short", `{"Secrets":["x"],`},
	{"secrets escaped", `{"secr\u0065ts":["x"]}`},
	{"secrets given twice", `{"secrets":["x"],"secrets":["y"]}`},
	{"a secret that is not a string", `{"secrets":[1]}`},
	{"secrets not a list", `{"secrets":"x"}`},
	{"cut short", `{"secrets":["x"],`},
	{"text after the object", `{"secrets":["x"]} x`},
	{"not an object", `["secrets"]`},
	{"invalid UTF-8 elsewhere", "{\"node\":\"\xff\",\"secrets\":[\"x\"]}"},
}

// TestPlanSecretsAsJSONWould reads each plan's secrets and checks them,
// and whether it decodes, against the whole decode; a name in another
// case names no secrets.
func TestPlanSecretsAsJSONWould(t *testing.T) {
	var r planReader
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) {
			sameAsJSON(t, &r, []byte(c.value))
		})
	}
	for value, want := range map[string][]string{`{"Secrets":["x"]}`: nil, `{"SECRETS":["x"],"secrets":["y"]}`: {"y"}} {
		if got, err := r.secrets([]byte(value)); err != nil || !slices.Equal(got, want) {
			t.Errorf("secrets(%s) = %q, %v; want %q (names are exact)", value, got, err, want)
		}
	}
}

func sameAsJSON(t *testing.T, r *planReader, value []byte) {
	t.Helper()
	got, err := r.secrets(value)
	var p struct {
		Secrets []string `json:"secrets"`
	}
	werr := jsonhead.Unmarshal(value, &p)
	if (err == nil) != (werr == nil) || !slices.Equal(got, p.Secrets) {
		t.Fatalf("secrets(%q) = %q, %v; the whole decode decodes %q, %v", value, got, err, p.Secrets, werr)
	}
}

// FuzzPlanSecrets checks that the secrets read of any value are those the
// whole decode decodes, and that it decodes when they are read.
func FuzzPlanSecrets(f *testing.F) {
	for _, c := range planCases {
		f.Add([]byte(c.value))
	}
	var r planReader
	f.Fuzz(func(t *testing.T, value []byte) { sameAsJSON(t, &r, value) })
}

// BenchmarkPlanSecrets reads the secrets of a plan as the seat writes it,
// and, as before, decodes them with encoding/json.
func BenchmarkPlanSecrets(b *testing.B) {
	value := []byte(planCases[0].value)
	var r planReader
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s, err := r.secrets(value); err != nil || len(s) != 2 {
				b.Fatal(s, err)
			}
		}
	})
	b.Run("encoding/json (before)", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p struct {
				Secrets []string `json:"secrets"`
			}
			if err := json.Unmarshal(value, &p); err != nil || len(p.Secrets) != 2 {
				b.Fatal(p, err)
			}
		}
	})
}
