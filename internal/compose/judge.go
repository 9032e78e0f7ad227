package compose

import (
	"cmp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// judge decides provision states (spec 5). out collects the keys that say
// something new; a key judged earlier in the same pass is read from out, so
// that a key sees the fresh state of the keys it depends on.
type judge struct {
	st   State
	now  time.Time
	opts options
	res  *Result
	out  map[string]mesh.Provision // res.Provisions
	// why is scratch memory for the why being made; see text.
	why []byte
	// trunks holds the trunk manifests read in this pass: a pass reads the
	// same few providers' for many keys.
	trunks []trunk
}

// trunk is a module's trunk manifest, or the error reading it gave.
type trunk struct {
	module string
	man    *mesh.Manifest
	err    error
}

// trunk returns the module's trunk manifest (mesh-indexer_modules, then
// mesh-indexer_manifests), [ErrNoManifest] when none is known, or the error
// its decoding gave; read once per pass.
func (j *judge) trunk(module string) (*mesh.Manifest, error) {
	for _, t := range j.trunks {
		if t.module == module {
			return t.man, t.err
		}
	}
	t := trunk{module: module, err: ErrNoManifest}
	if d, ok := j.st.Trunk(module); ok {
		t.man, t.err = j.st.Manifest(d)
	}
	j.trunks = append(j.trunks, t)
	return t.man, t.err
}

// text returns the why made in j.why: old itself when the bytes are the
// same, so that a why said again makes no new string.
func (j *judge) text(old string) string {
	if string(j.why) == old {
		return old
	}
	return string(j.why)
}

// Judge re-judges keys after their provider's entry or have changed, or the
// record of their ask, without composing their nodes. needOf returns the
// need that the last composition found for a key, or nil when no
// composition needs it. A needed key gets its outcome; a retiring key is
// decided on its ask's record (spec 6) and deleted once approved and its
// entry is gone; any other key is left as it is (only a composition decides
// that a key retires, and a composition raises its first ask). A warrant
// that fails its checks is refused: said in Problems, and the void ask is
// replaced by a new one in Asks. The result holds Provisions, Retired,
// Asks, Withdrawn and Problems.
func Judge(st State, keys []string, needOf func(key string) *Need, now time.Time, opts ...Option) *Result {
	res := &Result{Provisions: map[string]mesh.Provision{}}
	j := &judge{st: st, now: now, opts: optionsOf(opts), res: res, out: res.Provisions}
	var needs []*Need
	for _, k := range keys {
		if n := needOf(k); n != nil {
			needs = append(needs, n)
		} else if p, ok := st.Provision(k); ok && p.State == mesh.Retiring {
			j.retiring(k, p, false)
		}
	}
	j.needs(needs)
	sort.Strings(res.Retired)
	return res
}

// needs judges needed keys, those with no depends-on first.
func (j *judge) needs(needs []*Need) {
	// Keys are unique: a stable sort would give the same order.
	slices.SortFunc(needs, func(a, b *Need) int {
		if c := cmp.Compare(len(a.DependsOn), len(b.DependsOn)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	for _, n := range needs {
		j.needed(n)
	}
}

// judgeNode judges every key needed or held for the composed node.
func (c *composer) judgeNode() {
	j := &c.judge
	*j = judge{st: c.st, now: c.now, opts: c.opts, res: c.res, out: c.res.Provisions, why: j.why, trunks: j.trunks}
	needs := c.needs[:0]
	for _, n := range c.res.Needed {
		needs = append(needs, n)
	}
	var retire []string
	requireMore := false // a held consumer's key needs a provider not yet in c.requires
	for _, key := range c.keys {
		if _, ok := c.res.Needed[key]; ok {
			continue
		}
		p, _ := c.st.Provision(key)
		k, err := mesh.ParseProvisionKey(key)
		if err == nil {
			if _, held := c.res.Held[k.Consumer]; held && k.Node == c.node {
				// Not composed is not unneeded: a held consumer's key
				// still follows its provider (spec 5), needed as it
				// stands; one already retiring is decided on its ask.
				if p.State != mesh.Retiring {
					n := kept(key, p)
					c.res.Needed[key] = n
					needs = append(needs, n)
					if !slices.Contains(c.requires, p.Provider.Module) {
						c.require(p.Provider.Module)
						requireMore = true
					}
				}
				continue
			}
		}
		if c.dependedOn(key) {
			needs = append(needs, c.keptCredential(key, p))
			continue
		}
		retire = append(retire, key)
	}
	j.needs(needs)
	c.needs = needs
	if requireMore {
		// A change of a held key's provider composes this node again.
		sort.Strings(c.requires)
		c.res.Requires = c.requires
	}
	sort.Strings(retire)
	for _, key := range retire {
		if j.retire(key) {
			c.res.Retiring = append(c.res.Retiring, key)
		}
	}
	sort.Strings(c.res.Retired)
}

// kept returns the need of a key as the seat keeps it at p: its consumer,
// provider and depends-on as they stand.
func kept(key string, p mesh.Provision) *Need {
	return &Need{
		Key: key, Provision: p.Provision, Local: p.Local,
		Consumer: p.Consumer, Provider: p.Provider, DependsOn: p.DependsOn,
	}
}

// keptCredential returns the need of a key kept because a provision of
// another node depends on it ([kept]); a credential's vault is resolved as
// its dependents' compositions resolve it (composer.vaultNode), so that
// every node composing it judges it the same: with no vault to answer it,
// it has no provider (not: its vault left), and it follows a vault placed
// elsewhere.
func (c *composer) keptCredential(key string, p mesh.Provision) *Need {
	n := kept(key, p)
	if p.Provision != mesh.CredentialProvision || p.Provider.Module != mesh.VaultModule {
		return n
	}
	if vnode, problem := c.vaultNode(p.Consumer.Node, key); problem != "" {
		n.NoProvider = problem
	} else {
		n.Provider.Node = vnode
	}
	return n
}

// dependedOn reports whether a provision of another node depends on key.
// A dependent that is retiring still counts until it is retired: the
// operator may keep it, and it must not lose its credential meanwhile.
func (c *composer) dependedOn(key string) bool {
	for _, d := range c.st.DependentsOf(key) {
		if p, ok := c.st.Provision(d); ok && p.Consumer.Node != c.node {
			return true
		}
	}
	return false
}

// needed judges a needed key from its provider's outcome. A key that was
// retiring is needed again: its ask and warrant are cleared.
func (j *judge) needed(n *Need) {
	old, had := j.st.Provision(n.Key)
	p := mesh.Provision{
		Provision: n.Provision,
		Local:     n.Local,
		Consumer:  n.Consumer,
		Provider:  n.Provider,
		DependsOn: n.DependsOn,
	}
	// The reference is the one the current entry names, or none (spec 5):
	// a key that failed, or whose entry names no reference, shows none.
	p.State, p.Why, p.Reference = j.outcome(n, &old)
	if had && old.State == mesh.Retiring && old.Ask != "" && old.Warrant == nil {
		if j.res.Withdrawn == nil {
			j.res.Withdrawn = map[string]string{}
		}
		j.res.Withdrawn[n.Key] = old.Ask
	}
	j.put(n.Key, old, had, p)
}

// retire turns a held key that nothing needs any more to retiring and
// raises its ask, and reports whether it turned; a key already retiring is
// decided on its ask instead.
func (j *judge) retire(key string) bool {
	old, _ := j.st.Provision(key)
	if old.State == mesh.Retiring {
		j.retiring(key, old, true)
		return false
	}
	k, err := mesh.ParseProvisionKey(key)
	if err != nil {
		k = mesh.ProvisionKey{Node: old.Consumer.Node}
	}
	p := old
	p.State = mesh.Retiring
	p.Provider = j.follow(old)
	p.Why = whyRetiring(k, p)
	p.Ask, p.Warrant = "", nil
	if deps := j.dependents(key); len(deps) > 0 {
		p.Why += whyAfterDependents(deps) // asked once they are retired
	} else {
		j.raise(k, &p)
	}
	return j.put(key, old, true, p)
}

// dependents returns the keys the seat keeps that depend on key and are
// not retired in this pass, sorted: a key retires only after every key
// that depends on it is gone (spec 6), so that a credential is never
// removed under a key that still uses it. A key this pass writes anew
// without key in its depends-on (a consumer's database key moved from a
// shared credential to its own) no longer depends on it.
func (j *judge) dependents(key string) []string {
	var out []string
	for _, d := range j.st.DependentsOf(key) {
		if np, ok := j.out[d]; ok && !slices.Contains(np.DependsOn, key) {
			continue
		}
		if _, ok := j.st.Provision(d); ok && !slices.Contains(j.res.Retired, d) {
			out = append(out, d)
		}
	}
	return out
}

// retiring decides a key that is already retiring (spec 6): with no ask and
// no warrant, a composition raises one (raise); with an ask, its record is
// decided; approved with yes, the key is retired once its provider's entry
// is gone.
//
// A key that others still depend on is not asked about: its why says which
// keys it waits for; an open ask of such a key is withdrawn, and a yes is
// not taken (said). An approved key whose provider is no longer placed or
// running says so in its why.
func (j *judge) retiring(key string, p mesh.Provision, raise bool) {
	stored := p
	p = j.followed(key, p)
	moved := p.Provider != stored.Provider
	deps := j.dependents(key)
	switch {
	case p.Warrant != nil:
		if p.Warrant.Option != retire.Yes {
			if moved {
				j.put(key, stored, true, p)
			}
			return
		}
		if how, done := j.removed(key, p); done {
			j.retired(key, p, how)
			return
		}
		np := p
		np.Why = withoutNotes(p.Why) + j.notRemoved(key, p)
		j.put(key, stored, true, np)
	case p.Ask == "":
		if raise {
			k, err := mesh.ParseProvisionKey(key)
			if err != nil {
				return
			}
			np := p
			np.Why = withoutAfterDependents(p.Why)
			if len(deps) > 0 {
				np.Why += whyAfterDependents(deps)
			} else {
				j.raise(k, &np)
			}
			j.put(key, stored, true, np)
		} else if moved {
			j.put(key, stored, true, p)
		}
	default:
		rec, _ := j.st.Record(p.Ask)
		d := retire.Decide(key, p, rec, retire.Asker, retire.Trust{Now: j.now, Answerers: j.opts.answerers})
		np := p
		if len(deps) > 0 {
			switch {
			case d.Verdict == retire.Wait && rec.State == mesh.RecordOpen:
				// Asked before the keys that depend on it were known to stay:
				// the ask is withdrawn, and asked again once they are gone.
				if j.res.Withdrawn == nil {
					j.res.Withdrawn = map[string]string{}
				}
				j.res.Withdrawn[key] = p.Ask
				np.Ask = ""
				np.Why = withoutAfterDependents(p.Why) + whyAfterDependents(deps)
				j.put(key, stored, true, np)
				return
			case d.Verdict == retire.Warrant && d.Warrant.Option == retire.Yes:
				j.res.Problems = append(j.res.Problems, whyYesBeforeDependents(key, d.Warrant, deps))
				np.Ask = ""
				np.Why = withoutAfterDependents(p.Why) + whyAfterDependents(deps)
				j.put(key, stored, true, np)
				return
			}
		}
		if d.Verdict == retire.Wait && rec.State == mesh.RecordOpen && j.promiseKnown(p) {
			// An open ask whose Remove no longer says what the provider can
			// do (it left its node, or its entry came or went) is withdrawn
			// and asked anew: an ask never promises what nothing running
			// does.
			if k, err := mesh.ParseProvisionKey(key); err == nil {
				if o, _ := rec.Ask.Option(retire.Yes); o.Does != retire.Does(k, p, j.removal(key, p)) {
					if j.res.Withdrawn == nil {
						j.res.Withdrawn = map[string]string{}
					}
					j.res.Withdrawn[key] = p.Ask
					if j.res.WithdrawnWhy == nil {
						j.res.WithdrawnWhy = map[string]string{}
					}
					j.res.WithdrawnWhy[key] = whyPromiseChanged(key, stored.Provider)
					np.Ask = ""
					j.raise(k, &np)
					j.put(key, stored, true, np)
					return
				}
			}
		}
		switch d.Verdict {
		case retire.Warrant:
			np.Warrant = d.Warrant
		case retire.Clear:
			np.Ask = ""
		case retire.Refuse:
			// The record cannot warrant this act, and it is no longer open
			// to an answer: the ask is void. The key keeps its state and is
			// asked anew, so that the operator can still decide.
			j.res.Problems = append(j.res.Problems, d.Why)
			k, err := mesh.ParseProvisionKey(key)
			if err != nil {
				return
			}
			np.Ask = ""
			j.raise(k, &np)
		default:
			if moved {
				j.put(key, stored, true, p)
			}
			return
		}
		approved := np.Warrant != nil && np.Warrant.Option == retire.Yes
		var how retire.Removal
		done := false
		if approved {
			how, done = j.removed(key, np)
			if !done {
				np.Why = withoutNotes(np.Why) + j.notRemoved(key, np)
			}
		}
		j.put(key, stored, true, np)
		if done {
			j.retired(key, np, how)
		}
	}
}

// follow returns the provider a retiring key of p answers to now: its own
// when its module is still placed on its node; else the same module on the
// key's consumer node, or on the one node it is placed on (the same
// provider, another instance: a vault moved with its store, a postgres that
// handed on), as a requirement resolves it; else its own (it left, or is
// placed on several nodes, none chosen).
func (j *judge) follow(p mesh.Provision) mesh.Ref {
	nodes := j.st.NodesOf(p.Provider.Module)
	switch {
	case placedOn(nodes, p.Provider.Node):
		return p.Provider
	case placedOn(nodes, p.Consumer.Node):
		return mesh.Ref{Module: p.Provider.Module, Node: p.Consumer.Node}
	case len(nodes) == 1:
		return mesh.Ref{Module: p.Provider.Module, Node: nodes[0]}
	}
	return p.Provider
}

// followed returns the retiring key p following its provider ([judge.follow]):
// when the provider moved, its why names where it is now, keeping what it
// says of the keys it waits for.
func (j *judge) followed(key string, p mesh.Provision) mesh.Provision {
	to := j.follow(p)
	if to == p.Provider {
		return p
	}
	k, err := mesh.ParseProvisionKey(key)
	if err != nil {
		return p
	}
	p.Provider = to
	why := whyRetiring(k, p)
	if deps, ok := AfterDependents(p.Why); ok {
		why += noteAfterDependents + deps
	}
	p.Why = why
	return p
}

// promiseKnown reports whether what the provider of retiring p can
// remove on yes is known: its trunk manifest is read (what it answers its
// offer by). While it is not (a new trunk's manifest not yet taken: apply
// writes manifests, builds and modules one bucket after another, and the
// seat follows each on its own), an open ask is left as it was, not
// withdrawn and asked anew for a promise that only the missing manifest
// changed: it is asked once more at most, when the manifest comes and its
// promise changed indeed.
func (j *judge) promiseKnown(p mesh.Provision) bool {
	_, err := j.trunk(p.Provider.Module)
	return err == nil
}

// raise puts a new ask for the retiring key into p and the result. Its id
// is the key and the time; a second in which an ask of the same id was
// already recorded is skipped.
func (j *judge) raise(k mesh.ProvisionKey, p *mesh.Provision) {
	at := j.now
	for {
		if _, taken := j.st.Record(retire.ID(k, at)); !taken {
			break
		}
		at = at.Add(time.Second)
	}
	a := retire.AskFor(k, *p, j.removal(k.String(), *p), at, j.opts.askTTL)
	p.Ask = a.ID
	j.res.Asks = append(j.res.Asks, a)
}

// removal says what the provider of the retiring key can remove on yes
// (the ask promises no more): nothing when it answers by its have or keeps
// no entry for the key, nothing either when it left its node with its
// entry, else its entry and what it set up.
func (j *judge) removal(key string, p mesh.Provision) retire.Removal {
	if pman, err := j.trunk(p.Provider.Module); err == nil {
		if offer, ok := pman.Offer(p.Provision); ok && !pman.ByEntries(offer) {
			return retire.RemovesNothing
		}
	}
	if !j.entryKept(key, p) {
		return retire.NothingGiven
	}
	if !placedOn(j.st.NodesOf(p.Provider.Module), p.Provider.Node) {
		return retire.ProviderGone
	}
	return retire.RemovesEntry
}

// removed reports whether a key approved with yes is done (its provider
// keeps no entry for it, or left its node with it: nothing running will
// remove it) and what its provider removed.
func (j *judge) removed(key string, p mesh.Provision) (retire.Removal, bool) {
	if j.entryKept(key, p) {
		if placedOn(j.st.NodesOf(p.Provider.Module), p.Provider.Node) {
			return retire.RemovesEntry, false
		}
		return retire.ProviderGone, true
	}
	if pman, err := j.trunk(p.Provider.Module); err == nil {
		if offer, ok := pman.Offer(p.Provision); ok && !pman.ByEntries(offer) {
			return retire.RemovesNothing, true
		}
	}
	// Its entry is gone: removed by its provider when the key still says
	// what an entry said (a reference) or the entry's loss was seen.
	if _, lost := j.st.Lost(p.Provider.Module, key); lost || p.Reference != nil {
		return retire.RemovesEntry, true
	}
	return retire.NothingGiven, true
}

// retired lists key as retired, saying what its provider removed (how).
func (j *judge) retired(key string, p mesh.Provision, how retire.Removal) {
	j.res.Retired = append(j.res.Retired, key)
	k, err := mesh.ParseProvisionKey(key)
	if err != nil {
		return
	}
	if j.res.RetiredWhy == nil {
		j.res.RetiredWhy = map[string]string{}
	}
	j.res.RetiredWhy[key] = retire.WhyRetired(k, p, how)
}

// providerGone returns what the why of a key approved with yes adds while
// its provider, placed on its node, keeps its entry but is not running
// there: it does not remove the entry yet. Empty otherwise.
func (j *judge) providerGone(p mesh.Provision) string {
	h, ok, err := j.st.Have(p.Provider.Node, p.Provider.Module)
	switch {
	case err != nil:
		return whyApprovedHaveUndecodable(p.Provider, err)
	case !ok:
		return whyApprovedNoHave(p.Provider)
	case h.Phase != mesh.PhaseRunning:
		return whyApprovedNotRunning(p.Provider, h)
	}
	return ""
}

// notRemoved returns what the why of a key approved with yes adds while its
// provider keeps its entry: that nobody will remove it (providerGone), or,
// when the entry is failed or waits (its provider's removal failed), what
// the entry says. Empty otherwise.
func (j *judge) notRemoved(key string, p mesh.Provision) string {
	if gone := j.providerGone(p); gone != "" {
		return gone
	}
	e, ok, err := j.st.Entry(p.Provider.Module, key)
	if err != nil || !ok {
		return ""
	}
	if s, why := e.Outcome(); s == mesh.Failed || s == mesh.Waits {
		return whyApprovedNotRemoved(p.Provider, why)
	}
	return ""
}

// entryKept reports whether the provider of a key still keeps an entry for
// it: only then is the key not yet retired. A provider answering by its
// have keeps none.
func (j *judge) entryKept(key string, p mesh.Provision) bool {
	_, ok, err := j.st.Entry(p.Provider.Module, key)
	return ok || err != nil
}

// put keeps p for key when it says something new (its time aside).
func (j *judge) put(key string, old mesh.Provision, had bool, p mesh.Provision) bool {
	if had && same(old, p) {
		return false
	}
	p.At = j.now
	j.out[key] = p
	return true
}

// outcome is the state, why and reference of a needed key (spec 5). old is
// the key's stored provision (zero when none): its why and reference are
// taken again where the outcome says the same.
func (j *judge) outcome(n *Need, old *mesh.Provision) (mesh.State, string, *mesh.Reference) {
	if n.NoProvider != "" {
		if len(n.DependsOn) == 0 {
			// The credential itself: its vault is gone or not chosen.
			j.why = appendWhyHasNoProvider(j.why[:0], n.Provider, n.NoProvider)
		} else {
			j.why = appendWhyNoProvider(j.why[:0], n.DependsOn[0], n.NoProvider)
		}
		return mesh.Asked, j.text(old.Why), nil
	}
	// A provider that left its node answers nothing, whatever its entry
	// or have still say (a held consumer's key keeps its provider).
	if nodes := j.st.NodesOf(n.Provider.Module); !placedOn(nodes, n.Provider.Node) {
		j.why = appendWhyProviderLeft(j.why[:0], n.Provider, nodes)
		return mesh.Asked, j.text(old.Why), nil
	}
	pman, err := j.trunk(n.Provider.Module)
	if err != nil {
		return mesh.Asked, whyProviderUnknown(n.Provider, err), nil
	}
	offer, ok := pman.Offer(n.Provision)
	if !ok {
		return mesh.Asked, whyOfferGone(n.Provider, n.Provision), nil
	}
	// Whatever answers it, a key is no more than the keys it depends on: one
	// of them not provided, it waits for it, saying why that one is not.
	for _, dep := range n.DependsOn {
		if s, why := j.stateOf(dep); s != mesh.Provided {
			j.why = appendWhyDependsOn(j.why[:0], dep, s, why)
			return mesh.Waits, j.text(old.Why), nil
		}
	}
	if pman.ByEntries(offer) {
		return j.byEntry(n, pman, old)
	}
	return j.byHave(n, old)
}

func (j *judge) byEntry(n *Need, pman *mesh.Manifest, old *mesh.Provision) (mesh.State, string, *mesh.Reference) {
	e, ok, err := j.st.Entry(n.Provider.Module, n.Key)
	if err != nil {
		return mesh.Asked, whyEntryUndecodable(n.Provider, err), nil
	}
	if !ok {
		if IsLostEntryWhy(old.Why, n.Provider) {
			return mesh.Asked, old.Why, nil // still gone, since the time it says
		}
		if last, lost := j.st.Lost(n.Provider.Module, n.Key); lost {
			return mesh.Asked, whyEntryLost(n.Provider, Said(last), j.now), nil
		}
		// The key still says what an entry of its provider said: that
		// entry went while nobody followed it (the seat was not running).
		if said, ok := saidBefore(old, n.Provider); ok {
			return mesh.Asked, whyEntryLost(n.Provider, said, j.now), nil
		}
		j.why = appendWhyNoEntry(j.why[:0], n.Provider, pman.ReadsPlans())
		return mesh.Asked, j.text(old.Why), nil
	}
	state, why := e.Outcome()
	switch state {
	case mesh.Provided:
		if e.Generation < 0 {
			return mesh.Asked, whyEntryOdd(n.Provider, state, "its generation "+strconv.FormatInt(e.Generation, 10)+" is negative"), nil
		}
		var ref *mesh.Reference
		if e.VaultName != "" || e.Generation != 0 {
			ref = &mesh.Reference{ID: e.VaultName, Generation: e.Generation}
			if old.Reference != nil && *old.Reference == *ref {
				ref = old.Reference // the same: shared, never changed
			}
		}
		if why == "" {
			return mesh.Provided, "", ref
		}
		// A provided entry's why says more (a rotation not yet in
		// force): the key says it too, until the entry says nothing.
		j.why = appendWhyEntryOutcome(j.why[:0], n.Provider, state, why)
		return mesh.Provided, j.text(old.Why), ref
	case mesh.Failed, mesh.Waits:
		j.why = appendWhyEntryOutcome(j.why[:0], n.Provider, state, why)
		return state, j.text(old.Why), nil
	}
	return mesh.Asked, whyEntryOdd(n.Provider, state, why), nil
}

func (j *judge) byHave(n *Need, old *mesh.Provision) (mesh.State, string, *mesh.Reference) {
	h, ok, err := j.st.Have(n.Provider.Node, n.Provider.Module)
	if err != nil {
		return mesh.Asked, whyHaveUndecodable(n.Provider, err), nil
	}
	if !ok {
		j.why = appendWhyNotRunning(j.why[:0], n.Provider)
		return mesh.Asked, j.text(old.Why), nil
	}
	if h.Phase == mesh.PhaseFailed || h.Health == mesh.HealthFailed {
		j.why = appendWhyHaveFailed(j.why[:0], n.Provider, h)
		return mesh.Failed, j.text(old.Why), nil
	}
	want, hasWant, _ := j.st.Want(n.Provider.Node, n.Provider.Module)
	if h.Phase == mesh.PhaseRunning && h.Health == mesh.HealthOK && (!hasWant || h.Fingerprint == want) {
		return mesh.Provided, "", nil
	}
	j.why = appendWhyHaveNotReady(j.why[:0], n.Provider, h, want)
	return mesh.Asked, j.text(old.Why), nil
}

// placedOn reports whether node is one of nodes, sorted as
// [State.NodesOf] returns them.
func placedOn(nodes []string, node string) bool {
	_, found := slices.BinarySearch(nodes, node)
	return found
}

// stateOf is the state and why of key as judged in this pass, or as
// stored; a key not stored has no state.
func (j *judge) stateOf(key string) (mesh.State, string) {
	if p, ok := j.out[key]; ok {
		return p.State, p.Why
	}
	p, _ := j.st.Provision(key)
	return p.State, p.Why
}

// same reports whether two provisions say the same, their times aside.
func same(a, b mesh.Provision) bool {
	if a.Provision != b.Provision || a.Local != b.Local || a.Consumer != b.Consumer || a.Provider != b.Provider ||
		a.State != b.State || a.Why != b.Why || a.Ask != b.Ask || !slices.Equal(a.DependsOn, b.DependsOn) {
		return false
	}
	if (a.Reference == nil) != (b.Reference == nil) || a.Reference != nil && *a.Reference != *b.Reference {
		return false
	}
	if (a.Warrant == nil) != (b.Warrant == nil) || a.Warrant != nil && *a.Warrant != *b.Warrant {
		return false
	}
	return true
}
