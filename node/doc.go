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
// With Config.Agent (the host agent's socket) the agent backend
// (backend/agent) runs right after shm, and ibverbs is left to the agent
// (the agent maps our memory from its memfds, and a registry whose memory
// a device pins exports none): a peer on another host that is
// attached to its own agent is reached through both agents; one that is
// not, or while ours is not there (retried every second in the background:
// Start does not wait for it), gets the next backend. The agent needs shm
// (Backend auto or shm).
//
// With Config.HostAgent.Socket the node is its host's agent
// (internal/hostagent): no shm, ibverbs then TCP under auto (the route to
// a far agent takes ibverbs when both agents run it; an ibverbs backend
// that cannot serve a host agent's frames is left out), ibverbs and TCP
// under ibverbs, TCP alone under tcp; HostAgent.Routes TCP
// connections or ibverbs queue pairs per pair of agents, and the attach listener, started after the
// manager and closed before it. A node is an agent or attached to one,
// not both. SetAgentFarCheck limits the far agents it dials (a serve
// --etcd daemon: its cluster's members).
//
// Config.CUDA names the CUDA driver GPU buffers (actor.WithDevice) are
// allocated through: a Driver as is, or Open to load libcuda.so.1 at Start
// (closed at Close; a machine without one starts all the same). Without
// one a device request fails with rdmamgr.ErrNotSupported naming why.
//
// The choice is then made per peer, when the manager sets up a route
// (actor.Manager.Start): it tries the backends in order and takes
// the first that connects. A backend that refuses the peer with
// rdmamgr.ErrNotSupported passes the turn to the next: shm refuses a peer
// on another host (another network or pid namespace counts as another
// host, and so does another Config.HostID: test rigs and processes that
// share a kernel but must act as separate hosts name their hosts), the
// peer refuses a backend it does not run. So a peer on this
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
// Nodes may start and close at any time, any number per process, while
// other nodes and the program's own gRPC talk: the control plane runs on
// remoteguard's transport of protoactor's Remoting protocol, which writes
// no gRPC global. (protoactor's own remote.Start replaces grpc's global
// logger on every start, a data race with every gRPC goroutine of the
// process that no start order avoids; TestStartWhileGRPCTalks checks the
// start-while-talking case under -race.)
package node
