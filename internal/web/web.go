// Package web serves the operator's page: every node's provisions (state,
// why, since when), the modules held with their refusals, and the open asks
// with a button per option that answers as the operator's bus user.
//
// The page is HTML rendered on the server (html/template, embedded), kept
// live by server-sent events on /events that carry the page's content
// again after each change, and a small script that swaps it in; no build
// step. What it shows comes from watched copies (internal/bus) of
// mesh-provisioner_provisions, mesh-provisioner_refused and
// mesh-asks_records, never from the bus per request. Answers go to the ask
// router on mesh-asks.answer.<user> through [asks.Answer]. The answer
// endpoint takes only same-origin POSTs that carry the page's token.
package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Config configures a [Page].
type Config struct {
	// JS is the connection whose watched copies the page shows: it must be
	// allowed to read mesh-provisioner_provisions,
	// mesh-provisioner_refused and mesh-asks_records.
	JS jetstream.JetStream
	// NC is the connection answers go through: the operator's own.
	NC *nats.Conn
	// User is the NATS user NC is connected as; answers go on
	// mesh-asks.answer.<User> and the router names User in the warrant.
	// Empty means "operator".
	User string
	// Log receives odd keys and failed answers. Nil means slog.Default().
	Log *slog.Logger
	// Now is the page's clock, for "since" texts. Nil means time.Now.
	Now func() time.Time
	// Hosts are the host names (besides IP addresses and "localhost") the
	// page answers to; a request naming another host is refused, so that a
	// hostile site's name rebound to this address reads nothing.
	Hosts []string
	// AnswerTimeout bounds one answer's request to the router. Zero means
	// 5 s.
	AnswerTimeout time.Duration
}

// Page is the operator's page over watched copies. Create it with [New];
// it is an http.Handler safe for concurrent use.
type Page struct {
	cfg   Config
	log   *slog.Logger
	token string // the per-page token answers must carry

	mu       sync.Mutex
	provs    map[string]mesh.Provision
	refusals map[string]mesh.Refusal
	records  map[string]mesh.Record
	odd      map[string]string // "<bucket> <key>" -> why
	version  uint64            // counts changes taken
	changed  chan struct{}     // closed and replaced on each change

	copies []*bus.Copy
	done   <-chan struct{} // closed when the page stops following
}

// New starts following the page's buckets through cfg.JS until ctx is
// done and returns the page at once (empty until the copies are ready;
// [Page.Ready] says when).
func New(ctx context.Context, cfg Config) *Page {
	if cfg.User == "" {
		cfg.User = "operator"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AnswerTimeout == 0 {
		cfg.AnswerTimeout = 5 * time.Second
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	p := &Page{
		cfg:      cfg,
		log:      cfg.Log,
		token:    hex.EncodeToString(b),
		provs:    map[string]mesh.Provision{},
		refusals: map[string]mesh.Refusal{},
		records:  map[string]mesh.Record{},
		odd:      map[string]string{},
		changed:  make(chan struct{}),
		done:     ctx.Done(),
	}
	for _, bucket := range []string{mesh.ProvisionsBucket, mesh.RefusedBucket, mesh.RecordsBucket} {
		p.copies = append(p.copies, bus.Follow(ctx, cfg.JS, bucket, bus.Options{Log: cfg.Log, OnChange: p.take}))
	}
	return p
}

// Ready is closed once every copy the page shows holds its bucket's keys.
func (p *Page) Ready() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, c := range p.copies {
			<-c.Ready()
		}
		close(done)
	}()
	return done
}

// oddValue says why a value read with jsonhead.Decode (its names exact,
// spec 2) is odd.
func oddValue(err error) string {
	var name *jsonhead.NameError
	if errors.As(err, &name) {
		return "not as written: " + err.Error()
	}
	return "does not decode: " + err.Error()
}

// take takes one change of a copy into the page's decoded state.
func (p *Page) take(ch bus.Change) {
	p.mu.Lock()
	defer p.mu.Unlock()
	oddKey := ch.Bucket + " " + ch.Key
	delete(p.odd, oddKey)
	switch ch.Bucket {
	case mesh.ProvisionsBucket:
		delete(p.provs, ch.Key)
		if !ch.Deleted {
			var v mesh.Provision
			if err := jsonhead.Decode(ch.Value, &v); err != nil {
				p.odd[oddKey] = oddValue(err)
			} else {
				p.provs[ch.Key] = v
			}
		}
	case mesh.RefusedBucket:
		delete(p.refusals, ch.Key)
		if !ch.Deleted {
			var v mesh.Refusal
			if err := jsonhead.Decode(ch.Value, &v); err != nil {
				p.odd[oddKey] = oddValue(err)
			} else {
				p.refusals[ch.Key] = v
			}
		}
	case mesh.RecordsBucket:
		delete(p.records, ch.Key)
		if !ch.Deleted {
			var v mesh.Record
			if err := jsonhead.Decode(ch.Value, &v); err != nil {
				p.odd[oddKey] = oddValue(err)
			} else {
				p.records[ch.Key] = v
			}
		}
	}
	if why, ok := p.odd[oddKey]; ok {
		p.log.Warn("web: odd key", "bucket", ch.Bucket, "key", ch.Key, "why", why)
	}
	p.version++
	close(p.changed)
	p.changed = make(chan struct{})
}

// watch returns the current version and a channel closed at the next
// change.
func (p *Page) watch() (uint64, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version, p.changed
}

// answer answers the open ask id with option as the page's user.
func (p *Page) answer(ctx context.Context, id, option string) (mesh.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.AnswerTimeout)
	defer cancel()
	return asks.Answer(ctx, p.cfg.NC, p.cfg.User, id, option)
}
