package asks

import (
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// Module is the ask router's module name: its state is the bucket
// mesh-asks_records ([mesh.RecordsBucket]) and its verbs are the subjects
// "mesh-asks.<verb>".
const Module = "mesh-asks"

// Subjects of the ask router.
const (
	// AsksWildcard is where every module publishes its asks:
	// "asks.<module>".
	AsksWildcard = "asks.*"
	// AnswerPrefix is the prefix of [AnswerSubject].
	AnswerPrefix = Module + ".answer."
	// WithdrawPrefix is the prefix of [WithdrawSubject].
	WithdrawPrefix = Module + ".withdraw."
	// ListSubject is the verb that lists records: a [ListRequest] answered
	// with a [Listing].
	ListSubject = Module + ".list"
)

// queue is the queue group of every subscription of the router, so that of
// several routers one takes each message.
const queue = Module

// AnswerSubject returns "mesh-asks.answer.<user>", the subject on which the
// NATS user named user answers asks; the user name is escaped as one token
// (package token).
func AnswerSubject(user string) string { return AnswerPrefix + token.Escape(user) }

// WithdrawSubject returns "mesh-asks.withdraw.<asker>", the subject on
// which the module asker withdraws the asks it raised; the module name is
// escaped as one token (package token), as in [AnswerSubject].
func WithdrawSubject(asker string) string { return WithdrawPrefix + token.Escape(asker) }

// IdentityKind is the kind of identity the router writes into a warrant for
// the user who answered.
const IdentityKind = mesh.KindNATSUser

// clock is the "by" of a warrant that the router's clock writes when an ask
// expires: {"who":"mesh-asks","kind":"clock","identity":"mesh-asks"}.
var clock = mesh.Identity{Who: Module, Kind: "clock", Identity: Module}
