package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// keySeeds are the keys of the table tests: each shape, and keys out of
// shape.
var keySeeds = []string{
	"ace.gitea.database.main", "ace.gitea.cache", "control.redis.credential.redis_cache",
	"ace.gitea.credential.postgres_database_main", "lab.web", "lab.Bad=20Name=3Ax",
	"control.shell=3Azsh=3Anormal.node-tools", "want.ace.gitea", "gitea.b7c100", "ace",
	"ace.gitea", "Ace.gitea.db", "need.ace.gitea", "lab.a=ZZ", "ace.gi=ZZ.x", "a.b.c", "", ".", "a..b", "a.b.",
}

// FuzzParseKeys checks every key parser: a key that parses gives itself
// back (String), and a key that does not is a *KeyError wrapping
// ErrKeyShape; none panics.
func FuzzParseKeys(f *testing.F) {
	for _, k := range keySeeds {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		check := func(parser string, s interface{ String() string }, err error) {
			t.Helper()
			if err != nil {
				var ke *KeyError
				if !errors.Is(err, ErrKeyShape) || !errors.As(err, &ke) || ke.Key != key {
					t.Fatalf("%s(%q) = %v; want a *KeyError of the key wrapping ErrKeyShape", parser, key, err)
				}
				return
			}
			if got := s.String(); got != key {
				t.Fatalf("%s(%q) = %+v, whose String is %q", parser, key, s, got)
			}
		}
		nm, err := ParseNodeModule(key)
		check("ParseNodeModule", nm, err)
		wk, err := ParseWantKey(key)
		check("ParseWantKey", wk, err)
		bk, err := ParseBuildKey(key)
		check("ParseBuildKey", bk, err)
		hk, err := ParseHaveKey(key)
		check("ParseHaveKey", hk, err)
		pk, err := ParseProvisionKey(key)
		check("ParseProvisionKey", pk, err)
		ck, err := ParseCollectKey(key)
		check("ParseCollectKey", ck, err)
		rk, err := ParseRefusalKey(key)
		check("ParseRefusalKey", rk, err)
	})
}

// manifestSeeds are manifests of the spec and the tests, valid and not.
var manifestSeeds = []string{
	`{"module":"postgres","provides":[{"name":"database","credential":"own","answered-by":"helper"}],"state":["bound"],"reads":["mesh-provisioner.plans"],"dirs":[{"name":"state"}],"ports":[{"name":"pg"}]}`,
	`{"module":"gitea","requires":[{"provision":"database","from":"postgres","local":"main","on":"control"},{"provision":"cache","from":"redis"}],"provides":[{"name":"forge-account","credential":"own","answered-by":"helper"},{"name":"gitea-read","credential":"shared"}],"state":[{"name":"bound"},"repos"],"dirs":[{"name":"tmp","unknown":"sweep"}],"secrets":["secret-key"],"config":["domain"],"contributes":[{"collection":"shell:zsh:normal","item":"alias g=gitea"}]}`,
	`{"module":"redis","provides":[{"name":"cache","credential":"shared"}]}`,
	`{"module":"ghost","dirs":[{"name":"state"}]}`,
	`{"module":"bad","ports":"http"}`,
	`{"module":"Bad_Name"}`,
	`{"module":"a","provides":[{"name":"x","answered-by":"human"}]}`,
	`{"module":"a","state":[["bound"]]}`,
	`{"module":"a"} {"module":"b"}`,
	`{"module":"a","colour":"red"}`,
	`null`, `[]`, `{}`, ``,
}

// FuzzParseManifest checks that decoding a manifest never panics, and that
// a manifest it accepts, written again as JSON, is accepted and written the
// same.
func FuzzParseManifest(f *testing.F) {
	for _, s := range manifestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		m, err := ParseManifest(text)
		if err != nil {
			return
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal(ParseManifest(%q)): %v", text, err)
		}
		again, err := ParseManifest(b)
		if err != nil {
			t.Fatalf("ParseManifest(%s) of an accepted manifest written again: %v", b, err)
		}
		// Compared as written: an empty list and none are the same manifest.
		if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
			t.Fatalf("ParseManifest(%q) written %s; read back and written %s", text, b, b2)
		}
		m.KeepsEntries()
		m.ReadsPlans()
		for _, o := range m.Provides {
			m.ByEntries(o)
		}
	})
}

