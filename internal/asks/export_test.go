package asks

// HoldRecords keeps the router's copy of mesh-asks_records from taking the
// bus's changes until release is called: the copy is behind the bucket, as
// while its watch starts again.
func HoldRecords(r *Router) (release func()) { return r.records.Hold() }
