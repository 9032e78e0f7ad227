package kit

import (
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestWriterIsBusyUntilAWritesOutcomeIsTaken: a write is out of flight
// once its ack came (or failed), but the kit tries a failed write's key
// again only once done has taken its outcome. Until done returns the
// writer is busy, so that Kit.Idle never finds idle a kit about to
// provide a key again (a test would then wait for an entry the retry
// replaces).
func TestWriterIsBusyUntilAWritesOutcomeIsTaken(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s, "shelf")
	ctx := bustest.Context(t)
	c := bus.Follow(ctx, js, mesh.BoundBucket("shelf"), bus.Options{Create: true, Writes: true})
	<-c.Ready()
	telling := make(chan struct{})
	told := make(chan struct{})
	w := newWriter(js, c, 8, func(*write, error) {
		telling <- struct{}{}
		<-told
	})
	stop := make(chan struct{})
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		w.run(ctx, stop)
	}()
	defer func() {
		close(stop)
		<-ran
	}()

	const key = "ace.gitea.shelf"
	w.put(key, []byte(`{"state":"provided"}`), "\x00")
	select {
	case <-telling:
	case <-time.After(20 * time.Second):
		t.Fatal("the writer did not tell the outcome of its write within 20 s")
	}
	if !w.busy() {
		t.Errorf("the writer is not busy while done takes the outcome of its write of %s", key)
	}
	close(told)
	bustest.WaitFor(t, 0, "the writer to be idle once done has taken the outcome", func() bool { return !w.busy() })
}
