// Package node assembles one endpoint of rdmamgr: an actor system, the
// protoactor remote on a hardened gRPC endpoint (package remoteguard), the
// data-plane backends and the manager (package actor), from one Config, and
// closes all of them with one Close.
//
// It is the one place that knows the concrete backends: package actor
// knows only the backend.Backend interface. Adding a backend touches this
// package (backends.go: build it over the manager's registry, start it,
// decide where it goes in the order of preference) and the backend's own
// package, nothing in actor.
//
// Backend selection: "tcp" runs the TCP backend alone; "ibverbs" runs
// ibverbs first and TCP beside it (peers without RDMA still reach our
// buffers), and fails when ibverbs cannot start; "auto" is ibverbs where a
// usable device exists and TCP alone otherwise, with a log line saying why.
//
// Contract: Start does all I/O and returns a node whose manager answers,
// or an error with everything it had started closed again. Close is
// idempotent, concurrent calls wait for the first, and it returns once the
// manager (its routes, backends and registry), the remote and the actor
// system are shut down. The node's methods hand out typed clients, so a
// program needs no protoactor import to use the whole stack.
package node
