package bus

import "github.com/nats-io/nats.go/jetstream"

// Waiting returns how many changes c's watch read while c was held and has
// yet to take.
func Waiting(c *Copy) int { return c.waiting() }

// SizeHint returns sizeHint(st): how many keys a copy's maps are made for
// before its watch's initial values.
func SizeHint(st jetstream.StreamState) int { return sizeHint(st) }
