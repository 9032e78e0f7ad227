package access

import (
	"fmt"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// WatchVerb begins the subjects of the seat's verb that makes a scoped
// party's watch: "mesh-provisioner.watch.<asker>.<bucket>.<keys>"
// ([WatchSubject]). No party but the seat and the operators creates a
// consumer: the server checks a consumer create against the name and
// filter in its subject, not against the rest of its configuration, so a
// party that may create a consumer under one name may make a kind of
// consumer (a direct sourcing one) that the server renames, counts in no
// limit, and keeps alive for as long as the party subscribes to its
// deliveries: thousands of consumers delivering every write of a bucket,
// which took the seat's lease. A scoped party asks the seat instead, from
// its user in [Requests]: its permission to publish the verb's subject is
// the server's check that the keys are its to read and that the asker
// named is itself ([Party.PermissionsIn]), and the seat makes the consumer
// with a configuration of its own, delivering to the asker's inbox only,
// under one of the asker's names ([ConsumerNames]).
const WatchVerb = mesh.Module + ".watch"

// WatchWildcard is every subject of [WatchVerb]: what the seat answers.
const WatchWildcard = WatchVerb + ".>"

// WatchRest is the last token of a watch subject that stands for ">" (the
// rest of the keys): a subject published holds no wildcard, and no key
// token is "=" (an escaped token's "=" is followed by two hex digits).
const WatchRest = "="

// NoUser is the asker token of a watch subject on a server without
// accounts, where a connection has no user: no user name is "_" (names
// are [a-z0-9-]).
const NoUser = "_"

// WatchSubject returns the subject on which user asks the seat for a watch
// of the keys of bucket matching pattern:
// "mesh-provisioner.watch.<user>.<bucket>.<pattern>" with a last ">"
// written [WatchRest] (user [NoUser] on a server without accounts). It
// returns an error for a user or bucket that is no subject token, a
// pattern with "*" (no party's reads name one), a ">" that is not its
// last token, or an empty token.
func WatchSubject(user, bucket, pattern string) (string, error) {
	if user == "" || strings.ContainsAny(user, ".*> ") {
		return "", fmt.Errorf("access: watch: user %q is no user name", user)
	}
	if bucket == "" || strings.ContainsAny(bucket, ".*> ") {
		return "", fmt.Errorf("access: watch: bucket %q is no bucket name", bucket)
	}
	tokens := strings.Split(pattern, ".")
	for i, t := range tokens {
		switch {
		case t == ">" && i == len(tokens)-1:
			tokens[i] = WatchRest
		case t == "" || t == WatchRest || strings.ContainsAny(t, "*> "):
			return "", fmt.Errorf("access: watch of %s: pattern %q: a scoped watch takes keys and a last \">\" only", bucket, pattern)
		}
	}
	return WatchVerb + "." + user + "." + bucket + "." + strings.Join(tokens, "."), nil
}

// ParseWatchSubject returns the asker, the bucket and the key pattern a
// watch subject ([WatchSubject]) names, or an error naming what is out of
// shape.
func ParseWatchSubject(subject string) (user, bucket, pattern string, err error) {
	rest, ok := strings.CutPrefix(subject, WatchVerb+".")
	user, rest, ok2 := strings.Cut(rest, ".")
	bucket, keys, ok3 := strings.Cut(rest, ".")
	if !ok || !ok2 || !ok3 || user == "" || bucket == "" || keys == "" {
		return "", "", "", fmt.Errorf("access: %q is no watch subject (%s.<user>.<bucket>.<keys>)", subject, WatchVerb)
	}
	tokens := strings.Split(keys, ".")
	for i, t := range tokens {
		switch {
		case t == WatchRest && i == len(tokens)-1:
			tokens[i] = ">"
		case t == "" || t == WatchRest || strings.ContainsAny(t, "*> "):
			return "", "", "", fmt.Errorf("access: %q: token %q of the keys is out of shape", subject, t)
		}
	}
	return user, bucket, strings.Join(tokens, "."), nil
}

// watchPermission returns what user, a reader of keys in bucket, publishes
// in [Requests] to ask for its watches: the verb's subjects of those keys
// under its own name (keys a NATS pattern, as in the rule).
func watchPermission(user, bucket, keys string) string {
	return WatchVerb + "." + user + "." + bucket + "." + keys
}

// ScopedReader reports whether the party reads some bucket as a scoped
// party: a [Read] rule other than [AnyBucket]'s. Such a party asks the
// seat for its watches ([WatchVerb]) and so has a user in [Requests].
func (p Party) ScopedReader() bool {
	for _, r := range Table {
		if r.Act == Read && r.Target != AnyBucket && p.Has(r.Role) && r.Role != Seat && r.Role != Operator {
			return true
		}
	}
	return false
}

// watchAsk is the act of a rule [Party.rulesIn] makes of a scoped [Read]
// rule in [Requests]: asking the seat for watches of its keys.
const watchAsk Act = "ask-watch"

// rulesIn returns the party's rules whose acts are done in account acc
// ([Party.Rules]), and in [Requests] a [watchAsk] rule per scoped [Read]
// rule (its target and keys).
func (p Party) rulesIn(acc Account) []Rule {
	var out []Rule
	for _, r := range p.Rules() {
		if accountOf(r.Act) == acc {
			out = append(out, r)
		}
		if acc == Requests && r.Act == Read && r.Target != AnyBucket {
			out = append(out, Rule{Role: r.Role, Act: watchAsk, Target: r.Target, Keys: r.Keys})
		}
	}
	return out
}
