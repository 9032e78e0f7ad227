package access

import (
	"slices"
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
// verbs only: it has no inbox, since it asks nothing.
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
	if acc == Storage {
		// The account's JetStream info (its use and limits, no key nor
		// value): how a component finds the JetStream of its domain from
		// an edge site's leafnode server (bus.HasJetStream).
		pub(apiPrefix + "INFO")
	}
	for _, r := range p.Rules() {
		if accountOf(r.Act) != acc {
			continue
		}
		switch r.Act {
		case Write:
			pub(streamInfo(r.Target), kvSubject(r.Target, r.Keys))
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
		case Ask:
			pub(r.Target)
		case Answer:
			sub(r.Target)
			perm.Responses = true
		}
	}
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

// readSubjects returns what a reader of keys in bucket publishes: stream
// info (a bucket handle, a watch's status), consumers (a watch), their
// deletion, flow control (a watch on a large bucket stalls without it) and
// direct gets. A reader of every key of every bucket also lists streams.
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
	out := []string{streamInfo(bucket), apiPrefix + "CONSUMER.DELETE." + s + ".*", "$JS.FC." + s + ".>"}
	if keys == AllKeys {
		return append(out, apiPrefix+"CONSUMER.CREATE."+s+".>", apiPrefix+"DIRECT.GET."+s+".>")
	}
	return append(out,
		apiPrefix+"CONSUMER.CREATE."+s+".*."+kvSubject(bucket, keys),
		apiPrefix+"DIRECT.GET."+s+"."+kvSubject(bucket, keys))
}
