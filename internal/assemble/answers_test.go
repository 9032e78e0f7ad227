package assemble

import (
	"fmt"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// answerCases are provision values with what followAnswers keeps of each:
// the provider's module and whether the provision is answered (it decodes
// and is not retiring).
var answerCases = []struct {
	name     string
	value    string
	module   string
	answered bool
}{
	{"provided", `{"provision":"credential","local":"db","consumer":{"module":"mail","node":"n1"},"provider":{"module":"mesh-vault","node":"control"},"state":"provided","reference":{"id":"x","generation":1},"at":"2026-12-01T02:44:51Z"}`, "mesh-vault", true},
	{"asked", `{"provider":{"module":"postgres","node":"db"},"state":"asked","why":"waiting"}`, "postgres", true},
	{"retiring", `{"provider":{"module":"mesh-vault","node":"control"},"state":"retiring"}`, "", false},
	{"state after a retiring one", `{"state":"retiring","provider":{"module":"mesh-vault"},"state":"provided"}`, "mesh-vault", true},
	{"no provider", `{"state":"asked"}`, "", true},
	{"null provider and state", `{"provider":null,"state":null}`, "", true},
	{"module escaped", `{"provider":{"module":"mesh\u002dvault"},"state":"provided"}`, "mesh-vault", true},
	{"state escaped", `{"provider":{"module":"mesh-vault"},"state":"retir\u0069ng"}`, "", false},
	{"names in another case are no fields", `{"Provider":{"module":"mesh-vault"},"STATE":"retiring"}`, "", true},
	{"name escaped", `{"provid\u0065r":{"module":"mesh-vault"},"state":"provided"}`, "mesh-vault", true},
	{"module in another case is no module", `{"provider":{"MODULE":"postgres"},"state":"provided"}`, "", true},
	{"module in another case beside it", `{"provider":{"MODULE":"postgres","module":"mesh-vault"},"state":"provided"}`, "mesh-vault", true},
	{"state not a string", `{"provider":{"module":"mesh-vault"},"state":5}`, "", false},
	{"provider not an object", `{"provider":"mesh-vault","state":"provided"}`, "", false},
	{"module not a string", `{"provider":{"module":7},"state":"provided"}`, "", false},
	{"another field of another type", `{"provider":{"module":"mesh-vault"},"state":"provided","reference":"x"}`, "mesh-vault", true},
	{"text after the object", `{"provider":{"module":"mesh-vault"},"state":"provided"} {}`, "", false},
	{"cut short", `{"provider":{"module":"mesh-vault"},"state":"provi`, "", false},
	{"not an object", `["provider"]`, "", false},
	{"null", `null`, "", true},
	{"bytes that are not UTF-8", "{\"provider\":{\"module\":\"mesh-vault\"},\"state\":\"provided\",\"why\":\"\xff\"}", "mesh-vault", true},
	{"empty", ``, "", false},
	// Found by review: the provider is a mesh.Ref (a node that is not a
	// string does not decode), and a name given twice is merged (null
	// leaves a field as it was, {} leaves the provider's module).
	{"node not a string", `{"provider":{"module":"mesh-vault","node":5},"state":"provided"}`, "", false},
	{"node an object", `{"provider":{"module":"mesh-vault","node":{}},"state":"provided"}`, "", false},
	{"retiring, then a null state", `{"state":"retiring","state":null,"provider":{"module":"mesh-vault","node":"control"}}`, "", false},
	{"a provider, then a null one", `{"provider":{"module":"mesh-vault","node":"control"},"provider":null,"state":"provided"}`, "mesh-vault", true},
	{"a provider, then an empty one", `{"provider":{"module":"mesh-vault","node":"control"},"provider":{},"state":"provided"}`, "mesh-vault", true},
}

// TestAnswerReader checks the reader against the table and against the
// whole decode (decodeAnswer) on every case.
func TestAnswerReader(t *testing.T) {
	var r answerReader
	for _, c := range answerCases {
		t.Run(c.name, func(t *testing.T) {
			module, answered := r.read([]byte(c.value))
			if module != c.module || answered != c.answered {
				t.Errorf("read(%s) = %q, %v; want %q, %v", c.value, module, answered, c.module, c.answered)
			}
			if m, a := decodeAnswer([]byte(c.value)); m != module || a != answered {
				t.Errorf("read(%s) = %q, %v; the whole decode gives %q, %v", c.value, module, answered, m, a)
			}
		})
	}
}

// TestAnswerReaderAllocations checks that a plain provision is read
// without an allocation once its provider was met (encoding/json makes
// several per value).
func TestAnswerReaderAllocations(t *testing.T) {
	var r answerReader
	value := []byte(answerCases[0].value)
	r.read(value)
	if n := testing.AllocsPerRun(100, func() { r.read(value) }); n != 0 {
		t.Errorf("read of a plain provision made %v allocations; want 0", n)
	}
}

// FuzzAnswerReader checks that the reader gives what the whole decode
// gives for any value, and never panics.
func FuzzAnswerReader(f *testing.F) {
	for _, c := range answerCases {
		f.Add([]byte(c.value))
	}
	var r answerReader
	f.Fuzz(func(t *testing.T, value []byte) {
		module, answered := r.read(value)
		if m, a := decodeAnswer(value); m != module || a != answered {
			t.Errorf("read(%q) = %q, %v; the whole decode gives %q, %v", value, module, answered, m, a)
		}
	})
}

// TestFollowAnswersReadsNamesExactly writes a key of mesh-vault answered by
// its entry, and a key whose provider reads {"MODULE":"mesh-vault",..}
// with no entry: names are exact (spec 2), so the second is no key of
// mesh-vault's (its kit never answers it) and up does not wait for it.
// encoding/json would read it as mesh-vault's, and up --once would wait
// for an entry that never comes.
func TestFollowAnswersReadsNamesExactly(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "test")
	ctx := bustest.Context(t)
	provisions, err := bus.Bucket(ctx, js, mesh.ProvisionsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	bound, err := bus.Bucket(ctx, js, mesh.BoundBucket(mesh.VaultModule), 0)
	if err != nil {
		t.Fatal(err)
	}
	const genuine, forged = "ace.gitea.credential.postgres_database", "ace.gitea.database"
	for key, value := range map[string]string{
		genuine: `{"provision":"credential","local":"postgres_database","consumer":{"module":"gitea","node":"ace"},"provider":{"module":"mesh-vault","node":"control"},"state":"asked"}`,
		forged:  `{"provision":"database","consumer":{"module":"gitea","node":"ace"},"provider":{"MODULE":"mesh-vault","node":"control"},"state":"asked"}`,
	} {
		if _, err := provisions.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bound.Put(ctx, genuine, []byte(`{"state":"provided","vault-name":"`+genuine+`","generation":1}`)); err != nil {
		t.Fatal(err)
	}
	answered, _, err := followAnswers(ctx, ctx, js, []string{mesh.VaultModule})
	if err != nil {
		t.Fatal(err)
	}
	if !answered() {
		t.Errorf("answered() = false; want true (%s has its entry, %s is no key of mesh-vault's)", genuine, forged)
	}
	// The genuine key without its entry is waited for.
	if err := bound.Delete(ctx, genuine); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "answered() to be false once "+genuine+"'s entry is gone", func() bool { return !answered() })
}

// BenchmarkAnswerReader reads provisions as the seat writes them: one
// value again and again (its provider met before), and values of a provider
// placed on 10 000 nodes, each node's provider a value of its own, read in
// turn (as [Settle.Quiet]'s copy of the provisions reads them at a start).
func BenchmarkAnswerReader(b *testing.B) {
	one := []byte(answerCases[0].value)
	many := make([][]byte, 10000)
	for i := range many {
		many[i] = fmt.Appendf(nil, `{"provision":"cache","consumer":{"module":"app","node":"node-%05d"},"provider":{"module":"redis","node":"node-%05d"},"state":"provided","reference":{"id":"x","generation":1},"at":"2026-12-01T02:44:51Z"}`, i, i)
	}
	var r answerReader
	if m, a := r.read(one); m != "mesh-vault" || !a {
		b.Fatalf("read(%s) = %q, %v; want mesh-vault, true", one, m, a)
	}
	if m, a := r.read(many[1]); m != "redis" || !a {
		b.Fatalf("read(%s) = %q, %v; want redis, true", many[1], m, a)
	}
	b.Run("one value", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.read(one)
		}
	})
	b.Run("a provider on 10000 nodes", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.read(many[i%len(many)])
			i++
		}
	})
}
