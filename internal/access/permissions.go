package access

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"slices"
	"strconv"
	"strings"
)

// Permissions are a party's NATS permissions: the subjects it may publish
// and subscribe to (patterns with "*" and ">"), and whether it may reply
// to the requests it receives (the server's allow_responses). Anything
// else is refused.
type Permissions struct {
	Publish   []string
	Subscribe []string
	Responses bool
}

// InboxPrefix returns the inbox prefix of user, "_INBOX_<user>": the
// party subscribes to "_INBOX_<user>.>" only, so that no user reads
// another's replies (package bus sets it on every connection).
func InboxPrefix(user string) string { return "_INBOX_" + user }

// Permissions returns the party's NATS permissions in the [Storage]
// account: [Party.PermissionsIn] of Storage.
func (p Party) Permissions() Permissions { return p.PermissionsIn(Storage) }

// PermissionsIn returns the NATS permissions of the party's user in
// account acc that let it do exactly its rules of that account ([Write],
// [Read] and [Make] in [Storage], [Answer] in [Services], [Ask] in
// [Requests]): for each rule the subjects of the key-value API (see
// NATS-NOTES "Permissions") or the verb's subject. A party that may read
// only some keys of a bucket is never given the bare direct get or message
// get of the stream (they read any key), nor a consumer without a filter.
// Only a user of Services may reply (Responses), and it subscribes to its
// verbs only: it has no inbox, since it asks nothing. Of JetStream's API a
// party publishes, beside its keys' direct gets (which the stream serves),
// only what a reader of every bucket or a maker of a bucket does: every
// other request waits in the server's one API queue, shared by every
// account (see readSubjects). Both lists are sorted.
func (p Party) PermissionsIn(acc Account) Permissions {
	var perm Permissions
	pub := func(s ...string) {
		for _, x := range s {
			if !slices.Contains(perm.Publish, x) {
				perm.Publish = append(perm.Publish, x)
			}
		}
	}
	sub := func(s string) {
		if !slices.Contains(perm.Subscribe, s) {
			perm.Subscribe = append(perm.Subscribe, s)
		}
	}
	if acc != Services {
		sub(InboxPrefix(p.User) + ".>")
	}
	for _, r := range p.rulesIn(acc) {
		switch r.Act {
		case Write:
			pub(kvSubject(r.Target, r.Keys))
			sub(streamAdvisories(r.Target))
		case Read:
			pub(readSubjects(r.Target, r.Keys)...)
			sub(streamAdvisories(r.Target))
		case Make:
			// Creating a bucket asks the account's JetStream info first;
			// the maker then updates its stream to refuse rollups and
			// bound its size (package bus).
			pub(apiPrefix+"INFO", streamInfo(r.Target), apiPrefix+"STREAM.CREATE."+stream(r.Target),
				apiPrefix+"STREAM.UPDATE."+stream(r.Target))
		case Remove:
			pub(apiPrefix + "STREAM.DELETE." + stream(r.Target))
		case Ask:
			pub(r.Target)
		case watchAsk:
			pub(watchPermission(p.User, r.Target, r.Keys))
		case Answer:
			sub(r.Target)
			perm.Responses = true
		}
	}
	// Sorted: the same rules in another order are the same permissions
	// (a user signed anew only when they change).
	slices.Sort(perm.Publish)
	slices.Sort(perm.Subscribe)
	return perm
}

const apiPrefix = "$JS.API."

// stream returns the stream of bucket ("KV_<bucket>"), or "*" for
// [AnyBucket].
func stream(bucket string) string {
	if bucket == AnyBucket {
		return "*"
	}
	return "KV_" + bucket
}

// kvSubject returns the subject of keys in bucket: "$KV.<bucket>.<keys>".
func kvSubject(bucket, keys string) string { return "$KV." + bucket + "." + keys }

func streamInfo(bucket string) string { return apiPrefix + "STREAM.INFO." + stream(bucket) }

