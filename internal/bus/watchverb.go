package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
)

// watchRequest is what a scoped party sends the seat to have a watch's
// consumer made ([access.WatchVerb]); the keys are in the subject, where
// the server checked them against the asker's permissions.
type watchRequest struct {
	// Deliver is the subject the consumer delivers to: one of the asker's
	// inbox ("_INBOX_<user>.<token>").
	Deliver string `json:"deliver"`
	// From is where the watch starts: "last" (each key's last value),
	// "new" (changes only) or "seq" (the stream sequence Seq and on).
	From string `json:"from"`
	Seq  uint64 `json:"seq,omitempty"`
	// MetaOnly delivers headers without values.
	MetaOnly bool `json:"meta_only,omitempty"`
	// Heartbeat is how often the server says the consumer is alive while it
	// has nothing to deliver, in nanoseconds; the seat keeps it within
	// [minWatchBeat, maxWatchBeat].
	Heartbeat time.Duration `json:"heartbeat"`
}

// Bounds of a watch's heartbeat the seat makes consumers with.
const (
	minWatchBeat = time.Second
	maxWatchBeat = 30 * time.Second
)

// watchAskerWait is how long a scoped watch waits for the seat's answer
// (the bus's default request deadline): a request that waited longer for
// its turn is dropped, neither served nor answered.
const watchAskerWait = 5 * time.Second

// watchWorkers is how many watch requests the seat serves at once, of as
// many askers (see watchTurns): a cold start of a large mesh asks
// thousands, each one consumer create.
const watchWorkers = 16

// ServeWatches answers [access.WatchWildcard] on a (the seat's answerer in
// the services account) until ctx is done, making each watch's consumer on
// js (the seat's JetStream, which may create consumers of every bucket). A
// request is answered with the JetStream API's reply to the consumer
// create (its "name" and "num_pending", or its "error"), or with an error
// of the API's shape: the asker its subject names is not the one the
// server's header names ([Answerer.SentBy]), the deliver subject is not
// the asker's inbox, the request does not decode. The consumer takes one of
// the asker's names ([access.ConsumerNames], token [Answerer.WatchToken]:
// keyed by a's seed, so a is the seat's answerer made with its
// credentials).
// Every seat process answers, in one queue group: a standby seat serves
// watches as well as the one holding the lease. Askers are served in turn,
// one request of each at a time, at most watchesWaiting of one asker
// waiting (the rest dropped): see watchTurns. It returns once the server
// has its subscription (or after 5 s without the server's word), or an
// error when it cannot subscribe.
func ServeWatches(ctx context.Context, a *Answerer, js jetstream.JetStream, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	js = unscoped(js)
	nc, api := js.Conn(), apiPrefixOf(js)
	turns := newWatchTurns(ctx)
	sub, err := a.QueueSubscribe(access.WatchWildcard, "mesh-provisioner-watch", func(m *nats.Msg) {
		user, err := watchAskerIn(a, m)
		if err != nil {
			log.Debug("bus: a watch request names no asker; refused", "subject", m.Subject, "err", err)
			_ = m.Respond(watchRefusal(jsWatchRefused, err.Error())) // at once, in no asker's turn
			return
		}
		who := watchAskerOf(user, m)
		if ok, say := turns.push(who, m); !ok && say > 0 {
			log.Warn("bus: an asker has too many watch requests waiting; those past them are dropped",
				"user", who, "waiting", watchesWaiting, "dropped", say, "per", watchDropsSaid)
		}
	})
	if err != nil {
		return fmt.Errorf("bus: answer %s: %w", access.WatchWildcard, err)
	}
	if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("bus: answer %s: %w", access.WatchWildcard, err)
	}
	for range watchWorkers {
		go func() {
			for {
				who, m, waited, ok := turns.pop()
				if !ok {
					return
				}
				if waited < watchAskerWait {
					_ = m.Respond(serveWatch(ctx, a, nc, api, m, log))
				} // else its asker gave up: no consumer, no answer
				turns.done(who)
			}
		}()
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	// A watch asked right after finds the subscription at the server
	// (while the connection is down, it is sent once it is back).
	_ = a.FlushTimeout(5 * time.Second)
	return nil
}

// watchRefusal returns the seat's answer refusing a watch request, in the
// API's shape: code (jsWatchRefused or jsWatchNamesHeld) and why.
func watchRefusal(code int, why string) []byte {
	status := 400
	if code == jsWatchNamesHeld {
		status = 409
	}
	b, _ := json.Marshal(consumerReply{Error: &nats.APIError{Code: status, ErrorCode: nats.ErrorCode(code), Description: why}})
	return b
}

// watchAskerIn returns the asker of the watch request m: the user its
// subject names ([access.WatchSubject]), which the server's permission
// pins to the user who published it, once the server's header agrees
// ([Answerer.SentBy]); "" on a server without accounts ([Answerer.Open]),
// where no connection has a user.
func watchAskerIn(a *Answerer, m *nats.Msg) (string, error) {
	user, _, _, err := access.ParseWatchSubject(m.Subject)
	if err != nil {
		return "", err
	}
	if a.Open() {
		return "", nil
	}
	if err := a.SentBy(m, user); err != nil {
		return "", err
	}
	return user, nil
}

