package bus

// Waiting returns how many changes c's watch read while c was held and has
// yet to take.
func Waiting(c *Copy) int { return c.waiting() }