// valueSeeds are bus values of the spec and the tests, well-formed and not.
var valueSeeds = []string{
	`{"modules":[{"module":"gitea"},{"module":"node-tools"}]}`,
	`{"fp":"b7c100","removed":false}`,
	`{"manifest":"sha256:00"}`,
	`{"json":"{\"module\":\"ghost\"}"}`,
	`{"module":"gitea","fp":"b7c100","manifest":"sha256:00","at":"2026-11-30T12:00:00Z"}`,
	`{"phase":"running","health":"ok","fp":"71be02","detail":"out of memory"}`,
	`{"state":"provided","vault-name":"v/vw","generation":1}`,
	`{"refused":"disk full"}`, `{"waits":"an operator must approve the size"}`,
	`{"state":"pending","why":"working on it"}`, `{"state": provided`,
	`{"provision":"database","local":"main","consumer":{"module":"gitea","node":"ace"},"provider":{"module":"postgres","node":"control"},"state":"retiring","why":"x","depends-on":["ace.gitea.credential.postgres_database_main"],"reference":{"id":"v","generation":3},"ask":"retire-ace-gitea-database-main-1","warrant":{"ask":"retire-ace-gitea-database-main-1","option":"yes","by":{"who":"alice","kind":"nats-user","identity":"alice"},"at":"2026-11-30T12:00:00+01:00"},"at":"2026-11-30T12:00:00.5Z"}`,
	`{"node":"lab","module":"web","why":"its want names build w9","since":"2026-11-30T12:00:00Z"}`,
	`{"holder":"seat-1","since":"2026-11-30T12:00:00Z"}`,
	`{"state":"answered","ask":{"id":"retire-x-1","headline":"Remove?","who":"operator","options":[{"id":"yes","label":"Remove","level":"approve","binds":"sha256:00"}]},"warrant":{"asker":"mesh-provisioner","ask":"retire-x-1","outcome":"chosen","option":"yes","binds":"sha256:00","by":{"who":"alice"},"at":"2026-11-30T12:00:00Z"}}`,
	`{"kind":"bound","module":"<provider>","bucket":"<provider>_bound","key":"<node>.<module>.<provision>[.<local>]","about":"x"}`,
	`{"fp":"b7c100","dirs":{"state":"/srv/ace/gitea/state"},"ports":{"http":3000},"swept":["a"],"at":"2026-11-30T12:00:00Z"}`,
	`{"generation":1e400}`, `{"at":"10000-01-01T00:00:00Z"}`, `{"name":"\xff"}`, `null`, `[]`, `""`, ``,
}

// FuzzDecodeValues decodes each input as every bus value of package mesh:
// none panics, and a value that decodes, written again, reads back to the
// same text (so that a value the seat takes in and writes out is stable).
func FuzzDecodeValues(f *testing.F) {
	for _, s := range valueSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip[Placement](t, data)
		roundTrip[Want](t, data)
		roundTrip[ModuleRecord](t, data)
		roundTrip[ManifestRecord](t, data)
		roundTrip[Build](t, data)
		roundTrip[Have](t, data)
		roundTrip[Plan](t, data)
		roundTrip[Refusal](t, data)
		roundTrip[Lease](t, data)
		roundTrip[Ask](t, data)
		roundTrip[Record](t, data)
		roundTrip[Applied](t, data)
		roundTrip[CollectItem](t, data)
		roundTrip[Provision](t, data)
		if e, ok := roundTrip[Entry](t, data); ok {
			e.Outcome()
		}
		if a, ok := roundTrip[RegistryAnswer](t, data); ok {
			_ = a.Check()
		}
	})
}

// roundTrip decodes data as a T; when it decodes, the value written as
// JSON must read back to a value written the same.
func roundTrip[T any](t *testing.T, data []byte) (T, bool) {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%T decoded from %q does not encode: %v", v, data, err)
	}
	var w T
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatalf("%T written as %s does not decode: %v", v, b, err)
	}
	if b2, _ := json.Marshal(w); !bytes.Equal(b, b2) {
		t.Fatalf("%T decoded from %q: written %s, read back and written %s", v, data, b, b2)
	}
	return v, true
}