// serveWatch makes the consumer one watch request m asks for and returns
// the reply; its asker was told apart when it was queued (watchAskerIn:
// the subject's, as the server's header says too).
func serveWatch(ctx context.Context, a *Answerer, nc *nats.Conn, api string, m *nats.Msg, log *slog.Logger) []byte {
	refuse := func(why string) []byte { return watchRefusal(jsWatchRefused, why) }
	user, bucket, pattern, err := access.ParseWatchSubject(m.Subject)
	if err != nil {
		return refuse(err.Error())
	}
	if a.Open() {
		user = ""
	}
	var req watchRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return refuse("the request does not decode: " + err.Error())
	}
	if why := deliverRefusal(a, user, req.Deliver); why != "" {
		// Said to the asker; at debug here, so that no party fills the
		// seat's log by asking again and again.
		log.Debug("bus: a watch's deliver subject refused", "user", user, "bucket", bucket, "deliver", req.Deliver, "why", why)
		return refuse(why)
	}
	cfg := watchConfig(req.Deliver, kvPrefix(bucket)+pattern, req.MetaOnly, min(max(req.Heartbeat, minWatchBeat), maxWatchBeat))
	switch req.From {
	case "last":
		cfg.DeliverPolicy = nats.DeliverLastPerSubjectPolicy
	case "new":
		cfg.DeliverPolicy = nats.DeliverNewPolicy
	case "seq":
		if req.Seq == 0 {
			return refuse(`"seq" needs a sequence`)
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = nats.DeliverByStartSequencePolicy, req.Seq
	default:
		return refuse(fmt.Sprintf("from %q is none of last, new, seq", req.From))
	}
	var names []string
	if user != "" {
		names = access.ConsumerNames(user, a.WatchToken(user))
	} else {
		names = []string{chanceName()} // no accounts: one connection space, a name of chance
	}
	raw, _, err := createConsumer(ctx, nc, api, bucket, names, cfg)
	if errors.Is(err, errNamesHeld) {
		return watchRefusal(jsWatchNamesHeld, err.Error())
	}
	if err != nil {
		log.Warn("bus: a watch's consumer was not made", "user", user, "bucket", bucket, "keys", pattern, "err", err)
		return refuse("the seat could not make the consumer: " + err.Error())
	}
	return raw
}

// jsWatchRefused is the error code of the seat's refusal of a watch
// request (in an API error's "err_code"), beside the server's own.
const jsWatchRefused = 19001

// jsWatchNamesHeld is the error code of the seat's answer that every
// consumer name of the asker's on the bucket is held ([errNamesHeld]).
const jsWatchNamesHeld = 19002

// maxDeliver bounds a watch's deliver subject, in bytes: the server
// writes it on every delivery, heartbeat and flow-control message.
const maxDeliver = 128

// deliverRefusal says why subject may not be the deliver subject of a
// watch asked by user, or "" when it may: the asker's inbox
// ("_INBOX_<user>.", which only the asker subscribes to) followed by
// tokens of [A-Za-z0-9_-], at most [maxDeliver] bytes in all. On a server
// without accounts ([Answerer.Open]) any inbox's tokens may.
func deliverRefusal(a *Answerer, user, subject string) string {
	if len(subject) > maxDeliver {
		return fmt.Sprintf("deliver subject of %d bytes: at most %d", len(subject), maxDeliver)
	}
	prefix := "_INBOX_"
	if !a.Open() {
		prefix = access.InboxPrefix(inboxToken(user)) + "."
	}
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return fmt.Sprintf("deliver subject %q is not in the asker's inbox %s>", subject, prefix)
	}
	if a.Open() {
		_, rest, _ = strings.Cut(rest, ".")
	}
	for _, t := range strings.Split(rest, ".") {
		if t == "" || strings.IndexFunc(t, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
		}) >= 0 {
			return fmt.Sprintf("deliver subject %q: after the inbox, tokens of [A-Za-z0-9_-] only", subject)
		}
	}
	return ""
}

// watchConfig returns the configuration of a watch's consumer delivering
// to deliver the messages of filter: an ordered push consumer in memory,
// acknowledging nothing, with flow control and heartbeat beat, removed by
// the server [watchInactive] after no subscription wants its messages.
func watchConfig(deliver, filter string, metaOnly bool, beat time.Duration) nats.ConsumerConfig {
	return nats.ConsumerConfig{
		DeliverSubject: deliver, AckPolicy: nats.AckNonePolicy, FilterSubject: filter,
		ReplayPolicy: nats.ReplayInstantPolicy, FlowControl: true, Heartbeat: beat,
		HeadersOnly: metaOnly, InactiveThreshold: watchInactive, MemoryStorage: true, Replicas: 1,
	}
}

