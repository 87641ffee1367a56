package actor

import "github.com/rdmamgr/rdmamgr/internal/control"

// Refusal reasons, as counted in status (StatusResponse.refusals): the
// manager's and those of the guard in front of the gRPC endpoint (package
// remoteguard), which share one book per actor system.
const (
	// RefusedForgedSender: an envelope from the network whose sender
	// claims one of our own addresses, an address off the host the
	// connection comes from, or an address other than the one the
	// connection already spoke for.
	RefusedForgedSender = control.RefusedForgedSender
	// RefusedForeignTarget: an envelope from the network addressed to an
	// actor in another process (protoactor would relay it).
	RefusedForeignTarget = control.RefusedForeignTarget
	// RefusedMalformed: a malformed batch ended a peer's stream.
	RefusedMalformed = control.RefusedMalformed
	// RefusedStopActor: a peer asked to stop one of our actors.
	RefusedStopActor = control.RefusedStopActor
	// RefusedUnknownType: a message of a type this binary does not know.
	RefusedUnknownType = control.RefusedUnknownType
	// RefusedNotLocal: a peer asked for something only local callers get
	// (a queue pair, hence a route to an address it names).
	RefusedNotLocal = control.RefusedNotLocal
	// RefusedLimit: a request over a registry, remote or route cap.
	RefusedLimit = control.RefusedLimit
	// RefusedHandshake: a route handshake refused (authentication,
	// replay, rate).
	RefusedHandshake = control.RefusedHandshake
	// RefusedConn: a gRPC connection over the connection caps.
	RefusedConn = control.RefusedConn
	// RefusedStream: a gRPC stream over the stream cap.
	RefusedStream = control.RefusedStream
	// RefusedTLS: a peer failed the control plane's TLS handshake.
	RefusedTLS = control.RefusedTLS
	// RefusedSecret: a peer did not prove the shared secret on a control
	// connection (no TLS; --secret-file seals the control plane).
	RefusedSecret = control.RefusedSecret
)
