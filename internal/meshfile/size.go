package meshfile

import (
	"fmt"
	"sort"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// DefaultMaxPayload is the largest value, in bytes, that a key of the bus
// may hold when the server does not say otherwise: NATS's default max
// payload, 1 MiB. [Parse] checks every value against it; [Apply] checks
// against the max payload of the server it is connected to.
const DefaultMaxPayload = 1 << 20

// MaxName is the longest name (node, module, provision, local, fp), in
// bytes, that a mesh file may use. Keys join up to six names, and a key is
// part of a NATS subject, whose protocol line the server caps at 4 KiB.
const MaxName = 128

// lines remembers where in the file each key's value comes from (bucket ->
// key -> line), so that a value too large is said at its line.
type lines map[string]map[string]int

func (l lines) at(bucket, key string, line int) {
	if l[bucket] == nil {
		l[bucket] = map[string]int{}
	}
	if _, ok := l[bucket][key]; !ok {
		l[bucket][key] = line
	}
}

// Oversize returns one [Error] per value of f larger than limit bytes, each
// at the line the value comes from and naming the bucket, the key, its size
// and the limit, sorted by line. A limit of 0 or less means
// [DefaultMaxPayload]. Values are measured as they are written: a manifest
// as its record in mesh-indexer_manifests (its JSON text quoted in JSON), a
// build with its time. Oversize does no I/O.
func (f *File) Oversize(limit int) []Error {
	if limit <= 0 {
		limit = DefaultMaxPayload
	}
	var out []Error
	check := func(bucket, key string, n int) {
		if n > limit {
			out = append(out, Error{Line: f.lines[bucket][key], Msg: fmt.Sprintf(
				"the value of %s in %s is %d bytes, over the bus's max payload of %d bytes", key, bucket, n, limit)})
		}
	}
	for bucket, keys := range f.Keys() {
		for key, v := range keys {
			check(bucket, key, len(v))
		}
	}
	// A build's time takes its longest RFC 3339 form.
	at := time.Date(2000, 1, 1, 0, 0, 0, 999999999, time.FixedZone("", -(23*3600+59*60)))
	for _, b := range f.Builds() {
		b.At = at
		key := mesh.BuildKey{Module: b.Module, Fingerprint: b.Fingerprint}.String()
		check(mesh.BuildsBucket, key, len(marshal(b)))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Line != out[j].Line {
			return out[i].Line < out[j].Line
		}
		return out[i].Msg < out[j].Msg
	})
	return out
}
