package retire

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Asker is the module under whose name a retiring key's ask is raised, and
// the asker every warrant for such an ask must name.
const Asker = mesh.Module

// The options of a retiring key's ask: the only ones [Decide] accepts.
const (
	Yes = "yes" // remove: the provider lets the key's entry go
	No  = "no"  // keep: nothing is removed, and it is not asked again while nothing changes
)

// DefaultTTL is how long a retiring key's ask stays open when [Ask] is given
// no time to live: seven days.
const DefaultTTL = 7 * 24 * time.Hour

// Level of both options of a retiring key's ask: a person must approve.
const levelApprove = "approve"

// OnExpiry is what an ask of a retiring key says happens when nobody answers
// it in time.
const OnExpiry = "nothing is removed; it is asked again when it changes"

// ID returns the id of the ask a retiring key raises at now:
// "retire-<key with . as ->-<unix time in seconds>".
func ID(key mesh.ProvisionKey, now time.Time) string {
	return "retire-" + strings.ReplaceAll(key.String(), ".", "-") + "-" + strconv.FormatInt(now.Unix(), 10)
}

// Ask returns the ask that the retiring provision p at key raises at now,
// as the seat publishes it on "asks.mesh-provisioner" (spec 6): who
// "operator", expiring ttl after now (ttl <= 0 means [DefaultTTL]; the
// expiry is in UTC, whole seconds), about "provision.<key>", and the options
// [Yes] (Remove) and [No] (Keep), each binding [mesh.ActDigest] of its act
// for this key and ask id. Headline, explanation and details are written for
// a person who has not read the docs. Asker is [Asker].
func Ask(key mesh.ProvisionKey, p mesh.Provision, now time.Time, ttl time.Duration) mesh.Ask {
	return AskFor(key, p, RemovesEntry, now, ttl)
}

// Removal is what the provider of a retiring key can remove when the
// operator answers yes: its ask promises that and nothing more.
type Removal int

const (
	// RemovesEntry: the provider is placed on its node and keeps an entry
	// for the key; it removes what it set up (a credential, a login) and
	// then its entry.
	RemovesEntry Removal = iota
	// RemovesNothing: the provider answers the offer by its have (it runs
	// or not) and keeps nothing for the consumer: yes drops the key only.
	RemovesNothing
	// NothingGiven: the provider answers by entries but keeps none for the
	// key (it never answered it, or removed it already): yes drops the key.
	NothingGiven
	// ProviderGone: the provider is no longer placed on its node and still
	// keeps an entry: nothing running removes what it set up; yes drops the
	// key, and the operator cleans the rest by hand.
	ProviderGone
)

// Does returns what the Remove option of the ask for key k of p says
// when its provider can remove what how says: an ask whose Remove says
// otherwise promises what its provider can no longer do.
func Does(k mesh.ProvisionKey, p mesh.Provision, how Removal) string {
	if how != RemovesEntry {
		return describeNoRemoval(k, p, how).yes
	}
	return describe(k, p).yes
}

// AskFor is [Ask] for a key whose provider can remove what how says: the
// explanation and the Remove option say what yes does, never more.
func AskFor(key mesh.ProvisionKey, p mesh.Provision, how Removal, now time.Time, ttl time.Duration) mesh.Ask {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	k := key.String()
	id := ID(key, now)
	t := describe(key, p)
	if how != RemovesEntry {
		t = describeNoRemoval(key, p, how)
	}
	return mesh.Ask{
		ID:          id,
		Headline:    t.headline,
		Explanation: t.explanation,
		Who:         "operator",
		Expires:     now.Add(ttl).UTC().Truncate(time.Second),
		OnExpiry:    OnExpiry,
		About:       About(k),
		Details:     details(k, id, p),
		Options: []mesh.AskOption{
			{ID: Yes, Label: "Remove", Does: t.yes, Level: levelApprove, Binds: mesh.ActDigest(k, id, Yes)},
			{ID: No, Label: "Keep", Does: t.no, Level: levelApprove, Binds: mesh.ActDigest(k, id, No)},
		},
		Asker: Asker,
	}
}

// ProviderOf returns the provider an ask of a retiring key names in its
// details ("; provider <module> on <node>"), and whether it names one.
func ProviderOf(a mesh.Ask) (mesh.Ref, bool) {
	_, rest, ok := strings.Cut(a.Details, "; provider ")
	if !ok {
		return mesh.Ref{}, false
	}
	module, rest, ok := strings.Cut(rest, " on ")
	if !ok {
		return mesh.Ref{}, false
	}
	node, _, _ := strings.Cut(rest, ".")
	if !mesh.ValidName(module) || !mesh.ValidName(node) {
		return mesh.Ref{}, false
	}
	return mesh.Ref{Module: module, Node: node}, true
}

