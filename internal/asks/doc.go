// Package asks is the ask router of mesh-provisioner (spec section 6): a
// component with its own bus connection that takes the asks every module
// publishes on "asks.<module>", keeps one [mesh.Record] per ask at its id in
// the bucket mesh-asks_records, lets an operator answer an open ask, and
// marks an ask expired when its time is up.
//
// # Subjects
//
//   - "asks.<module>": a module publishes a [mesh.Ask]. The router records it
//     once (an id already recorded is not recorded again) with its Asker set
//     to <module>. A plain publish gets no answer; a request gets a [Reply]
//     with the record as held, or an error. Publishing is at most once on
//     the bus, so an asker that must know its ask is recorded sends it as a
//     request, or raises it again (harmless) while the records lack it.
//   - "mesh-asks.answer.<user>": a request [AnswerRequest] {"ask","option"}
//     answered with a [Reply]: the record, answered, or an error (unknown
//     ask, ask not open, option not offered). See [AnswerSubject].
//   - "mesh-asks.list": a request [ListRequest] {"state"} answered with a
//     [Listing] of records (open ones by default).
//   - "mesh-asks.withdraw.<asker>": a request [WithdrawRequest] {"ask","why"}
//     by the module that raised the ask (its name escaped as one token),
//     answered with a [Reply]. An open ask becomes expired with a warrant
//     {"asker","ask","outcome":"expired","by":{"who":<asker>,"kind":
//     "withdrawn","identity":<asker>},"at","why"}, and its expiry is
//     forgotten. An ask already expired (withdrawn or by the clock) is a
//     success that changes nothing; an answered ask is refused (not open:
//     the answer stands); an ask of another asker, or unknown, is refused.
//     See [WithdrawSubject] and [Withdraw]. As for answers, the bus
//     permissions must pin each module to its own withdraw subject.
//
// # Who answered
//
// NATS does not tell a responder who published a request. The answering
// user therefore names itself in the subject's last token (the user name
// escaped with package token), and the router writes that user into the
// warrant as {"who":<user>,"kind":"nats-user","identity":<user>}. The name is
// only as good as the bus permissions that pin it: each operator's NATS user
// must be allowed to publish on "mesh-asks.answer.<its own user>" only, and
// no other user on "mesh-asks.answer.>". The generated permissions (spec
// section 10) do that.
//
// # Expiry
//
// The router's own clock ends asks: one timer, armed for the earliest expiry
// among the open records (re-armed from the records at start), marks each
// due record expired with a warrant whose outcome is "expired". A withdrawn
// ask is forgotten by the timer; were it handed to the timer still, a
// record no longer open is left as it is.
package asks
