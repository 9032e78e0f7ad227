package assemble

// OnHalting makes f call h with each component it is about to stop (its
// module unplaced, its node left and handed over), on the goroutine that
// stops it, before it is told to stop: a test holds a stop there to see
// what the follower does meanwhile.
func (f *Follower) OnHalting(h func(Component)) {
	f.mu.Lock()
	f.halting = h
	f.mu.Unlock()
}
