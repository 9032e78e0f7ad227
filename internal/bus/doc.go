// Package bus holds all NATS plumbing of mesh-provisioner: the embedded
// nats-server of the single-machine default, a connection per component,
// key-value buckets, and [Copy], a key-value bucket followed into memory by
// a supervised JetStream watch.
//
// Nothing outside this package (and the provider kit) imports nats.go's
// internals beyond jetstream.KeyValue; composition never touches the bus.
package bus
