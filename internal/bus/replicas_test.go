package bus_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// syncBuffer is a log sink safe for the connection's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func replicasOf(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket string) int {
	t.Helper()
	str, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatalf("stream of %s: %v", bucket, err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatalf("stream info of %s: %v", bucket, err)
	}
	return info.Config.Replicas
}

// On a three-server cluster, a connection dialled with Replicas 3 makes
// every bucket R3 (Bucket, LeaseBucket, a copy that creates its bucket),
// uses a bucket that exists with another count as it is and says so once,
// and every conflict of a conditional write on an R3 bucket (Create,
// Update, an expected-last-subject-sequence publish, synchronous or
// asynchronous, and DeleteAt) is one bus.IsConflict and errors.Is report.
func TestClusterReplicasAndConflicts(t *testing.T) {
	t.Parallel()
	c := bustest.Cluster(t)
	ctx, cancel := context.WithTimeout(bustest.Context(t), 30*time.Second)
	defer cancel()
	var said syncBuffer
	nc, js, err := bus.Connect(bus.Dial{URL: c.URL(), Name: "r3", Replicas: 3,
		Log: slog.New(slog.NewTextHandler(&said, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := bus.ReplicasOf(js); got != 3 {
		t.Fatalf("ReplicasOf = %d; want 3", got)
	}

	kv, err := bus.Bucket(ctx, js, "test_r3", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.LeaseBucket(ctx, js, "test_r3_lease", time.Second); err != nil {
		t.Fatal(err)
	}
	cp := bus.Follow(ctx, js, "test_r3_copy", bus.Options{Create: true})
	<-cp.Ready()
	for _, b := range []string{"test_r3", "test_r3_lease", "test_r3_copy"} {
		if got := replicasOf(t, ctx, js, b); got != 3 {
			t.Errorf("replicas of %s = %d; want 3", b, got)
		}
	}

	// A bucket made R1 by another is used as it is, said once.
	nc1, js1, err := bus.Connect(bus.Dial{URL: c.URL(), Name: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc1.Close()
	if _, err := bus.Bucket(ctx, js1, "test_r1", 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := bus.Bucket(ctx, js, "test_r1", 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := replicasOf(t, ctx, js, "test_r1"); got != 1 {
		t.Errorf("replicas of test_r1 = %d; want 1 (used as it is)", got)
	}
	if n := strings.Count(said.String(), "bucket=test_r1 replicas=1 wanted=3"); n != 1 {
		t.Errorf("the R1 bucket was said %d times; want once. Log:\n%s", n, said.String())
	}

	rev, err := kv.Create(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Create(ctx, "k", []byte("2"))
	if !errors.Is(err, jetstream.ErrKeyExists) || !bus.IsConflict(err) {
		t.Errorf("Create of an existing key = %v; want ErrKeyExists and IsConflict", err)
	}
	t.Logf("Create of an existing key on R3: error code %d", code(err))
	_, err = kv.Update(ctx, "k", []byte("2"), rev+100)
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || !bus.IsConflict(err) {
		t.Errorf("Update at a wrong revision = %v; want ErrKeyRevisionMismatch and IsConflict", err)
	}
	t.Logf("Update at a wrong revision on R3: error code %d", code(err))
	_, err = js.Publish(ctx, "$KV.test_r3.k", []byte("3"), jetstream.WithExpectLastSequencePerSubject(rev+100))
	if !bus.IsConflict(err) {
		t.Errorf("publish at a wrong expected sequence = %v; want IsConflict", err)
	}
	t.Logf("publish at a wrong expected last subject sequence on R3: error code %d", code(err))
	ack, err := js.PublishAsync("$KV.test_r3.k", []byte("4"), jetstream.WithExpectLastSequencePerSubject(rev+100))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ack.Ok():
		t.Error("an asynchronous publish at a wrong expected sequence was taken")
	case err := <-ack.Err():
		if !bus.IsConflict(err) {
			t.Errorf("asynchronous publish at a wrong expected sequence = %v; want IsConflict", err)
		}
		t.Logf("asynchronous publish at a wrong expected sequence on R3: error code %d", code(err))
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if _, err := bus.DeleteAt(ctx, js, "test_r3", "k", rev+100); !bus.IsConflict(err) {
		t.Errorf("DeleteAt a wrong revision = %v; want IsConflict", err)
	} else {
		t.Logf("DeleteAt a wrong revision on R3: error code %d", code(err))
	}
	if _, err := bus.DeleteAt(ctx, js, "test_r3", "k", rev); err != nil {
		t.Errorf("DeleteAt the right revision = %v; want nil", err)
	}
}

// code returns the JetStream API error code err carries, or 0.
func code(err error) jetstream.ErrorCode {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}

// Connect refuses a replica count a bucket cannot have.
func TestConnectRefusesBadReplicas(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 6} {
		if _, _, err := bus.Connect(bus.Dial{URL: "nats://127.0.0.1:1", Name: "x", Replicas: n}); err == nil ||
			!strings.Contains(err.Error(), "1 to 5") {
			t.Errorf("Connect with Replicas %d = %v; want an error saying 1 to 5", n, err)
		}
	}
}
