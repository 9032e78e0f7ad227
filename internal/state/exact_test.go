package state

import (
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// takeValues are one value of each kind the seat decodes on its hot path,
// as their writers write them (the seat's provision with a reference, a
// vault's entry, an engine's have, the assigner's want, the controller's
// placement, the builder's build).
var takeValues = []struct{ name, bucket, key, value string }{
	{"provision", mesh.ProvisionsBucket, "ace.gitea.credential.gitea_gitea-read",
		`{"provision":"credential","local":"gitea_gitea-read","consumer":{"module":"gitea","node":"ace"},` +
			`"provider":{"module":"mesh-vault","node":"control"},"state":"provided",` +
			`"reference":{"id":"ace.gitea.credential.gitea_gitea-read","generation":1},"at":"2026-12-01T09:41:36Z"}`},
	{"entry", "mesh-vault_bound", "ace.gitea.credential.gitea_gitea-read",
		`{"state":"provided","vault-name":"ace.gitea.credential.gitea_gitea-read","generation":1}`},
	{"have", mesh.HaveBucket, "ace.gitea", `{"phase":"running","health":"ok","fp":"f00d4e11a2b3"}`},
	{"want", mesh.WantsBucket, "want.ace.gitea", `{"fp":"f00d4e11a2b3","removed":false}`},
	{"placement", mesh.PlacementBucket, "ace", `{"modules":[{"module":"gitea"},{"module":"postgres"},{"module":"mesh-vault"}]}`},
	{"build", mesh.BuildsBucket, "gitea.f00d4e11a2b3",
		`{"module":"gitea","fp":"f00d4e11a2b3","manifest":"sha256:00ff","at":"2026-12-01T09:41:36Z"}`},
}

// BenchmarkTake times Mesh.Take of one change of each kind the seat
// decodes (the same key again, a new revision each time), after checking
// that each takes as it should (no odd).
func BenchmarkTake(b *testing.B) {
	for _, v := range takeValues {
		b.Run(v.name, func(b *testing.B) {
			m := New()
			ch := bus.Change{Bucket: v.bucket, Key: v.key, Value: []byte(v.value), Revision: 1}
			if t := m.Take(ch); t.Odd != nil {
				b.Fatalf("Take(%s) is odd: %v", v.value, t.Odd)
			}
			b.ReportAllocs()
			for b.Loop() {
				ch.Revision++
				m.Take(ch)
			}
		})
	}
}
