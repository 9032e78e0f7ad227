package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/digest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// fileRead is what apply and apply --dry-run read of the buckets a mesh
// file writes: manifests, builds and modules whole (their keys are per
// module, not per node), and of placement, wants and haves only the keys
// of the nodes where the bus differs from the file, as the seat's verb
// says (mesh-provisioner.provisioning, what digests: it sums each node's
// keys of those buckets from its watched copies); every bucket whole when
// no seat answers, or when most nodes differ.
type fileRead struct {
	// current is what the buckets hold: of a node whose keys the bus holds
	// as the file writes them, the file's keys.
	current map[string]map[string][]byte
	// read holds the keys read from the bus: of placement, wants and
	// haves, those of nodes only (every key when nodes is nil), what
	// [meshfile.File.DiffOf] is given.
	read  map[string]map[string][]byte
	nodes map[string]bool
	// keys counts the keys read; whole says why placement, wants and
	// haves were read whole ("" when the verb answered), and fallback
	// whether that was because the verb did not answer them (said once
	// by the caller).
	keys     int
	whole    string
	fallback bool
}

// moduleBuckets are the buckets a mesh file writes whose keys are per
// module or per manifest: read whole.
var moduleBuckets = []string{mesh.ManifestsBucket, mesh.BuildsBucket, mesh.ModulesBucket}

// nodeShare bounds the nodes read one by one: past one in nodeShare of the
// file's nodes differing, placement, wants and haves are read whole (a
// node's keys cost four reads: its placement and its own have by direct
// get, its wants and module haves by a watch each). A variable for the
// tests, which read by node ([testHooks]).
const nodeShare = 64

// asker is the connection a command asks the seat's verb on (in the
// requests account, [busFlags.connectAsk]), or why it has none.
type asker struct {
	nc  *nats.Conn
	why string
}

// readFile reads what the diff of f needs, through js, asking the seat's
// verb on ask (see [fileRead]).
func readFile(ctx context.Context, js jetstream.JetStream, ask asker, f *meshfile.File) (*fileRead, error) {
	fr := &fileRead{current: map[string]map[string][]byte{}, read: map[string]map[string][]byte{}}
	for _, b := range moduleBuckets {
		held, err := readKeys(ctx, js, b, "")
		if err != nil {
			return nil, err
		}
		fr.read[b], fr.current[b] = held, held
		fr.keys += len(held)
	}
	differ, why, err := askDigests(ctx, js, ask, f)
	if err != nil {
		return nil, err
	}
	fr.fallback = why != "" && why != whyNoBuckets
	if why == "" && hooksOf(ctx).share(hooksOf(ctx).nodeShare, nodeShare)*len(differ) > len(f.Nodes) {
		why = fmt.Sprintf("%d of the file's %d nodes differ from the bus", len(differ), len(f.Nodes))
	}
	if why != "" {
		fr.whole = why
		for _, b := range digest.Buckets {
			held, err := readKeys(ctx, js, b, "")
			if err != nil {
				return nil, err
			}
			fr.read[b], fr.current[b] = held, held
			fr.keys += len(held)
		}
		return fr, nil
	}
	fr.nodes = map[string]bool{}
	for _, n := range differ {
		fr.nodes[n] = true
	}
	read, err := readNodes(ctx, js, differ)
	if err != nil {
		return nil, err
	}
	// What the buckets hold: the file's keys (copied whole, which costs
	// far less than a key at a time), but of the nodes read, what was
	// read.
	fileKeys := f.Keys()
	for _, b := range digest.Buckets {
		fr.read[b] = read[b]
		fr.keys += len(read[b])
		fr.current[b] = maps.Clone(fileKeys[b])
		if fr.current[b] == nil {
			fr.current[b] = map[string][]byte{}
		}
	}
	for b, keys := range f.KeysOf(fr.nodes) {
		for _, k := range keys {
			delete(fr.current[b], k)
		}
	}
	for _, b := range digest.Buckets {
		for k, v := range read[b] {
			fr.current[b][k] = v
		}
	}
	return fr, nil
}

