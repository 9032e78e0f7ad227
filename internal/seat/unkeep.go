package seat

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The whys of an unkeep that clears nothing.
const (
	whyUnkeepBadRequest = "the request does not decode"
	whyUnkeepNoKey      = "no provision has this key"
	whyUnkeepNotKept    = "the key is not kept: only a retiring key the operator answered no can be unkept"
	whyUnkeepNoWrite    = "the seat could not write the key (said in its log); try again"
)

// subscribeUnkeep answers [mesh.UnkeepSubject] while the seat holds its
// lease: each request is handed to the loop, which alone writes keys. A
// message with no reply subject is dropped here, never queued for the
// loop nor said above debug: it has nobody to answer, and it is what an
// answer that an asker aimed at the verb's subject comes as (the server
// routes it back through the import: any party could so wake the loop
// and fill its queue and its log, one line per message, at the pace of
// any answer given at once, such as the seat's own refusal of a watch).
func (s *Seat) subscribeUnkeep(ctx context.Context) (func(), error) {
	sub, err := s.answerer().Subscribe(mesh.UnkeepSubject, func(m *nats.Msg) {
		if m.Reply == "" {
			s.log.Debug("seat: an unkeep with no reply dropped: nobody to answer", "subject", m.Subject)
			return
		}
		s.mu.Lock()
		s.unkeeps = append(s.unkeeps, m)
		s.mu.Unlock()
		s.poke()
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func (s *Seat) takeUnkeeps() []*nats.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.unkeeps
	s.unkeeps = nil
	return u
}

// unkeep clears the operator's no from each requested retiring key (its
// warrant and ask), so that the composition of its node, marked dirty,
// asks the operator again; and replies to each request (once the key's
// write has landed).
func (s *Seat) unkeep(ctx context.Context, msgs []*nats.Msg, d *dirty) {
	for _, m := range msgs {
		var req mesh.UnkeepRequest
		rep := mesh.UnkeepReply{}
		// Who asked is the server's word (the server lets operators
		// alone ask); a request it names no sender of (a JetStream
		// delivery, a reply routed back) is refused.
		who, err := s.answerer().Asker(m)
		if err != nil {
			rep.Error = err.Error()
			s.reply(m, rep)
			continue
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			rep.Error = whyUnkeepBadRequest + ": " + err.Error()
			s.reply(m, rep)
			continue
		}
		if who != "" {
			req.By = who
		}
		rep.Key = req.Key
		k, err := mesh.ParseProvisionKey(req.Key)
		p, ok := s.mesh.Provision(req.Key)
		switch {
		case err != nil:
			rep.Error = err.Error()
		case !ok:
			rep.Error = whyUnkeepNoKey
		case p.State != mesh.Retiring || p.Warrant == nil || p.Warrant.Option != retire.No:
			rep.Error = whyUnkeepNotKept
		default:
			was := *p.Warrant
			np := p
			np.Warrant, np.Ask = nil, ""
			np.At = s.cfg.Now().UTC()
			s.write(ctx, writes{provs: map[string]mesh.Provision{req.Key: np}}, d, func(_ int, wrote map[string]bool) {
				if !wrote[req.Key] {
					rep.Error = whyUnkeepNoWrite
				} else {
					s.log.Info("seat: unkept; the key is asked again", "key", req.Key, "by", req.By, "was", was.Option, "answered_by", was.By.Who)
					rep.Cleared = &was
					d.nodes[k.Node] = true
				}
				s.reply(m, rep)
			})
			continue
		}
		s.reply(m, rep)
	}
}

func (s *Seat) reply(m *nats.Msg, rep mesh.UnkeepReply) {
	b, _ := json.Marshal(rep)
	if err := m.Respond(b); err != nil {
		s.log.Warn("seat: unkeep reply failed", "key", rep.Key, "err", err)
	}
}
