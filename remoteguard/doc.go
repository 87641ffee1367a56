// Package remoteguard serves protoactor's remote protocol on a hardened gRPC
// endpoint, so that nothing a peer sends can crash the process, stop its
// actors, pass for local or make it dial an address the peer names.
//
// protoactor's own endpoint reader trusted its input: an envelope whose type is
// not linked into this binary, or whose type, target or sender index is out
// of range, panics on the gRPC handler goroutine and kills the process; its
// unary methods panic ("implement me"); and a remote Stop or PoisonPill
// stops any named actor, such as the manager. The guard (guard.go) checks
// every batch before protoactor sees it:
//
//   - a malformed batch (nil parts, indices out of range, unknown
//     serializer) ends the peer's stream with InvalidArgument;
//   - an envelope of a type this binary does not know is dropped and its
//     sender, if any, gets an ErrorReply with code UNKNOWN_MESSAGE, as for
//     any other message the manager does not handle;
//   - Stop and PoisonPill are dropped: peers do not stop our actors;
//   - Watch, Unwatch and Terminated without their PID are dropped;
//   - an envelope with a forged sender or a target in another process is
//     dropped, and every envelope kept is stamped as remote (sender.go);
//   - streams over the server-wide cap are refused before anything is read,
//     and the server bounds connections and messages (config.go,
//     conncap.go).
//
// Every refusal is counted by reason in the actor system's refusal book
// (internal/control), which the manager's status reports, and logged
// sampled. Unary Remoting calls are refused with Unimplemented, and any
// panic left in a handler is turned into an Internal error for that stream.
//
// Locality and reply addresses are never taken from a peer's word.
// protoactor delivers an envelope from the network as if it were sent in
// this process, with the sender PID the peer wrote into it, and answers
// (ctx.Respond, or any Send to that PID) by dialling the sender's address.
// So a peer could claim to be local (our own address as sender), or make us
// dial any address it names. The guard therefore:
//
//   - stamps every envelope that arrives over gRPC with the origin header
//     (overwriting whatever the peer put there): the manager takes an
//     envelope as remote exactly when it carries that header, that is by
//     how it arrived, never by its sender address;
//   - refuses (drops, counts, logs sampled) an envelope whose sender
//     claims one of our own addresses, names a host other than the one the
//     gRPC connection comes from (hosts are compared as IP literals; only
//     "localhost" is accepted as a name, on loopback connections), or names
//     an address other than the first one this connection spoke for: one
//     connection, one peer;
//   - refuses an envelope addressed to another process (protoactor would
//     relay it there), and a Watch or Unwatch whose watcher is not the
//     connection's peer (we would send Terminated to it).
//
// Replies thus go only to the peer itself. The manager never dials an
// address a peer merely names: RequestQueuePair (which sets up a route to
// the named manager) is refused to remote callers, and a route handshake's
// initiator address is only logged. Without an authenticated control plane
// a peer can still name another port on its own host; WithTLS runs the
// control plane over mutual TLS. Without TLS, WithSecret seals it with the
// deployment's shared secret: every gRPC connection, both ways, first
// proves the secret in a challenge-response (secret.go), and a peer that
// cannot never reaches protoactor (refusals counted under "secret").
//
// Contract: Start returns an error when it cannot listen (protoactor's own
// Start panics); a wildcard bind advertises a routable address of this
// host, never the wildcard (addr.go). Package node wires this package,
// the manager and the backends together; most callers want node.Start.
//
// The transport (transport*.go) is ours, not protoactor's remote.Remote:
// it speaks the same Remoting service and messages (protoactor peers and
// raw-wire clients talk to it unchanged), with one server reader per peer
// stream and one client endpoint per peer address that dials on the first
// message, batches envelopes, turns what it cannot deliver into dead
// letters at once (a request fails without waiting out its timeout) and
// publishes protoactor's EndpointTerminatedEvent when the peer's stream
// ends. protoactor's remote.Start writes grpc's global logger
// (grpclog.SetLoggerV2) on every start, which raced with every gRPC
// goroutine of the process; nothing here writes a gRPC global. Watching
// actors of another process is not served.
package remoteguard