// streamAdvisories returns the subject of the server's advisories that
// bucket's stream was created, deleted or updated: a watched copy (package
// bus) hears through them at once that the bucket it follows was deleted or
// made anew. They say no key and no value.
func streamAdvisories(bucket string) string {
	return "$JS.EVENT.ADVISORY.STREAM.*." + stream(bucket)
}

// readSubjects returns what a reader of keys in bucket publishes in
// [Storage]: flow control (a watch on a large bucket stalls without it)
// and direct gets of its keys' subjects. A reader of every key of every
// bucket (the seat, an operator) also asks the account's JetStream info,
// lists streams, asks their infos and creates, reads and deletes
// consumers. No other reader publishes to the server's JetStream API
// queue (docs/trust.md, "No scoped party queues JetStream API requests"):
// the server serves a direct get on the stream itself, while the API
// requests of every account wait in one queue, so that one party's flood
// of account or stream infos delayed every operator's request. Such a
// reader asks the seat for its watches ([WatchVerb]), finds the JetStream
// of its domain with a direct get of its keys (bus.HasJetStream) and has
// no stream info: a watch's status (the bucket's creation and last
// sequence) comes from the stream's advisories and the watch itself.
func readSubjects(bucket, keys string) []string {
	s := stream(bucket)
	if bucket == AnyBucket {
		return []string{
			apiPrefix + "INFO", apiPrefix + "STREAM.NAMES", apiPrefix + "STREAM.LIST",
			apiPrefix + "STREAM.INFO.*", apiPrefix + "CONSUMER.CREATE.>", apiPrefix + "CONSUMER.DELETE.>",
			apiPrefix + "CONSUMER.INFO.>", apiPrefix + "DIRECT.GET.>", apiPrefix + "STREAM.MSG.GET.*",
			"$JS.FC.>",
		}
	}
	out := []string{"$JS.FC." + s + ".>"}
	if keys == AllKeys {
		return append(out, apiPrefix+"DIRECT.GET."+s+".>")
	}
	return append(out, apiPrefix+"DIRECT.GET."+s+"."+kvSubject(bucket, keys))
}

// WatchNames is how many consumers the seat makes for one scoped reader
// on one bucket at a time ([WatchVerb]: its watches, and those the server
// keeps a few seconds after a watch stops).
const WatchNames = 8

// ConsumerNames returns the names the seat gives the consumers of user's
// watches on one bucket ([WatchVerb]): "<user>-w1-<token>" …
// "<user>-wN-<token>" ([WatchNames]; token from [WatchToken]), or
// "<user>-w1" … with no token. The seat creates them with the API's
// "create" action, never updating a consumer of that name: no asker's
// watch takes over another's, and no user holds more than WatchNames
// consumers of a bucket at a time.
func ConsumerNames(user, token string) []string {
	out := make([]string, WatchNames)
	for i := range out {
		out[i] = user + "-w" + strconv.Itoa(i+1)
		if token != "" {
			out[i] += "-" + token
		}
	}
	return out
}

// WatchToken returns the token of user's consumer names (see
// [ConsumerNames]): ten lower-case base32 characters of the HMAC-SHA256 of
// the user's name keyed by secret (the seed of the seat's user, which every
// seat process holds and no other party). The server acts on a consumer
// named in a subject for any message that reaches that subject
// ("$JS.API.CONSUMER.RESET.<stream>.<name>" resets the consumer to the
// sequence the message names): with names another party can guess, an
// operator's consumer delivering there could blind a party's watch. The
// token is the seat's to compute, from the asker's name that the server
// pinned in the subject, never from what the asker says: a user has one
// set of names per bucket. It changes with the seat's key (a rotation).
func WatchToken(secret []byte, user string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(user))
	return strings.ToLower(base32.StdEncoding.EncodeToString(mac.Sum(nil))[:10])
}
