package bus_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// A copy on a connection that may do anything (the seat's, an operator's)
// takes only its own stream's messages: a party that learned the copy's
// inbox (an operator's system user reads deliver subjects in JSZ) makes a
// push consumer on another bucket whose subject prefix has the same length
// and delivers into that inbox, its consumer sequence the one the copy's
// consumer expects. The copy drops it; the bucket's own next write still
// comes.
func TestCopyDropsAnotherStreamsDelivery(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	if _, err := bus.Bucket(ctx, js, "test_aaaa", 0); err != nil {
		t.Fatal(err)
	}
	other, err := bus.Bucket(ctx, js, "test_bbbb", 0) // "$KV.test_bbbb." is as long as "$KV.test_aaaa."
	if err != nil {
		t.Fatal(err)
	}
	c := bus.Follow(ctx, js, "test_aaaa", bus.Options{})
	<-c.Ready()

	_, ajs := bustest.Connect(t, s, "attacker")
	stream, err := ajs.Stream(ctx, "KV_test_aaaa")
	if err != nil {
		t.Fatal(err)
	}
	var inbox string
	bustest.WaitFor(t, 0, "the copy's consumer listed with its deliver subject", func() bool {
		l := stream.ListConsumers(ctx)
		for ci := range l.Info() {
			if ci.Config.DeliverSubject != "" {
				inbox = ci.Config.DeliverSubject
			}
		}
		return inbox != ""
	})
	if _, err := other.Put(ctx, "forged", []byte(`"not test_aaaa's"`)); err != nil {
		t.Fatal(err)
	}
	// The push consumer's config as the legacy API takes it: the new API
	// makes pull consumers only.
	req := `{"stream_name":"KV_test_bbbb","config":{"name":"inject","deliver_subject":"` + inbox +
		`","deliver_policy":"all","ack_policy":"none","filter_subject":"$KV.test_bbbb.forged"}}`
	nc, _ := bustest.Connect(t, s, "attacker-api")
	m, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.KV_test_bbbb.inject.$KV.test_bbbb.forged", []byte(req))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(m.Data), `"error"`) {
		t.Fatalf("consumer create answered %s", m.Data)
	}

	mine, err := bus.Bucket(ctx, js, "test_aaaa", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mine.Put(ctx, "real", []byte(`"test_aaaa's"`)); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, 0, "the copy to hold test_aaaa's own key real", func() bool {
		_, ok := c.Get("real")
		return ok
	})
	if it, ok := c.Get("forged"); ok {
		t.Errorf("the copy of test_aaaa holds forged = %s, delivered from test_bbbb's stream; want it dropped", it.Value)
	}
}

// TestAStoredStatusHeaderIsAValue checks that a writer cannot blind the
// readers of a bucket by storing an empty value with the headers of the
// server's heartbeat or flow control ("Status: 100", with a description
// and a last consumer sequence, or none): a copy and a watch take it for
// the stored put it is, and take the next write of another key. Before,
// each took it for the server's own, dropped it uncounted, saw the next
// delivery as a gap and made its consumer anew from the same message, for
// ever: no later write of the bucket reached them.
func TestAStoredStatusHeaderIsAValue(t *testing.T) {
	s := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, s, "seat")
	for i, hdr := range []nats.Header{
		{"Status": {"100"}},
		{"Status": {"100"}, "Description": {"Idle Heartbeat"}, "Nats-Last-Consumer": {"999"}, "Nats-Last-Stream": {"999"}},
		{"Status": {"100"}, "Description": {"FlowControl Request"}},
	} {
		bucket := fmt.Sprintf("test_status%d", i)
		kv, err := bus.Bucket(ctx, js, bucket, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "before", []byte(`"1"`)); err != nil {
			t.Fatal(err)
		}
		c := bus.Follow(ctx, js, bucket, bus.Options{})
		<-c.Ready()
		w, err := bus.WatchKeys(ctx, js, kv, ">", bus.WatchOptions{UpdatesOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		m := &nats.Msg{Subject: "$KV." + bucket + ".forged", Header: hdr}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("%v: %v", hdr, err)
		}
		if _, err := kv.Put(ctx, "after", []byte(`"2"`)); err != nil {
			t.Fatal(err)
		}
		bustest.WaitFor(t, 0, fmt.Sprintf("the copy to hold after, past an empty value stored with %v", hdr), func() bool {
			it, ok := c.Get("after")
			return ok && string(it.Value) == `"2"`
		})
		if _, ok := c.Get("forged"); !ok {
			t.Errorf("%v: the copy does not hold forged, a stored put", hdr)
		}
		var got []string
		bustest.WaitFor(t, 0, fmt.Sprintf("the watch to hand on forged and after (stored with %v)", hdr), func() bool {
			for {
				select {
				case e := <-w.Updates():
					if e != nil {
						got = append(got, e.Key())
					}
					continue
				default:
				}
				return strings.Join(got, " ") == "forged after"
			}
		})
	}
}
