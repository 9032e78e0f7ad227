package provisioning

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/digest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// DigestPage is how many nodes one digests answer holds at most (whole
// groups: a page may end past it by one group's nodes): a node's sum is
// some 50 bytes, so a page stays far below NATS's default max payload of
// 1 MiB. Reply.Next names the group the next page starts after.
const DigestPage = 4000

// digestSums names the verb's kept sums of [digest.Buckets] among its
// followed copies: no bucket has this name.
const digestSums = "digests of " + mesh.PlacementBucket + ", " + mesh.WantsBucket + " and " + mesh.HaveBucket

// sums holds the digests answer's [digest.Set], kept current change by
// change from watched copies of [digest.Buckets] (their revisions only):
// a request reads the sums, never the buckets.
type sums struct {
	mu     sync.Mutex
	set    *digest.Set
	copies map[string]*bus.Copy
	ready  chan struct{}
}

// followSums starts the sums of [digest.Buckets], kept current until ctx
// is done. Its ready is closed once every copy holds its bucket's keys.
func followSums(ctx context.Context, f *follower) *sums {
	s := &sums{set: digest.New(), copies: map[string]*bus.Copy{}, ready: make(chan struct{})}
	for _, b := range digest.Buckets {
		opts := bus.Options{Log: f.log, RevisionsOnly: true, OnChange: func(ch bus.Change) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if ch.Deleted {
				s.set.Delete(ch.Bucket, ch.Key)
			} else {
				s.set.Put(ch.Bucket, ch.Key, ch.Value)
			}
		}}
		s.copies[b] = bus.Follow(ctx, f.js, b, opts)
	}
	go func() {
		for _, c := range s.copies {
			select {
			case <-c.Ready():
			case <-ctx.Done():
				return
			}
		}
		close(s.ready)
	}()
	return s
}

// Ready is closed once the sums hold every key of their buckets.
func (s *sums) Ready() <-chan struct{} { return s.ready }

// caughtUp waits until each copy has taken every write up to the revision
// req.Seen names for its bucket (the bucket's last sequence as the asker
// read it before asking), so that no write the asker could see is missing
// from the answer; it returns the why of an error answer when one has not
// within wait.
func (s *sums) caughtUp(ctx context.Context, req Request, wait time.Duration) string {
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		behind := ""
		var seen, want uint64
		for b, rev := range req.Seen {
			c, ok := s.copies[b]
			if !ok {
				return whyNotSummed(b)
			}
			if got := c.Seen(); got < rev {
				behind, seen, want = b, got, rev
				break
			}
		}
		if behind == "" {
			return ""
		}
		if time.Now().After(deadline) {
			return whyBehind(behind, seen, want, wait)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err().Error()
		}
	}
}

// answer is the digests answer of req from the kept sums.
func (s *sums) answer(req Request) Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return digestsOf(s.set, req)
}

// digestsOf answers a digests request from set: for each group whose sum
// differs from the request's (req.Sums, one per group, "" for a group
// with no node), one entry keyed by the group's number (three digits,
// "007") whose value maps each node of the group the set holds keys of to
// its sum ({} when it holds none), groups in order, starting after group
// req.After, whole groups until [DigestPage] nodes are passed (Next then
// names the last group given); and every key of no node under Odd.
func digestsOf(set *digest.Set, req Request) Reply {
	reply := Reply{What: WhatDigests, Entries: []Entry{}, Odd: []Odd{}}
	if len(req.Sums) != digest.Groups {
		reply.Error = whySums(len(req.Sums))
		return reply
	}
	first := 0
	if req.After != "" {
		g, err := strconv.Atoi(req.After)
		if err != nil || g < 0 || g >= digest.Groups {
			reply.Error = whyAfterGroup(req.After)
			return reply
		}
		first = g + 1
	}
	nodes := 0
	for g := first; g < digest.Groups; g++ {
		if set.Group(g) == req.Sums[g] {
			continue
		}
		if nodes >= DigestPage {
			reply.Next = reply.Entries[len(reply.Entries)-1].Key
			break
		}
		held := map[string]string{}
		for _, n := range set.NodesOf(g) {
			held[n] = set.Node(n)
		}
		nodes += len(held)
		b, _ := json.Marshal(held) // strings always encode
		reply.Entries = append(reply.Entries, Entry{Key: GroupKey(g), Value: b})
	}
	if first == 0 {
		for _, o := range set.Odd() {
			reply.Odd = append(reply.Odd, Odd{Key: o.Key, Why: whyNoNode(o.Bucket)})
		}
	}
	return reply
}

// GroupKey is the key of group g's entry in a digests answer: three
// digits.
func GroupKey(g int) string { return fmt.Sprintf("%03d", g) }

// digests answers req from the buckets in src, summed afresh: the pure
// step of what the verb answers from its kept sums.
func digests(req Request, src Sources) Reply {
	set := digest.New()
	for _, b := range digest.Buckets {
		each(src[b], func(key string, value []byte) { set.Put(b, key, value) })
	}
	return digestsOf(set, req)
}
