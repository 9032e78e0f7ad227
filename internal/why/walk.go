// Package why walks a key of what the seat keeps back to the root cause of
// its state: a provision's depends-on, its provider's entry or have, the
// refusals of its consumer and provider, and its ask; a plan's provisions
// that are not provided; a refusal's why. It is pure: the mesh comes in as
// a [compose.State] (the seat's [state.Mesh], built from the buckets read
// once), the time as now, and the steps go out.
package why

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/compose"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// What a [Step] is about.
const (
	StepProvision = "provision" // a key of mesh-provisioner_provisions
	StepEntry     = "entry"     // the provider's entry, in <provider>_bound
	StepHave      = "have"      // the provider's have, in node-engine_have
	StepProvider  = "provider"  // the provider's module: its manifest or offer
	StepRefusal   = "refusal"   // a key of mesh-provisioner_refused
	StepPlan      = "plan"      // a key of mesh-provisioner_plans
	StepAsk       = "ask"       // the ask of a retiring key, in mesh-asks_records
)

// Step is one line of a walk: the key it is about, what kind of thing that
// is, its state when it has one, what it says, and since when (a
// provision's at, a refusal's since, an answer's time; zero when not
// known). Depth is how many steps it is away from the key asked about.
type Step struct {
	Depth int       `json:"depth"`
	What  string    `json:"what"`
	Key   string    `json:"key"`
	State string    `json:"state,omitempty"`
	Says  string    `json:"says"`
	Since time.Time `json:"since,omitzero"`
}

// ErrUnknownKey is returned (wrapped, naming the key) by [Walk] for a key
// that is neither a provision nor a plan nor a refusal the mesh keeps.
var ErrUnknownKey = errors.New("why: no provision, plan or refusal has this key")

// Walk walks key to the root cause of its state and returns one step per
// thing it passed, the key itself first, the root cause last (deepest
// first within a branch). key is a provision key
// (<node>.<consumer>.<provision>[.<local>]) or a plan or refusal key
// (<node>.<module>). A provision key the seat does not keep is walked to
// the refusal of its consumer when that module is held (a held module's
// new keys are never written), or, when it was retired, to the ask and
// the answer that removed it (st must then also name the key's ask, as
// lookup.State does with RetiredBy, or list the records, as the seat's
// state.Mesh does with Records). It returns ErrUnknownKey, wrapped, for a key
// the mesh does not keep and nothing says why, and a key error for a key
// out of shape.
func Walk(st compose.State, key string) ([]Step, error) {
	w := &walker{st: st, seen: map[string]bool{}}
	if pk, err := mesh.ParseProvisionKey(key); err == nil {
		if _, ok := st.Provision(key); !ok {
			if w.notKept(pk) {
				return w.steps, nil
			}
			return nil, fmt.Errorf("%w: %s", ErrUnknownKey, key)
		}
		w.provision(pk.String(), 0)
		return w.steps, nil
	}
	k, err := mesh.ParseNodeModule(key)
	if err != nil {
		if rk, rerr := mesh.ParseRefusalKey(key); rerr == nil {
			if r, ok := st.Refusal(key); ok {
				w.refusal(rk.String(), r, 0, "")
				return w.steps, nil
			}
		}
		return nil, fmt.Errorf("why %s: want a provision key or <node>.<module>: %w", key, err)
	}
	plan, hasPlan := st.Plan(key)
	r, held := st.Refusal(key)
	if !hasPlan && !held {
		return nil, fmt.Errorf("%w: %s", ErrUnknownKey, key)
	}
	if held {
		w.refusal(key, r, 0, "")
	}
	if hasPlan {
		w.plan(k, plan, 0)
	}
	return w.steps, nil
}

type walker struct {
	st    compose.State
	steps []Step
	seen  map[string]bool
}

func (w *walker) add(s Step) { w.steps = append(w.steps, s) }

// records is what a State that keeps the ask router's records offers
// beyond [compose.State]: each record, by ask id.
type records interface {
	Records(f func(id string, r mesh.Record))
}

// retiredBy is what a State that reads by key offers beyond
// [compose.State]: the id of the ask whose yes retired a provision key, as
// the key's delete marker names it ([mesh.AskHeader]).
type retiredBy interface {
	RetiredBy(key string) (string, bool)
}

