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

// Permissions returns the NATS permissions that let the party do exactly
// its rules: for each rule the subjects of the key-value API (see
// NATS-NOTES "Permissions") or the verb's subject. A party that may read
// only some keys of a bucket is never given the bare direct get or message
// get of the stream (they read any key), nor a consumer without a filter.
func (p Party) Permissions() Permissions {
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
	sub(InboxPrefix(p.User) + ".>")
	for _, r := range p.Rules() {
		switch r.Act {
		case Write:
			pub(streamInfo(r.Target), kvSubject(r.Target, r.Keys))
			sub(streamAdvisories(r.Target))
		case Read:
			pub(readSubjects(r.Target, r.Keys)...)
			sub(streamAdvisories(r.Target))
		case Make:
			// Creating a bucket asks the account's JetStream info first.
			pub(apiPrefix+"INFO", streamInfo(r.Target), apiPrefix+"STREAM.CREATE."+stream(r.Target))
		case Ask:
			pub(r.Target)
		case Answer:
			sub(r.Target)
			perm.Responses = true
		}
	}
	if perm.Responses {
		// A party that may reply keeps, in the server, a reply permission
		// for the reply subject of every message delivered to it, for two
		// minutes: for a watch, every key of the bucket (the ack subject of
		// its consumer), tens of megabytes in a cold start. Where it may
		// publish the reply anyway, the server keeps none: so it may
		// publish the acks of the buckets it reads (the watches' consumers
		// take no acks; they carry no key and no value).
		for _, r := range p.Rules() {
			if r.Act == Read {
				pub(ackSubject(r.Target))
			}
		}
	}
	return perm
}

// ackSubject returns the subject of the acks of bucket's consumers:
// "$JS.ACK.KV_<bucket>.>", or "$JS.ACK.*.>" for [AnyBucket].
func ackSubject(bucket string) string { return "$JS.ACK." + stream(bucket) + ".>" }

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