// About returns what the ask of the provision key is about:
// "provision.<key>".
func About(key string) string { return "provision." + key }

// texts are the person-facing texts of one retiring key's ask.
type texts struct {
	headline, explanation, yes, no string
}

// describe writes the texts of the ask for key: a credential of the vault
// (own or shared) reads differently from any other provision.
func describe(key mesh.ProvisionKey, p mesh.Provision) texts {
	consumer, cnode := p.Consumer.Module, p.Consumer.Node
	if consumer == "" {
		consumer, cnode = key.Consumer, key.Node
	}
	provider, pnode := p.Provider.Module, p.Provider.Node
	if provider == "" {
		provider = "its provider"
	}
	at := provider
	if pnode != "" {
		at = provider + " on " + pnode
	}
	no := "Nothing is removed: the key stays retiring, and you are not asked again until it changes."
	if key.Provision == mesh.CredentialProvision {
		if of, what, local, ok := credentialOf(key.Local); ok {
			thing := what + " of " + of
			if local != "" {
				thing += " (" + local + ")"
			}
			if of == consumer {
				// A shared credential: the provider's one value, which its
				// consumers on every node use.
				return texts{
					headline: fmt.Sprintf("Remove %s's shared credential for its %s%s?", consumer, what, paren(local)),
					explanation: fmt.Sprintf("No module needs the shared credential of the %s on %s any more "+
						"(key %s). If you remove it, %s deletes that credential, so nobody can log in with it "+
						"again. The %s itself and its data stay where they are.", thing, cnode, key, at, what),
					yes: fmt.Sprintf("%s deletes the shared credential of the %s on %s; the %s and its data stay.",
						at, thing, cnode, what),
					no: no,
				}
			}
			return texts{
				headline: fmt.Sprintf("Remove %s's credential for %s %s%s?", consumer, of, what, paren(local)),
				explanation: fmt.Sprintf("%s on %s no longer needs its own credential for the %s (key %s). "+
					"If you remove it, %s deletes that credential, so %s can no longer log in with it. "+
					"The %s itself and its data stay where they are.", consumer, cnode, thing, key, at, consumer, what),
				yes: fmt.Sprintf("%s deletes %s's credential for the %s; the %s and its data stay.",
					at, consumer, thing, what),
				no: no,
			}
		}
	}
	what := key.Provision
	return texts{
		headline: fmt.Sprintf("Remove %s's %s access%s?", consumer, what, paren(key.Local)),
		explanation: fmt.Sprintf("%s on %s no longer needs the %s%s that %s provides to it (key %s). "+
			"If you remove it, %s takes away %s's access: it removes what it set up for %s, such as a login, "+
			"and hands what %s owned to the %s's owner. The %s itself and its data stay where they are.",
			consumer, cnode, what, paren(key.Local), at, key, at, consumer, consumer, consumer, what, what),
		yes: fmt.Sprintf("%s removes %s's access to the %s%s and hands what %s owned to the %s's owner; "+
			"the %s and its data stay.", at, consumer, what, paren(key.Local), consumer, what, what),
		no: no,
	}
}

// credentialOf splits a credential key's local "<provider>_<provision>
// [_<local>]"; ok is false when it is not of that shape.
func credentialOf(local string) (provider, provision, sub string, ok bool) {
	parts := strings.SplitN(local, "_", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", "", "", false
	}
	if len(parts) == 3 {
		sub = parts[2]
	}
	return parts[0], parts[1], sub, true
}

// paren returns " (s)", or "" when s is empty.
func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// details says the facts behind the ask: the key and its bucket, consumer
// and provider, why it is retiring, what it depends on and refers to, and
// what each option binds.
func details(key, id string, p mesh.Provision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Key %s in %s", key, mesh.ProvisionsBucket)
	if p.Consumer.Module != "" {
		fmt.Fprintf(&b, "; consumer %s on %s", p.Consumer.Module, p.Consumer.Node)
	}
	if p.Provider.Module != "" {
		fmt.Fprintf(&b, "; provider %s on %s", p.Provider.Module, p.Provider.Node)
	}
	b.WriteString(".")
	if p.Why != "" {
		fmt.Fprintf(&b, " Retiring: %s.", strings.TrimSuffix(p.Why, "."))
	}
	if len(p.DependsOn) > 0 {
		fmt.Fprintf(&b, " Depends on %s.", strings.Join(p.DependsOn, ", "))
	}
	if p.Reference != nil {
		fmt.Fprintf(&b, " Refers to %s, generation %d.", p.Reference.ID, p.Reference.Generation)
	}
	fmt.Fprintf(&b, ` Each option binds the SHA-256 of the act {"ask":%q,"option":<option>,"provision":%q,"verb":%q}.`,
		id, key, mesh.RetireVerb)
	return b.String()
}
