package seat_test

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// lateKey is the key the tests of late acks have the seat write again: a
// provision of the homelab.
const lateKey = "ace.gitea.credential.gitea_gitea-read"

// lateSeat starts the homelab's seat on a connection through a slow
// proxy (its answers not delayed yet), each try of a put waiting ackWait
// for its ack, and waits until it settles. It returns the harness, the
// proxy, and the errors of the writes the bus refused or did not take.
func lateSeat(t *testing.T, ackWait time.Duration) (*harness, *bustest.Relay, func() []string) {
	t.Helper()
	s := bustest.Server(t)
	h := &harness{t: t, ctx: bustest.Context(t), srv: s}
	h.nc, h.js = bustest.Connect(t, s, "operator")
	h.apply(homelab(t))
	slow := bustest.NewRelay(t, s.Addr().String())
	nc, js, err := bus.Connect(bus.Dial{URL: slow.URL(), Name: "seat"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var mu sync.Mutex
	var errs []string
	// A lease of 20 s: renewed every 3.3 s, its tries sent again every 2.5
	// s, fenced 15 s after the last taken; the slow answers below take 2 s.
	st := seat.New(js, seat.Config{ID: "late", LeaseTTL: 20 * time.Second, OnWriteError: func(bucket, key string, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, bucket+" "+key+": "+err.Error())
	}})
	st.SetAckTimeout(ackWait)
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("seat.Run = %v", err)
		}
	})
	h.seat = st
	h.settle()
	return h, slow, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// forge writes, as the operator, each key's value with its names
