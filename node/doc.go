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
// Backend selection (Config.Backend) fixes the backends a node runs and
// their order of preference: "auto", the default, is shm, ibverbs, TCP;
// "shm" is shm then TCP; "ibverbs" is ibverbs then TCP; "tcp" is TCP
// alone. TCP is always there and always last: every peer reaches it, and it
// is the shm backend's fallback (Config.Fallback) for regions that are not
// in shared memory. Under "auto" a backend that cannot run here is left
// out with a log line (info when this build has none: shm off Linux,
// ibverbs without -tags ibverbs; a warning when it failed to start, e.g.
// no RDMA device); a backend selected by name must start or Start fails.
//
// The choice is then made per peer, when the manager sets up a route
// (actor.Manager.StartChoices): it tries the backends in order and takes
// the first that connects. A backend that refuses the peer with
// rdmamgr.ErrNotSupported passes the turn to the next: shm refuses a peer
// on another host (another network or pid namespace counts as another
// host), the peer refuses a backend it does not run. So a peer on this
// host gets shm, a peer with RDMA gets ibverbs, and any other gets TCP.
// The route remembers why: the backends passed over before it with their
// reasons ("shm: peer is not on this host: not supported; ibverbs: not
// built with ibverbs support"), or "first choice" ("only backend" with one
// backend). The "route up" log line and status (RouteStatus.why; `rdmamgr
// status` prints it) say it; an inbound route says it was the peer's
// choice and names the handshakes we refused that peer on the way.
//
// Contract: Start does all I/O and returns a node whose manager answers,
// or an error with everything it had started closed again. Close is
// idempotent, concurrent calls wait for the first, and it returns once the
// manager (its routes, backends and registry), the remote and the actor
// system are shut down. The node's methods hand out typed clients, so a
// program needs no protoactor import to use the whole stack.
//
// Known data race (issue 22), not fixed yet: a Start while gRPC runs in
// the process. Each Start starts a protoactor remote (remoteguard.Start),
// and protoactor's remote.Start replaces grpc's global logger
// (grpclog.SetLoggerV2, remote/server.go:61) with a plain store, on every
// start, in every release. Every grpc goroutine of the process reads that
// global when it logs or checks a verbosity (transports, channelz on each
// connection state change): those of the nodes already talking and those
// of the program's own gRPC clients and servers. So under the race detector
// a Start while any of them runs is a data race (TestStartWhileGRPCTalks
// reports it on every run; it is skipped until the fix). Until then: start
// the nodes a process needs before they or the program's own gRPC talk, or
// run one node per process, as the rdmamgr daemon does.
//
// No ordering of starts fixes it. The race detector, like the memory
// model, needs each write ordered before or after every read, and grpc's
// goroutines read without taking anything a starter could take too. A
// start is ordered with a goroutine only if it comes before the goroutine
// is created, or after its end and synchronised with it (remoteguard's
// start probe and Stop's wait do the latter between one remote's start and
// the next's: nodes started and closed one after another are clean). "No
// other remote is live" is not enough either, as the program's own gRPC
// reads the logger too. What is race-free is one remote.Start per process,
// before any gRPC of the process starts, or none at all:
//
//   - One remote per process (issue 22's suggestion): the first Start
//     starts a shared actor system and remote, and every later node adds a
//     manager under a name of its own (DefaultName for the first) to it.
//     The nodes of a process then share Addr, the listen address, TLS and
//     the gRPC caps (a Start with different ones fails); peers name a
//     manager by address and name (ManagerRef carries both; --peer
//     host:port means DefaultName); nodes of one process reach each other
//     in-process, as local callers; and Close stops the node's manager but
//     not the shared remote, since restarting it writes the logger again.
//     The program's own gRPC must still start after its first node.
//   - A transport of our own in place of remote.Remote, on protoactor's
//     exported parts (the Remoting gRPC service, Serialize/Deserialize, the
//     process registry's address resolver): per-node remotes and this API
//     stay, and nothing writes the logger, at the cost of re-implementing
//     protoactor's endpoint manager, writers, reader and watchers.
//
// A patched copy of protoactor is not an option (no forks in this tree).
package node