// notKept walks a provision key the seat does not keep, and reports
// whether anything says why: its consumer held (the refusal), or the key
// retired (the ask answered yes that removed it).
func (w *walker) notKept(k mesh.ProvisionKey) bool {
	key := k.String()
	rk := mesh.RefusalKey{Node: k.Node, Module: k.Consumer}.String()
	if r, ok := w.st.Refusal(rk); ok {
		w.add(Step{What: StepProvision, Key: key, Says: saysHeldKey(k, r, strings.Contains(r.Why, key))})
		w.refusal(rk, r, 1, roleConsumer)
		return true
	}
	var yes *mesh.Record
	about := "provision." + key
	removed := func(r mesh.Record) bool {
		return r.Ask.About == about && r.State == mesh.RecordAnswered && r.Warrant != nil && r.Warrant.Option == "yes"
	}
	if rb, ok := w.st.(retiredBy); ok {
		// The key's delete marker names its ask: that one record is read.
		if id, ok := rb.RetiredBy(key); ok {
			if r, ok := w.st.Record(id); ok && removed(r) {
				yes = &r
			}
		}
	}
	if rs, ok := w.st.(records); ok && yes == nil {
		rs.Records(func(_ string, r mesh.Record) {
			if removed(r) && (yes == nil || r.Warrant.At.After(yes.Warrant.At)) {
				yes = &r
			}
		})
	}
	if yes == nil {
		return false
	}
	pr, named := retire.ProviderOf(yes.Ask)
	kept := false
	if named {
		_, kept, _ = w.st.Entry(pr.Module, key)
	}
	clean := retire.CleanByHand(k, mesh.Provision{Consumer: mesh.Ref{Module: k.Consumer, Node: k.Node}, Provider: pr})
	w.add(Step{What: StepProvision, Key: key, State: StateRetired, Says: saysRetired(yes.Ask, pr, kept, clean)})
	w.add(Step{Depth: 1, What: StepAsk, Key: yes.Ask.ID, State: yes.Warrant.Option, Says: saysRemovedBy(*yes), Since: yes.Warrant.At})
	return true
}

// provision walks a provision key.
func (w *walker) provision(key string, depth int) {
	if w.seen[key] {
		w.add(Step{Depth: depth, What: StepProvision, Key: key, Says: saysSeen})
		return
	}
	w.seen[key] = true
	p, ok := w.st.Provision(key)
	if !ok {
		w.add(Step{Depth: depth, What: StepProvision, Key: key, Says: saysNoProvision})
		return
	}
	w.add(Step{Depth: depth, What: StepProvision, Key: key, State: string(p.State), Says: saysProvision(p), Since: p.At})
	switch p.State {
	case mesh.Provided:
		return
	case mesh.Retiring:
		w.ask(key, p, depth+1)
		return
	}
	for _, dep := range p.DependsOn {
		if d, ok := w.st.Provision(dep); !ok || d.State != mesh.Provided {
			w.provision(dep, depth+1)
		}
	}
	w.provider(key, p, depth+1)
	if r, ok := w.st.Refusal(mesh.RefusalKey{Node: p.Provider.Node, Module: p.Provider.Module}.String()); ok {
		w.refusal(mesh.RefusalKey{Node: p.Provider.Node, Module: p.Provider.Module}.String(), r, depth+1, roleProvider)
	}
	if r, ok := w.st.Refusal(mesh.RefusalKey{Node: p.Consumer.Node, Module: p.Consumer.Module}.String()); ok {
		w.refusal(mesh.RefusalKey{Node: p.Consumer.Node, Module: p.Consumer.Module}.String(), r, depth+1, roleConsumer)
	}
}

