// Package retire holds the pure steps of retiring a provision key (spec
// section 6): [Ask] shapes the one ask a retiring key raises on
// "asks.mesh-provisioner", and [Decide] turns the ask router's record of
// that ask into a [Decision] for the key: a warrant to write, an ask to
// clear, a refusal with its why, or nothing yet.
//
// Package retire does no I/O and never reads the clock: the time comes in as
// an argument. The seat calls it and writes what it decides.
package retire
