// Package lookup answers an operator's question about one key or one node
// from the keys the answer needs, not from the whole mesh: a [State] is a
// [compose.State] that reads each key from the bus the first time it is
// asked for (a get by key), each node's keys with a read filtered to the
// node's subjects (<node>.>), and only a question that is about every node
// (which nodes a module is placed on, which keys depend on a key) reads a
// whole bucket. What it read is decoded by a [state.Mesh], the seat's own
// reader, so a key reads as the seat reads it.
//
// [Seat] says whether a seat holds the lease, since when, and when the
// seat last wrote (its last composition that changed a key): every read
// view says so when no seat holds the lease.
package lookup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/state"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// State is a [compose.State] over the bus that reads what it is asked for
// on the first ask and keeps it. Its methods cannot return the bus's
// errors: the first error of a read is kept and returned by [State.Err],
// which a caller checks once its question is answered (an answer given
// while Err is not nil may be missing keys). A State is for one question:
// it never learns of later changes. It is not safe for concurrent use.
type State struct {
	ctx context.Context
	js  jetstream.JetStream
	m   *state.Mesh
	kvs map[string]jetstream.KeyValue // nil for a bucket that does not exist
	got map[string]bool               // bucket + " " + key or pattern, read
	// retired holds the ask each provision key read deleted was retired
	// by, as its delete marker names it ([mesh.AskHeader]).
	retired map[string]string
	// reads counts the gets and filtered reads made.
	reads int
	whole []string // buckets read whole, in order
	err   error
	odd   []error
	// direct is set once the bus refused a leader get (see get).
	direct bool
}

var _ compose.State = (*State)(nil)

// New returns a State that reads through js while ctx lasts.
func New(ctx context.Context, js jetstream.JetStream) *State {
	return &State{ctx: ctx, js: js, m: state.New(), kvs: map[string]jetstream.KeyValue{}, got: map[string]bool{}, retired: map[string]string{}}
}

// FromReplicas makes s read each key from whichever replica answers (a
// direct get) rather than from the stream's leader: for a reader the bus
// does not let ask the leader (one allowed some keys only: a node's
// client). A value so read may be older than one the reader saw before,
// while a replica catches up after its server restarted.
func (s *State) FromReplicas() { s.direct = true }

// Err returns the first error a read met (the bus refused or did not
// answer), or nil. A bucket that does not exist is no error: it reads as
// empty.
func (s *State) Err() error { return s.err }

// Odd returns every key read that is out of its bucket's shape or whose
// value does not decode, as the seat's state said it ([state.ErrOdd]).
func (s *State) Odd() []error { return s.odd }

// Reads returns how many gets and filtered reads the State made (each
// counted once): what a question cost.
func (s *State) Reads() int { return s.reads }

// Whole returns the buckets the State has read whole (every key), in the
// order it read them: none for a question about one key or one node that
// needs no module's nodes and no key's dependents.
func (s *State) Whole() []string { return s.whole }

// kv returns bucket's handle, or nil when the bucket does not exist or
// cannot be had (said in Err).
func (s *State) kv(bucket string) jetstream.KeyValue {
	if kv, ok := s.kvs[bucket]; ok {
		return kv
	}
	kv, err := s.js.KeyValue(s.ctx, bucket)
	if err != nil {
		kv = nil
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			s.fail(fmt.Errorf("lookup: bucket %s: %w", bucket, err))
		}
	}
	s.kvs[bucket] = kv
	return kv
}

func (s *State) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *State) take(bucket, key string, value []byte, rev uint64) {
	t := s.m.Take(bus.Change{Bucket: bucket, Key: key, Value: value, Revision: rev})
	if t.Odd != nil {
		s.odd = append(s.odd, t.Odd)
	}
}

// get reads key of bucket once.
func (s *State) get(bucket, key string) {
	id := bucket + " " + key
	if s.got[id] || s.got[bucket+" >"] {
		return
	}
	if node, _, ok := strings.Cut(key, "."); ok && (s.got[bucket+" "+node+".>"] || s.got[bucket+" "+node+".*"] && !strings.Contains(key[len(node)+1:], ".")) {
		return // read with its node's keys: it is not there
	}
	s.got[id] = true
	s.reads++
	kv := s.kv(bucket)
	if kv == nil {
		return
	}
	if !validKey(key) {
		return // a key no bucket can hold is none the mesh keeps
	}
	// From the stream's leader: a replica catching up would answer with a
	// value older than one the reader may already have seen.
	var e bus.LeaderEntry
	err := errNoLeaderGets
	if !s.direct {
		e, err = bus.LeaderGet(s.ctx, s.js, bucket, key)
	}
	if errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, errNoLeaderGets) {
		// A reader allowed some keys only (a node's client) may not ask
		// the leader: it reads from whichever replica answers.
		s.direct = true
		e, err = directGet(s.ctx, kv, key)
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		s.fail(fmt.Errorf("lookup: get %s %s: %w", bucket, key, err))
	case !e.Deleted:
		s.take(bucket, key, e.Value, e.Revision)
	case bucket == mesh.ProvisionsBucket && e.Header.Get(mesh.AskHeader) != "":
		s.retired[key] = e.Header.Get(mesh.AskHeader)
	}
}

