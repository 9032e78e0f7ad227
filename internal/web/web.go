// Package web serves the operator's page at any mesh size: a summary of
// the mesh (every node with its plans, its provisions' counts per state,
// what it provides, its held modules and open asks; one page of nodes at a
// time), drill-down to a node, a module or a key (a key's whole fields and
// its why walk, internal/why), search by key, node, module and state, and
// the open asks with a button per option that answers as the operator's
// bus user.
//
// The page is HTML rendered on the server (html/template, embedded) from
// the page's own decoded state, which follows mesh-provisioner_provisions,
// mesh-provisioner_plans (keys only), mesh-provisioner_refused and
// mesh-asks_records (internal/bus copies, values not kept twice) and keeps
// per node and per module the counts and keys a view needs, so a view
// costs what it shows, not what the mesh holds. A view is one page of
// rows (see [PageSize]). The page stays live by server-sent events on
// /events: after a change the stream renders its view again and sends
// only the parts that differ (a row, a node's counts, the summary line),
// never the whole view or mesh again. Every 2 s it reads where the seat
// stands ([lookup.ReadSeat]) and says when no seat holds the lease, and
// since when the seat last wrote. Answers go to the ask router on
// mesh-asks.answer.<user> through [asks.Answer]; the answer endpoint takes
// only same-origin POSTs that carry the page's token.
//
// Every route answers only a browser logged in: one that opened the URL
// with the page's login secret ([Config.Login], kept in a file only the
// operator's Unix user may read, [ReadLogin]) and so holds a session
// cookie (HttpOnly, SameSite=Strict), and only on a Host that is the
// address it came in on (or localhost on loopback).
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
	// allowed to read mesh-provisioner_provisions, mesh-provisioner_plans,
	// mesh-provisioner_refused, mesh-asks_records and
	// mesh-provisioner_seat (read every 2 s: whether a seat holds the
	// lease), and for a key's why walk the keys it reads by key.
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
	// Login is the page's login secret ([ReadLogin]): a browser is let in
	// once it opened a URL with ?login=<Login> ([LoginURL]), which gives it
	// a session cookie; every other request is refused. Empty lets no
	// browser in.
	Login string
	// LoginFile is where Login is kept, said in the refusals.
	LoginFile string
}

// Page is the operator's page over watched copies. Create it with [New];
// it is an http.Handler safe for concurrent use.
type Page struct {
	cfg   Config
	log   *slog.Logger
	token string // the per-page token answers must carry
	// sessions are the browsers logged in with cfg.Login.
	sessions sessions

	mu       sync.Mutex
	provs    map[string]mesh.Provision
	refusals map[string]mesh.Refusal
	records  map[string]mesh.Record
	plans    map[string]mesh.NodeModule // plan keys; their values are not kept
	odd      map[string]string          // "<bucket> <key>" -> why
	idx      index
	seat     seatView
	version  uint64 // counts changes taken
	// searchRead counts the keys searches have read (each checked against
	// every term): what a search costs.
	searchRead int
	changed    chan struct{} // closed and replaced on each change

	copies []*bus.Copy
	done   <-chan struct{} // closed when the page stops following
}

// New starts following the page's buckets through cfg.JS until ctx is
// done and returns the page at once (empty until the copies are ready;
// [Page.Ready] says when).
func New(ctx context.Context, cfg Config) *Page {
	p := newPage(ctx, cfg)
	for _, bucket := range []string{mesh.ProvisionsBucket, mesh.PlansBucket, mesh.RefusedBucket, mesh.RecordsBucket} {
		p.copies = append(p.copies, bus.Follow(ctx, cfg.JS, bucket,
			bus.Options{Log: p.log, OnChange: p.take, RevisionsOnly: true}))
	}
	go p.followSeat(ctx)
	go func() { // once read, the summary stops saying it is still reading
		for _, c := range p.copies {
			select {
			case <-c.Ready():
			case <-ctx.Done():
				return
			}
		}
		p.mu.Lock()
		p.bump()
		p.mu.Unlock()
	}()
	return p
}

// newPage returns a page that follows nothing yet.
func newPage(ctx context.Context, cfg Config) *Page {
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
	return &Page{
		cfg:      cfg,
		log:      cfg.Log,
		token:    hex.EncodeToString(b),
		provs:    map[string]mesh.Provision{},
		refusals: map[string]mesh.Refusal{},
		records:  map[string]mesh.Record{},
		plans:    map[string]mesh.NodeModule{},
		odd:      map[string]string{},
		idx:      newIndex(),
		changed:  make(chan struct{}),
		done:     ctx.Done(),
	}
}

// ready reports whether every copy the page shows holds its bucket's keys
// (true for a page that follows nothing).
func (p *Page) ready() bool {
	for _, c := range p.copies {
		select {
		case <-c.Ready():
		default:
			return false
		}
	}
	return true
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

// take takes one change of a copy into the page's decoded state and its
// index.
func (p *Page) take(ch bus.Change) {
	p.mu.Lock()
	defer p.mu.Unlock()
	oddKey := ch.Bucket + " " + ch.Key
	delete(p.odd, oddKey)
	switch ch.Bucket {
	case mesh.ProvisionsBucket:
		old, had := p.provs[ch.Key]
		if had {
			p.idx.dropProvision(ch.Key, old)
			delete(p.provs, ch.Key)
		}
		if !ch.Deleted {
			var v mesh.Provision
			if err := jsonhead.Decode(ch.Value, &v); err != nil {
				p.odd[oddKey] = oddValue(err)
			} else {
				p.provs[ch.Key] = v
				p.idx.addProvision(ch.Key, v)
			}
		}
		if _, has := p.provs[ch.Key]; has != had {
			p.idx.keys = nil // a key came or went
		}
	case mesh.PlansBucket:
		if old, ok := p.plans[ch.Key]; ok {
			p.idx.dropPlan(ch.Key, old)
			delete(p.plans, ch.Key)
		}
		if !ch.Deleted {
			if k, err := mesh.ParseNodeModule(ch.Key); err != nil {
				p.odd[oddKey] = "key out of shape: " + err.Error()
			} else {
				p.plans[ch.Key] = k
				p.idx.addPlan(ch.Key, k)
			}
		}
	case mesh.RefusedBucket:
		if old, ok := p.refusals[ch.Key]; ok {
			p.idx.dropRefusal(ch.Key, old)
			delete(p.refusals, ch.Key)
		}
		if !ch.Deleted {
			var v mesh.Refusal
			if err := jsonhead.Decode(ch.Value, &v); err != nil {
				p.odd[oddKey] = oddValue(err)
			} else {
				p.refusals[ch.Key] = v
				p.idx.addRefusal(ch.Key, v)
			}
		}
	case mesh.RecordsBucket:
		if old, ok := p.records[ch.Key]; ok {
			p.idx.dropRecord(ch.Key, old)
			delete(p.records, ch.Key)
		}
		if !ch.Deleted {
			var v mesh.Record
			if err := jsonhead.Decode(ch.Value, &v); err != nil {
				p.odd[oddKey] = oddValue(err)
			} else {
				p.records[ch.Key] = v
				p.idx.addRecord(ch.Key, v)
			}
		}
	}
	if why, ok := p.odd[oddKey]; ok {
		p.log.Warn("web: odd key", "bucket", ch.Bucket, "key", ch.Key, "why", why)
	}
	p.bump()
}

// bump counts a change and wakes the event streams; the page's lock is
// held.
func (p *Page) bump() {
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
