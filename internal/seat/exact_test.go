package seat_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// logs is a log's text, written by the seat's goroutines and read by the
// test.
type logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// oddLogged waits until the seat has logged an odd change of key whose
// why contains gist.
func oddLogged(t *testing.T, l *logs, key, gist string) {
	t.Helper()
	bustest.WaitFor(t, 0, "the seat to log "+key+" as odd ("+gist+")", func() bool {
		for _, line := range strings.Split(l.String(), "\n") {
			if strings.Contains(line, "odd change") && strings.Contains(line, "key="+key) && strings.Contains(line, gist) {
				return true
			}
		}
		return false
	})
}

// A provision whose names are the spec's in another case is not the
// seat's own value (spec 2: field names are exact), even when, read with
// its names folded, it says what the seat would write: the seat says it
// and writes the key anew. encoding/json folded the names, so the seat
// took such a value as its own and left it.
func TestSeatRewritesAProvisionWhoseNamesDifferInCase(t *testing.T) {
	var l logs
	h := startWith(t, homelab(t), options{log: slog.New(slog.NewTextHandler(&l, nil))})
	const key = "ace.gitea.credential.gitea_gitea-read"
	e, err := h.kv(mesh.ProvisionsBucket).Get(h.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	own := string(e.Value())
	// The seat's value with every name upper-cased ("provision" ->
	// "PROVISION", "consumer":{"MODULE":..}).
	forged := own
	for _, name := range []string{"provision", "local", "consumer", "provider", "module", "node", "state", "why", "at"} {
		forged = strings.ReplaceAll(forged, `"`+name+`":`, `"`+strings.ToUpper(name)+`":`)
	}
	if forged == own || !strings.Contains(forged, `"PROVISION":`) {
		t.Fatalf("the seat's value %s is not as this test expects", own)
	}
	h.put(mesh.ProvisionsBucket, key, forged)
	oddLogged(t, &l, key, "names are exact")
	bustest.WaitFor(t, 0, key+" written anew by the seat", func() bool {
		e, err := h.kv(mesh.ProvisionsBucket).Get(h.ctx, key)
		return err == nil && strings.Contains(string(e.Value()), `"provision":"credential"`)
	})
	h.settle()
	if p, ok := h.provision(key); !ok || p.State != mesh.Asked || !strings.Contains(p.Why, noEntry) {
		t.Errorf("%s = %+v, %v; want asked, %s", key, p, ok, noEntry)
	}
}

// A provider's entry whose names are the spec's in another case says no
// state (its "STATE" is no name of an entry): the key stays asked, saying
// what the entry said (spec 5), and the seat says the odd value. It was
// read as provided.
func TestSeatReadsAnEntryWhoseNamesDifferInCaseAsNoState(t *testing.T) {
	var l logs
	h := startWith(t, homelab(t), options{log: slog.New(slog.NewTextHandler(&l, nil))})
	const key = "ace.gitea.credential.gitea_gitea-read"
	h.put(mesh.BoundBucket(mesh.VaultModule), key, `{"STATE":"provided","Vault-Name":"x","Generation":3}`)
	oddLogged(t, &l, key, `\"STATE\"`)
	h.settle()
	p := h.waitState(key, mesh.Asked, `the entry of mesh-vault says state "", which is not provided, failed or waits`)
	if p.Reference != nil {
		t.Errorf("%s has the reference %+v; want none", key, *p.Reference)
	}
	// The same entry with the spec's names is provided.
	h.put(mesh.BoundBucket(mesh.VaultModule), key, `{"state":"provided","vault-name":"x","generation":3}`)
	if p := h.waitState(key, mesh.Provided, ""); p.Reference == nil || *p.Reference != (mesh.Reference{ID: "x", Generation: 3}) {
		t.Errorf("%s provided with the reference %+v; want x, 3", key, p.Reference)
	}
}