// read reads every key of bucket matching pattern (">" for all) once.
func (s *State) read(bucket, pattern string) {
	id := bucket + " " + pattern
	if s.got[id] || s.got[bucket+" >"] {
		return
	}
	s.got[id] = true
	s.reads++
	if pattern == ">" {
		s.whole = append(s.whole, bucket)
	}
	kv := s.kv(bucket)
	if kv == nil {
		return
	}
	err := Read(s.ctx, s.js, kv, []string{pattern}, func(key string, value []byte, rev uint64) {
		s.take(bucket, key, value, rev)
		s.got[bucket+" "+key] = true
	})
	if err != nil {
		s.fail(fmt.Errorf("lookup: read %s %s: %w", bucket, pattern, err))
	}
}

// Read calls f with every key of kv that matches one of patterns (key
// patterns: "node-0001.>", "node-0001.*", ">" for every key), its last
// value and revision, deleted keys left out, in the stream's order, and
// returns once it has seen them all. The server sends only the matching
// subjects' last messages: the cost is that of the keys read, not of the
// bucket.
//
// A watch is served by whichever replica of the bucket's stream holds its
// consumer, which may be one still catching up after a restart: what it
// sends may be older than what the reader already saw. So once a pattern's
// watch has sent its keys, Read asks the stream's leader (through js, see
// [bus.LeaderNext]) for any matching message past the last revision the
// watch sent, and takes each in: what Read gives is at least what the
// leader held when Read asked it (one request more when the watch was
// current, one per message it had missed otherwise). With js nil (a reader
// the bus does not let ask the leader: one allowed some keys only, a
// node's client) Read gives what the watch's replica held.
func Read(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, patterns []string, f func(key string, value []byte, rev uint64)) error {
	return read(ctx, js, kv, patterns, f, false)
}

// ReadKeys is [Read] of the keys alone: the server sends each matching
// key's last message without its value (f's value is nil).
func ReadKeys(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, patterns []string, f func(key string, value []byte, rev uint64)) error {
	return read(ctx, js, kv, patterns, f, true)
}

// A read is one key's last message as [Read] has it.
type readEntry struct {
	key   string
	value []byte
	rev   uint64
}

func read(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, patterns []string, f func(key string, value []byte, rev uint64), keysOnly bool) error {
	// One watch per pattern: a consumer of one filter is made on a subject
	// that names its filter, which a user allowed only some keys (a node's
	// client: <node>.>) may be allowed to make; one of several filters is
	// not. Deletes are watched too: the last revision the watch sent,
	// delete markers counted, is where the leader is asked from.
	got := map[string]readEntry{}
	for _, p := range patterns {
		w, err := bus.WatchKeys(ctx, js, kv, p, bus.WatchOptions{MetaOnly: keysOnly})
		if err != nil {
			return err
		}
		var last uint64
		err = drain(ctx, w, func(e jetstream.KeyValueEntry) {
			last = max(last, e.Revision())
			if e.Operation() == jetstream.KeyValuePut {
				got[e.Key()] = readEntry{e.Key(), e.Value(), e.Revision()}
			} else {
				delete(got, e.Key())
			}
		})
		w.Stop()
		if err != nil {
			return err
		}
		for seq := last + 1; js != nil; {
			e, err := bus.LeaderNext(ctx, js, kv.Bucket(), p, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, nats.ErrPermissionViolation) {
				// None past the watch's; or a reader allowed some
				// keys only (a node's client), which may not ask the
				// leader, has what the watch's replica held.
				break
			}
			if err != nil {
				return err
			}
			if e.Deleted {
				delete(got, e.Key)
			} else {
				if keysOnly {
					e.Value = nil
				}
				got[e.Key] = readEntry{e.Key, e.Value, e.Revision}
			}
			seq = e.Revision + 1
		}
	}
	all := make([]readEntry, 0, len(got))
	for _, e := range got {
		all = append(all, e)
	}
	slices.SortFunc(all, func(a, b readEntry) int { return cmp.Compare(a.rev, b.rev) })
	for _, e := range all {
		f(e.key, e.value, e.rev)
	}
	return nil
}

// drain calls f with each entry w sends until its initial values are done.
func drain(ctx context.Context, w jetstream.KeyWatcher, f func(e jetstream.KeyValueEntry)) error {
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch stopped before every key was read")
			}
			if e == nil {
				return nil
			}
			f(e)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Get reads key of kv's bucket from the leader of its stream
// ([bus.LeaderGet]), so that the value is never older than one written
// before; when the bus refuses the reader the leader (a user allowed some
// keys only), or js is nil, it reads from whichever replica answers
// (kv.Get). A key with
// no value gives an error wrapping jetstream.ErrKeyNotFound.
func Get(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string) (bus.LeaderEntry, error) {
	if js == nil {
		return directGet(ctx, kv, key)
	}
	e, err := bus.LeaderGet(ctx, js, kv.Bucket(), key)
	if errors.Is(err, nats.ErrPermissionViolation) {
		return directGet(ctx, kv, key)
	}
	if err == nil && e.Deleted {
		return e, fmt.Errorf("bus: leader get %s %s: deleted: %w", kv.Bucket(), key, jetstream.ErrKeyNotFound)
	}
	return e, err
}