// createConsumer creates cfg's consumer of bucket's stream with the API's
// "create" action under the first of names no consumer holds, and returns
// the API's reply as it came, with the name taken. A reply with an error
// other than a name held is returned as it is (its error set); err is
// the request's, or errNamesHeld when every name is held.
func createConsumer(ctx context.Context, nc *nats.Conn, api, bucket string, names []string, cfg nats.ConsumerConfig) ([]byte, string, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var last error
	for _, name := range names {
		cfg.Name = name
		req, err := json.Marshal(map[string]any{"stream_name": stream(bucket), "config": cfg, "action": "create"})
		if err != nil {
			return nil, "", err
		}
		m, err := nc.RequestWithContext(ctx, api+"CONSUMER.CREATE."+stream(bucket)+"."+name+"."+cfg.FilterSubject, req)
		if err != nil {
			return nil, "", err
		}
		var r consumerReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return nil, "", fmt.Errorf("the API's reply does not decode: %w", err)
		}
		if r.Error != nil {
			if c := r.Error.ErrorCode; c == jsConsumerExists || c == nats.JSErrCodeConsumerAlreadyExists || c == nats.JSErrCodeConsumerNameExists {
				last = r.Error
				continue // a consumer of the name is still held by the server: the next name
			}
		}
		return m.Data, name, nil
	}
	return nil, "", fmt.Errorf("%w (%w)", errNamesHeld, last)
}

// errNoSeat wraps the error of a scoped watch that no seat answered.
var errNoSeat = errors.New("no seat answers watches (is the seat running?)")

// watchAsker returns what a scoped party's watches get the connection
// they ask the seat on from ([watchAsk]): nc itself without credentials (a
// server without accounts, one connection space), else d's user in the
// requests account ([ConnectIn]), dialled at the first watch that asks and
// closed with nc.
func watchAsker(nc *nats.Conn, d Dial) func() (*watchAsk, error) {
	if d.Creds == "" {
		a := &watchAsk{nc: nc, user: access.NoUser}
		return func() (*watchAsk, error) { return a, nil }
	}
	var mu sync.Mutex
	var ask *watchAsk
	closed := false
	own := nc.Opts.ClosedCB
	nc.SetClosedHandler(func(c *nats.Conn) {
		if own != nil {
			own(c)
		}
		mu.Lock()
		defer mu.Unlock()
		closed = true
		if ask != nil {
			ask.nc.Close()
		}
	})
	return func() (*watchAsk, error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case closed:
			return nil, nats.ErrConnectionClosed
		case ask != nil:
			return ask, nil
		}
		a := &watchAsk{waiting: map[string][]chan error{}, user: CredsUser(AccountCreds(d.Creds, access.Requests))}
		if a.user == "" {
			return nil, fmt.Errorf("bus: %s holds no user JWT with a name: no watch can be asked as its user", AccountCreds(d.Creds, access.Requests))
		}
		dd := d
		dd.OnRemoved = nil // the storage connection says it
		dd.OnRefused = func(err error) {
			a.refused(err)
			if d.OnRefused != nil {
				d.OnRefused(err) // a command says it, as any refusal
			}
		}
		c, err := ConnectIn(dd, access.Requests)
		if err != nil {
			return nil, err
		}
		a.nc, ask = c, a
		return a, nil
	}
}

// watchAsk is the connection a scoped party's watches ask the seat on, and
// the watch requests waiting for their answer: the server refuses a
// request on a subject the user may not publish with an asynchronous
// error only, which is handed to the requests waiting on that subject so
// that a watch of keys the party may not read fails at once, with the
// server's refusal.
type watchAsk struct {
	nc *nats.Conn
	// user is the asker's user name (its requests user's JWT name), the
	// asker token of its watch subjects; [access.NoUser] without
	// credentials.
	user    string
	mu      sync.Mutex
	waiting map[string][]chan error // by subject; nil on a connection of no user
}

// request sends body on subject and returns the answer, or the server's
// refusal of the subject as soon as it comes.
func (a *watchAsk) request(ctx context.Context, subject string, body []byte) (*nats.Msg, error) {
	if a.waiting == nil {
		return a.nc.RequestWithContext(ctx, subject, body)
	}
	refused := make(chan error, 1)
	a.mu.Lock()
	a.waiting[subject] = append(a.waiting[subject], refused)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		list := a.waiting[subject]
		for i, ch := range list {
			if ch == refused {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(a.waiting, subject)
		} else {
			a.waiting[subject] = list
		}
	}()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case err := <-refused:
			cancel(err)
		case <-ctx.Done():
		}
	}()
	m, err := a.nc.RequestWithContext(ctx, subject, body)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, nats.ErrPermissionViolation) {
		return nil, cause
	}
	return m, err
}

// refused hands err (a permissions violation) to the requests waiting on
// its subject.
func (a *watchAsk) refused(err error) {
	_, rest, ok := strings.Cut(err.Error(), "Permissions Violation for Publish to \"")
	if !ok {
		return
	}
	subject, _, _ := strings.Cut(rest, "\"")
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ch := range a.waiting[subject] {
		select {
		case ch <- err:
		default:
		}
	}
}
