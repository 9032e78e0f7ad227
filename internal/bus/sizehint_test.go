package bus_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestSizeHintCountsKeysNotMessages checks the size a copy's maps are made
// at before its initial values, on a real bucket with a history of 64 that
// holds 3 keys each put and deleted 20 times: the hint is the stream's 3
// subjects, not its 120 messages (the copy used to presize from the
// messages, and its maps never shrink). Without a subject count (a server
// that leaves it 0) the messages stand in, and the hint never passes 2^20.
func TestSizeHintCountsKeysNotMessages(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "test")
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "churn", History: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		for _, k := range []string{"a", "b", "c"} {
			if _, err := kv.PutString(ctx, k, fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	state := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State
	if state.Msgs != 120 || state.NumSubjects != 3 {
		t.Fatalf("the churned bucket's stream holds %d messages on %d subjects; want 120 on 3", state.Msgs, state.NumSubjects)
	}
	if got := bus.SizeHint(state); got != 3 {
		t.Errorf("SizeHint(%d messages, %d subjects) = %d; want 3, the keys", state.Msgs, state.NumSubjects, got)
	}

	for _, c := range []struct {
		name string
		st   jetstream.StreamState
		want int
	}{
		{"no subject count", jetstream.StreamState{Msgs: 40}, 40},
		{"subjects bounded by messages", jetstream.StreamState{Msgs: 5, NumSubjects: 9}, 5},
		{"empty", jetstream.StreamState{}, 0},
		{"over the bound", jetstream.StreamState{Msgs: 3 << 20, NumSubjects: 2 << 20}, 1 << 20},
	} {
		if got := bus.SizeHint(c.st); got != c.want {
			t.Errorf("%s: SizeHint(%d messages, %d subjects) = %d; want %d", c.name, c.st.Msgs, c.st.NumSubjects, got, c.want)
		}
	}
}