// errNoLeaderGets stands for a leader get a State no longer tries.
var errNoLeaderGets = errors.New("no leader gets")

// directGet reads key through kv.Get (a direct get, answered by any
// replica), as a LeaderEntry.
func directGet(ctx context.Context, kv jetstream.KeyValue, key string) (bus.LeaderEntry, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return bus.LeaderEntry{}, err
	}
	return bus.LeaderEntry{Key: key, Value: e.Value(), Revision: e.Revision()}, nil
}

// validKey reports whether key is one a bucket can hold: tokens of letters,
// digits and "-_=/" separated by dots, none empty.
func validKey(key string) bool {
	if key == "" || strings.HasPrefix(key, ".") || strings.HasSuffix(key, ".") || strings.Contains(key, "..") {
		return false
	}
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("-_=/.", r):
		default:
			return false
		}
	}
	return true
}

// The compose.State methods: each reads what it answers from, then asks
// the state.Mesh.

func (s *State) Placed(node string) ([]string, error) {
	s.get(mesh.PlacementBucket, node)
	return s.m.Placed(node)
}

// NodesOf reads the whole placement bucket (one key per node): placement
// is kept by node, not by module.
func (s *State) NodesOf(module string) []string {
	s.read(mesh.PlacementBucket, ">")
	return s.m.NodesOf(module)
}

func (s *State) Want(node, module string) (string, bool, error) {
	s.get(mesh.WantsBucket, mesh.WantKey{Node: node, Module: module}.String())
	return s.m.Want(node, module)
}

func (s *State) Have(node, module string) (mesh.Have, bool, error) {
	s.get(mesh.HaveBucket, mesh.HaveKey{Node: node, Module: module}.String())
	return s.m.Have(node, module)
}

func (s *State) Build(module, fp string) (mesh.Build, bool) {
	s.get(mesh.BuildsBucket, mesh.BuildKey{Module: module, Fingerprint: fp}.String())
	return s.m.Build(module, fp)
}

func (s *State) Newest(module string) (mesh.Build, bool) {
	s.read(mesh.BuildsBucket, module+".*")
	return s.m.Newest(module)
}

func (s *State) Trunk(module string) (string, bool) {
	s.get(mesh.ModulesBucket, module)
	return s.m.Trunk(module)
}

func (s *State) Manifest(digest string) (*mesh.Manifest, error) {
	s.get(mesh.ManifestsBucket, token.Escape(digest))
	return s.m.Manifest(digest)
}

func (s *State) Entry(provider, key string) (mesh.Entry, bool, error) {
	s.get(mesh.BoundBucket(provider), key)
	return s.m.Entry(provider, key)
}

// Lost is what a State that read the entry once knows of it before a
// deletion: nothing, as for the seat started after the deletion (the
// bucket keeps no value under a delete marker).
func (s *State) Lost(provider, key string) (mesh.Entry, bool) {
	s.get(mesh.BoundBucket(provider), key)
	return s.m.Lost(provider, key)
}

func (s *State) Provision(key string) (mesh.Provision, bool) {
	s.get(mesh.ProvisionsBucket, key)
	return s.m.Provision(key)
}

// RetiredBy returns the id of the ask whose yes retired provision key, as
// the seat's delete marker of the key names it ([mesh.AskHeader]): one
// read, of that key (none when it was read already). It reports false for
// a key that is kept, was never written, or was deleted with no ask named
// (or read from a replica: see [State.FromReplicas]).
func (s *State) RetiredBy(key string) (string, bool) {
	s.get(mesh.ProvisionsBucket, key)
	id, ok := s.retired[key]
	return id, ok
}

func (s *State) ProvisionsOf(node string) []string {
	s.read(mesh.ProvisionsBucket, node+".>")
	return s.m.ProvisionsOf(node)
}

// DependentsOf reads the whole provisions bucket: a key's dependents may
// be on any node.
func (s *State) DependentsOf(key string) []string {
	s.read(mesh.ProvisionsBucket, ">")
	return s.m.DependentsOf(key)
}

func (s *State) Plan(key string) ([]byte, bool) {
	s.get(mesh.PlansBucket, key)
	return s.m.Plan(key)
}

func (s *State) PlansOf(node string) []string {
	s.read(mesh.PlansBucket, node+".*")
	return s.m.PlansOf(node)
}

func (s *State) Refusal(key string) (mesh.Refusal, bool) {
	s.get(mesh.RefusedBucket, key)
	return s.m.Refusal(key)
}

func (s *State) RefusalsOf(node string) []string {
	s.read(mesh.RefusedBucket, node+".*")
	return s.m.RefusalsOf(node)
}

func (s *State) Record(id string) (mesh.Record, bool) {
	s.get(mesh.RecordsBucket, id)
	return s.m.Record(id)
}