// provider says what the provider's outcome for key is: its entry when it
// answers the offer by entries, else its have.
func (w *walker) provider(key string, p mesh.Provision, depth int) {
	pr := p.Provider
	// The provider's node's placement answers whether it is still there;
	// only a provider that left asks where it is now (every node's
	// placement): a walk reads what its answer needs.
	if placed, _ := w.st.Placed(pr.Node); !slices.Contains(placed, pr.Module) {
		// Whatever its entry or have still say, it answers nothing.
		w.add(Step{Depth: depth, What: StepProvider, Key: pr.Module, Says: saysProviderLeft(pr, w.st.NodesOf(pr.Module))})
		return
	}
	d, ok := w.st.Trunk(pr.Module)
	if !ok {
		w.add(Step{Depth: depth, What: StepProvider, Key: pr.Module, Says: saysNoTrunk(pr)})
		return
	}
	man, err := w.st.Manifest(d)
	if err != nil {
		w.add(Step{Depth: depth, What: StepProvider, Key: pr.Module, Says: saysBadManifest(pr, d, err)})
		return
	}
	offer, ok := man.Offer(p.Provision)
	if !ok {
		w.add(Step{Depth: depth, What: StepProvider, Key: pr.Module, Says: saysNoOffer(pr, p.Provision)})
		return
	}
	if man.ByEntries(offer) {
		bound := mesh.BoundBucket(pr.Module) + " " + key
		e, ok, err := w.st.Entry(pr.Module, key)
		switch {
		case err != nil:
			w.add(Step{Depth: depth, What: StepEntry, Key: bound, Says: saysEntryUndecodable(pr, err)})
		case !ok:
			if last, lost := w.st.Lost(pr.Module, key); lost {
				w.add(Step{Depth: depth, What: StepEntry, Key: bound, Says: saysEntryLost(pr, compose.Said(last))})
			} else if compose.IsLostEntryWhy(p.Why, pr) {
				w.add(Step{Depth: depth, What: StepEntry, Key: bound, Says: saysEntryLost(pr, "")})
			} else {
				w.add(Step{Depth: depth, What: StepEntry, Key: bound, Says: saysNoEntry(pr, man.ReadsPlans())})
			}
		default:
			state, why := e.Outcome()
			w.add(Step{Depth: depth, What: StepEntry, Key: bound, State: string(state), Says: saysEntry(pr, state, why)})
		}
		return
	}
	hk := mesh.NodeModule{Node: pr.Node, Module: pr.Module}.String()
	h, ok, err := w.st.Have(pr.Node, pr.Module)
	switch {
	case err != nil:
		w.add(Step{Depth: depth, What: StepHave, Key: hk, Says: saysHaveUndecodable(pr, err)})
	case !ok:
		w.add(Step{Depth: depth, What: StepHave, Key: hk, Says: saysNoHave(pr)})
	default:
		want, hasWant, _ := w.st.Want(pr.Node, pr.Module)
		w.add(Step{Depth: depth, What: StepHave, Key: hk, State: h.Phase + "/" + h.Health, Says: saysHave(pr, h, want, hasWant)})
	}
}

// ask says where the ask of a retiring key stands.
func (w *walker) ask(key string, p mesh.Provision, depth int) {
	if p.Warrant != nil {
		wa := p.Warrant
		s := Step{Depth: depth, What: StepAsk, Key: wa.Ask, State: wa.Option, Says: saysWarrant(p, *wa), Since: wa.At}
		w.add(s)
		if wa.Option == "yes" {
			if _, ok, _ := w.st.Entry(p.Provider.Module, key); ok {
				w.add(Step{Depth: depth + 1, What: StepEntry, Key: mesh.BoundBucket(p.Provider.Module) + " " + key,
					Says: saysEntryKept(p.Provider)})
			}
		}
		return
	}
	if p.Ask == "" {
		if deps, ok := compose.AfterDependents(p.Why); ok {
			w.add(Step{Depth: depth, What: StepAsk, Says: saysAfterDependents(deps)})
			return
		}
		w.add(Step{Depth: depth, What: StepAsk, Says: saysNoAsk})
		return
	}
	rec, ok := w.st.Record(p.Ask)
	if !ok {
		w.add(Step{Depth: depth, What: StepAsk, Key: p.Ask, Says: saysAskNotRecorded})
		return
	}
	s := Step{Depth: depth, What: StepAsk, Key: p.Ask, State: rec.State, Says: saysRecord(rec)}
	if rec.Warrant != nil {
		s.Since = rec.Warrant.At
	}
	w.add(s)
}

// refusal says why a module is held.
func (w *walker) refusal(key string, r mesh.Refusal, depth int, role string) {
	w.add(Step{Depth: depth, What: StepRefusal, Key: key, State: "held", Says: saysRefusal(r, role), Since: r.Since})
}

// plan says the build a plan is at and walks its provisions that are not
// provided.
func (w *walker) plan(k mesh.NodeModule, b []byte, depth int) {
	p, err := decodePlan(b)
	if err != nil {
		w.add(Step{Depth: depth, What: StepPlan, Key: k.String(), Says: saysPlanUndecodable(err)})
		return
	}
	waiting := 0
	var keys []string
	for _, pp := range p.Provisions {
		key := mesh.ProvisionKey{Node: k.Node, Consumer: k.Module, Provision: pp.Provision, Local: pp.Local}.String()
		if q, ok := w.st.Provision(key); !ok || q.State != mesh.Provided {
			waiting++
			keys = append(keys, key)
		}
	}
	w.add(Step{Depth: depth, What: StepPlan, Key: k.String(), Says: saysPlan(p, waiting)})
	for _, key := range keys {
		w.provision(key, depth+1)
	}
}
