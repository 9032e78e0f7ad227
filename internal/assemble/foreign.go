package assemble

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// removeForeign makes the storage account hold the mesh's buckets only,
// on js (the seat's, which alone may make and remove streams): a stream
// that is none of them ("KV_<bucket>" of [access.Buckets] or of a
// provider's "<provider>_bound") is deleted, and a bucket's stream that
// captures subjects besides its keys ("$KV.<bucket>.>") is narrowed to
// them. Such a stream was made before only the seat made streams: one on a
// party's inbox keeps what is delivered there, one on a verb takes its
// requests. Each is said in log. It returns the names of the streams it
// removed or narrowed, and an error when the streams cannot be listed.
func removeForeign(ctx context.Context, js jetstream.JetStream, log *slog.Logger) ([]string, error) {
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("assemble: list the account's streams: %w", err)
	}
	var done []string
	for _, n := range all {
		bucket, isBucket := meshBucket(n)
		st, err := js.Stream(ctx, n)
		if err != nil {
			return done, fmt.Errorf("assemble: stream %s: %w", n, err)
		}
		sc := st.CachedInfo().Config
		own := []string{"$KV." + bucket + ".>"}
		if isBucket && slices.Equal(sc.Subjects, own) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if isBucket {
			was := sc.Subjects
			sc.Subjects = own
			_, err = js.UpdateStream(cctx, sc)
			if err == nil {
				log.Warn("assemble: a bucket's stream captured other subjects than its keys; narrowed to its keys",
					"stream", n, "subjects", strings.Join(was, " "))
			}
		} else {
			err = js.DeleteStream(cctx, n)
			if err == nil {
				log.Warn("assemble: a stream that is none of the mesh's buckets is removed (only the seat makes streams)",
					"stream", n, "subjects", strings.Join(sc.Subjects, " "), "messages", st.CachedInfo().State.Msgs)
			}
		}
		cancel()
		if err != nil {
			log.Error("assemble: a stream that captures subjects besides the mesh's keys stays", "stream", n,
				"subjects", strings.Join(sc.Subjects, " "), "err", err)
			continue
		}
		done = append(done, n)
	}
	return done, nil
}

// meshBucket returns the bucket of the stream named name when it is one
// of the mesh's: "KV_<bucket>" of a bucket of [access.Buckets] or of a
// provider's entries.
func meshBucket(name string) (string, bool) {
	b, ok := strings.CutPrefix(name, "KV_")
	if !ok {
		return "", false
	}
	if slices.Contains(access.Buckets(), b) || strings.HasSuffix(b, mesh.BoundBucket("")) && len(b) > len(mesh.BoundBucket("")) {
		return b, true
	}
	return "", false
}
