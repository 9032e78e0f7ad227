package vault

// MaxPerAsker is how many requests of one asker wait at once.
const MaxPerAsker = maxPerAsker

// Hold stops v's answerers taking requests until release is called: the
// requests read meanwhile wait in their askers' queues, or are dropped
// past [MaxPerAsker], so that a test sees the queues as a flood faster
// than the answerers leaves them.
func (v *Vault) Hold() (release func()) {
	v.fair.mu.Lock()
	v.fair.held = true
	v.fair.mu.Unlock()
	return func() {
		v.fair.mu.Lock()
		v.fair.held = false
		v.fair.mu.Unlock()
		v.fair.cond.Broadcast()
	}
}

// Waiting returns how many of who's requests wait in its queue, and how
// many of its requests were dropped since its drops were last said.
func (v *Vault) Waiting(who string) (waiting, dropped int) {
	v.fair.mu.Lock()
	defer v.fair.mu.Unlock()
	return len(v.fair.queues[who]), v.fair.dropped[who]
}

// Record makes v's answerers note the asker of each request they take
// from then on; taken returns them in the order taken.
func (v *Vault) Record() (taken func() []string) {
	v.fair.mu.Lock()
	v.fair.record, v.fair.taken = true, nil
	v.fair.mu.Unlock()
	return func() []string {
		v.fair.mu.Lock()
		defer v.fair.mu.Unlock()
		return append([]string(nil), v.fair.taken...)
	}
}

// Queued is a request queued while [Vault.RecordQueued] records: its
// asker, how many requests the answerers had taken before it (an index
// into taken), and how many of the other askers' requests waited then.
type Queued struct {
	Who    string
	Taken  int
	Others int
}

// RecordQueued is [Vault.Record], noting also each request queued from
// then on: queued returns them in the order queued, taken the askers of
// the requests taken.
func (v *Vault) RecordQueued() (queued func() []Queued, taken func() []string) {
	taken = v.Record()
	v.fair.mu.Lock()
	v.fair.queued = nil
	v.fair.mu.Unlock()
	return func() []Queued {
		v.fair.mu.Lock()
		defer v.fair.mu.Unlock()
		out := make([]Queued, len(v.fair.queued))
		for i, q := range v.fair.queued {
			out[i] = Queued{q.who, q.taken, q.others}
		}
		return out
	}, taken
}