// askDigests asks the seat's verb which nodes' placement, wants and haves
// differ from the file's, and returns them, sorted; or why it could not
// tell (no seat answers, the answer is an error or names an odd key), to
// read those buckets whole. It returns an error when the bus fails.
func askDigests(ctx context.Context, js jetstream.JetStream, ask asker, f *meshfile.File) ([]string, string, error) {
	if ask.nc == nil {
		return nil, ask.why, nil
	}
	req := provisioning.Request{What: provisioning.WhatDigests, Seen: map[string]uint64{}}
	any := false
	for _, b := range digest.Buckets {
		st, err := js.Stream(ctx, "KV_"+b)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("read %s: %w", b, err)
		}
		req.Seen[b] = st.CachedInfo().State.LastSeq
		any = true
	}
	if !any {
		return nil, whyNoBuckets, nil
	}
	set := digest.Of(f.Keys())
	req.Sums = set.Sums()
	theirs := map[int]map[string]string{}
	for {
		body, _ := json.Marshal(req) // plain strings and numbers always encode
		rctx, cancel := context.WithTimeout(ctx, digestsTimeout)
		msg, err := ask.nc.RequestWithContext(rctx, mesh.ProvisioningSubject, body)
		cancel()
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, "no seat answers " + mesh.ProvisioningSubject, nil
		}
		if err != nil {
			return nil, fmt.Sprintf("asking %s: %v", mesh.ProvisioningSubject, err), nil
		}
		var r provisioning.Reply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return nil, fmt.Sprintf("the answer of %s does not decode: %v", mesh.ProvisioningSubject, err), nil
		}
		if r.Error != "" {
			return nil, fmt.Sprintf("%s says: %s", mesh.ProvisioningSubject, r.Error), nil
		}
		if len(r.Odd) > 0 {
			return nil, fmt.Sprintf("%s says %d keys are of no node (first: %s: %s)", mesh.ProvisioningSubject, len(r.Odd), r.Odd[0].Key, r.Odd[0].Why), nil
		}
		for _, e := range r.Entries {
			g, err := strconv.Atoi(e.Key)
			var nodes map[string]string
			if err == nil {
				err = json.Unmarshal(e.Value, &nodes)
			}
			if err != nil || g < 0 || g >= digest.Groups {
				return nil, fmt.Sprintf("the answer of %s names group %q, %s: not a group and its nodes' sums", mesh.ProvisioningSubject, e.Key, e.Value), nil
			}
			theirs[g] = nodes
		}
		if r.Next == "" {
			break
		}
		req.After = r.Next
	}
	return set.Differ(theirs), "", nil
}

// digestsTimeout is how long apply waits for the seat's verb to answer a
// page of digests before it reads the buckets whole, as long as an
// operator's command waits for any verb: the verb answers at once from its
// sums unless its copies are behind the bus (a seat starting, a cluster
// electing a leader), and reading whole costs what the mesh costs.
const digestsTimeout = requestTimeout

// whyNoBuckets is askDigests's why when none of placement, wants and
// haves is made: there is nothing to read.
const whyNoBuckets = "none of them is made yet"

// says is what apply and apply --dry-run say, once, when they read
// placement, wants and haves whole because the seat's verb did not tell
// which nodes differ.
func (fr *fileRead) says() string {
	return "read " + mesh.PlacementBucket + ", " + mesh.WantsBucket + " and " + mesh.HaveBucket +
		" whole (" + fr.whole + "): it costs what the mesh costs, not what the file changes"
}

// readers is how many of a dry run's reads by node run at once.
const readers = 8

// readNodes reads the keys of nodes in placement (<node>), wants
// (want.<node>.*) and haves (<node>, <node>.*): bucket -> key -> value.
func readNodes(ctx context.Context, js jetstream.JetStream, nodes []string) (map[string]map[string][]byte, error) {
	out := map[string]map[string][]byte{}
	kvs := map[string]jetstream.KeyValue{}
	for _, b := range digest.Buckets {
		out[b] = map[string][]byte{}
		kv, err := js.KeyValue(ctx, b)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", b, err)
		}
		kvs[b] = kv
	}
	type read struct {
		bucket, key string // key: one key by direct get
		filter      string // else: a watch of the keys matching filter
	}
	var reads []read
	for _, n := range nodes {
		reads = append(reads, read{bucket: mesh.PlacementBucket, key: n}, read{bucket: mesh.WantsBucket, filter: "want." + n + ".*"},
			read{bucket: mesh.HaveBucket, key: n}, read{bucket: mesh.HaveBucket, filter: n + ".*"})
	}
	var mu sync.Mutex
	var first error
	work := make(chan read)
	var wg sync.WaitGroup
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				kv := kvs[r.bucket]
				if kv == nil {
					continue
				}
				held := map[string][]byte{}
				var err error
				if r.key != "" {
					var e bus.LeaderEntry
					e, err = lookup.Get(ctx, js, kv, r.key)
					if errors.Is(err, jetstream.ErrKeyNotFound) {
						err = nil
					} else if err == nil {
						held[r.key] = e.Value
					} else {
						err = fmt.Errorf("read %s %s: %w", r.bucket, r.key, err)
					}
				} else {
					held, err = readKeys(ctx, js, r.bucket, r.filter)
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				for k, v := range held {
					out[r.bucket][k] = v
				}
				mu.Unlock()
			}
		}()
	}
	for _, r := range reads {
		work <- r
	}
	close(work)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}