// upper-cased (not a value of its kind: the seat writes the key anew, as
// TestSeatRewritesAProvisionWhoseNamesDifferInCase shows). It returns the
// seat's values before and the revision of the last forged value.
func forge(t *testing.T, h *harness, keys ...string) (own map[string][]byte, rev uint64) {
	t.Helper()
	kv := h.kv(mesh.ProvisionsBucket)
	own = map[string][]byte{}
	for _, key := range keys {
		e, err := kv.Get(h.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		own[key] = e.Value()
		forged := string(e.Value())
		for _, name := range []string{"provision", "local", "consumer", "provider", "module", "node", "state", "why", "at"} {
			forged = strings.ReplaceAll(forged, `"`+name+`":`, `"`+strings.ToUpper(name)+`":`)
		}
		if rev, err = kv.Put(h.ctx, key, []byte(forged)); err != nil {
			t.Fatal(err)
		}
	}
	return own, rev
}

// stamp is the time a provision's value says it was written at.
var stamp = regexp.MustCompile(`"at":"[^"]*"`)

// unstamped returns a provision's value with its time left out: the seat
// stamps each write of a key with the time it was composed.
func unstamped(v []byte) string { return stamp.ReplaceAllString(string(v), `"at":""`) }

// checkWrittenOnce checks that each key of own holds the seat's value
// own[key] (its time aside) at one of the len(own) revisions after forged
// (the last forged value's), each carrying a Nats-Msg-Id, and that the
// provisions bucket holds nothing written after them: each put's tries
// made one write. wrote is the seat's count of writes taken before the
// forged values; the seat took one more per key, and no write failed.
func checkWrittenOnce(t *testing.T, h *harness, own map[string][]byte, forged uint64, wrote int64, errs []string) {
	t.Helper()
	m, err := h.js.Stream(h.ctx, "KV_"+mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(len(own))
	revs := map[uint64]string{}
	for key, v := range own {
		e, err := h.kv(mesh.ProvisionsBucket).Get(h.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if unstamped(e.Value()) != unstamped(v) || e.Revision() <= forged || e.Revision() > forged+n || revs[e.Revision()] != "" {
			t.Errorf("%s holds %s at revision %d; want the seat's value %s (its time aside) at one of the %d revisions after the forged values' %d",
				key, e.Value(), e.Revision(), v, n, forged)
		}
		revs[e.Revision()] = key
		// The stored message carries the put's id, which a try sent
		// again repeats.
		raw, err := m.GetMsg(h.ctx, e.Revision())
		if err != nil {
			t.Fatal(err)
		}
		if raw.Header.Get(jetstream.MsgIDHeader) == "" {
			t.Errorf("%s at %d carries no %s; want the put's id", key, e.Revision(), jetstream.MsgIDHeader)
		}
	}
	if last := h.lastSeq(mesh.ProvisionsBucket); last != forged+n {
		t.Errorf("the provisions bucket's last revision is %d; want %d: nothing written after the seat's one write of each key", last, forged+n)
	}
	if got := h.seat.Wrote() - wrote; got != int64(n) {
		t.Errorf("the seat took %d writes after the forged values; want %d", got, n)
	}
	if len(errs) > 0 {
		t.Errorf("writes the bus refused or did not take: %q; want none", errs)
	}
	// The server's duplicate window of the seat's buckets covers the tries.
	if w := m.CachedInfo().Config.Duplicates; w != bus.SeatDuplicateWindow {
		t.Errorf("the provisions bucket's duplicate window is %s; want %s", w, bus.SeatDuplicateWindow)
	}
}

// A put whose ack comes after its try's wait is sent again with the same
// id and expected revision, and the first try's late ack is taken: the put
// is one write, not a failure written again into a conflict with itself.
// The seat's answers come 2 s late; each try waits 1.5 s, so the put of
// the key forged is sent again before its ack comes (a standalone server
// refuses the second try as a conflict, after the first try's ack on the
// same connection). The seat gave each put 5 s and took a late one as not
// taken, its node composed again and written expecting the revision the
// first try had replaced: "no acknowledgement within 5s", then "wrong last
// sequence", thousands of each in TestClusterFailover under load.
func TestLateAckIsOneWrite(t *testing.T) {
	h, slow, errs := lateSeat(t, 1500*time.Millisecond)
	wrote, resent := h.seat.Wrote(), h.seat.Resent()
	slow.SetDelay(2 * time.Second)
	own, forged := forge(t, h, lateKey)
	bustest.WaitFor(t, 0, "the seat to write "+lateKey+" anew", func() bool {
		e, err := h.kv(mesh.ProvisionsBucket).Get(h.ctx, lateKey)
		return err == nil && e.Revision() > forged
	})
	h.settle()
	checkWrittenOnce(t, h, own, forged, wrote, errs())
	if h.seat.Resent() == resent {
		t.Error("the seat sent no put again: its ack came within a try's wait, and the test shows nothing")
	}
}

// Puts whose first try the bus wrote, their acks lost with the connection
// (nats.ErrDisconnected), are sent again at once; the standalone server
// refuses those tries as conflicts (each key's revision is its first
// try's), and the seat, reading each key from its stream's leader, finds
// it holds the put's id: each put is written, at its first try's
// revision, not refused as a conflict.
func TestAcksLostWithTheConnectionAreOneWriteEach(t *testing.T) {
	// Each try waits 5 s, as the seat's own: only the lost connection
	// sends the puts again.
	h, slow, errs := lateSeat(t, 5*time.Second)
	wrote, recognised := h.seat.Wrote(), h.seat.Recognised()
	// The seat's answers 2 s late: the first tries' acks are on their way
	// when the keys hold the puts, and the link is cut then.
	slow.SetDelay(2 * time.Second)
	keys := []string{lateKey, "ace.gitea.credential.postgres_database_main", "ace.vaultwarden.credential.postgres_database"}
	_, forged := forge(t, h, keys...)
	kv := h.kv(mesh.ProvisionsBucket)
	own := map[string][]byte{}
	bustest.WaitFor(t, 0, "the seat's first tries to write "+strings.Join(keys, ", "), func() bool {
		for _, key := range keys {
			e, err := kv.Get(h.ctx, key)
			if err != nil || e.Revision() <= forged {
				return false
			}
			own[key] = e.Value()
		}
		return true
	})
	slow.SetDelay(0)
	slow.Cut()
	bustest.WaitFor(t, 0, "the seat to take the puts as written, or as failed", func() bool {
		return h.seat.Wrote() >= wrote+int64(len(keys)) || len(errs()) > 0
	})
	h.settle()
	checkWrittenOnce(t, h, own, forged, wrote, errs())
	if got := h.seat.Recognised() - recognised; got != int64(len(keys)) {
		t.Errorf("the seat found %d puts written by their first tries; want %d", got, len(keys))
	}
}
