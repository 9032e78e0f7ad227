package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A LeaderEntry is one message of a bucket's stream as its leader holds it:
// the key (the subject past "$KV.<bucket>."), its value, its revision
// (stream sequence), whether it is a delete or purge marker, and its
// headers (nil when it has none; a delete marker's [Header]s among them).
type LeaderEntry struct {
	Key      string
	Value    []byte
	Revision uint64
	Deleted  bool
	Header   nats.Header
}

// LeaderGet reads the last message of key in bucket from the leader of the
// bucket's stream: a "$JS.API.STREAM.MSG.GET.KV_<bucket>" request, which
// only the stream's leader answers. kv.Get is a direct get that any replica
// answers, a replica still catching up after a restart included, and so may
// give a value older than one a reader already saw; the leader holds every
// acknowledged write. It returns an error wrapping jetstream.ErrKeyNotFound
// when the key has no message (a deleted key is an entry with Deleted set).
// The caller needs the permission to publish that subject, which reads
// every key of the bucket (the seat and the operator have it).
func LeaderGet(ctx context.Context, js jetstream.JetStream, bucket, key string) (LeaderEntry, error) {
	e, err := leaderGet(ctx, js, bucket, msgGetRequest{LastFor: kvPrefix(bucket) + key})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return LeaderEntry{}, fmt.Errorf("bus: leader get %s %s: %w", bucket, key, jetstream.ErrKeyNotFound)
	}
	if err != nil {
		return LeaderEntry{}, fmt.Errorf("bus: leader get %s %s: %w", bucket, key, err)
	}
	return e, nil
}

// LeaderNext reads from the leader of bucket's stream (as [LeaderGet]) the
// first message at revision seq or later whose key matches pattern (a key
// pattern: "node-0001.>", ">"). It returns an error wrapping
// jetstream.ErrMsgNotFound when there is none.
func LeaderNext(ctx context.Context, js jetstream.JetStream, bucket, pattern string, seq uint64) (LeaderEntry, error) {
	e, err := leaderGet(ctx, js, bucket, msgGetRequest{Seq: max(seq, 1), NextFor: kvPrefix(bucket) + pattern})
	if err != nil {
		return LeaderEntry{}, fmt.Errorf("bus: leader next %s %s from %d: %w", bucket, pattern, seq, err)
	}
	return e, nil
}

// msgGetRequest is the body of a STREAM.MSG.GET request, as the server
// reads it.
type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

// msgGetResponse is the server's answer to a STREAM.MSG.GET request.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string `json:"subject"`
		Sequence uint64 `json:"seq"`
		Header   []byte `json:"hdrs,omitempty"`
		Data     []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// leaderTimeout bounds a leader get made under a context with no deadline.
const leaderTimeout = 5 * time.Second

func leaderGet(ctx context.Context, js jetstream.JetStream, bucket string, req msgGetRequest) (LeaderEntry, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return LeaderEntry{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderTimeout)
		defer cancel()
	}
	m, err := js.Conn().RequestWithContext(ctx, apiPrefixOf(js)+"STREAM.MSG.GET."+stream(bucket), body)
	if err != nil {
		return LeaderEntry{}, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return LeaderEntry{}, fmt.Errorf("the answer does not decode: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return LeaderEntry{}, jetstream.ErrMsgNotFound
		}
		if resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
			return LeaderEntry{}, jetstream.ErrStreamNotFound
		}
		return LeaderEntry{}, resp.Error
	}
	if resp.Message == nil {
		return LeaderEntry{}, jetstream.ErrInvalidJetStreamResponse
	}
	e := LeaderEntry{Key: strings.TrimPrefix(resp.Message.Subject, kvPrefix(bucket)), Value: resp.Message.Data, Revision: resp.Message.Sequence}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return LeaderEntry{}, fmt.Errorf("the headers of revision %d do not decode: %w", e.Revision, err)
		}
		op := h.Get(kvOperation)
		e.Deleted = op == kvDelete || op == kvPurge
		e.Header = h
	}
	return e, nil
}

// kvPurge is the value of the KV-Operation header of a purge marker.
const kvPurge = "PURGE"

// kvPrefix returns the subject prefix of bucket's keys.
func kvPrefix(bucket string) string { return "$KV." + bucket + "." }

// stream returns the name of bucket's stream.
func stream(bucket string) string { return "KV_" + bucket }

// apiPrefixOf returns the JetStream API prefix js sends requests on:
// "$JS.API.", or a domain's or the one set with jetstream.WithAPIPrefix.
func apiPrefixOf(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return "$JS.API."
}
