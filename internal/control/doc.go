// Package control holds what the two halves of the control plane share: the
// guard in front of protoactor's gRPC endpoint (package remoteguard) and the
// manager actor (package actor). Neither imports the other; both import this.
//
//   - The origin stamp (origin.go): the guard stamps every envelope that
//     arrives over the network, and the manager takes an envelope as remote
//     exactly when it carries the stamp, never from its sender address.
//   - The refusal book (refusals.go): one per actor system, counted by
//     reason by the guard and the manager alike, read by the manager's
//     status; its log lines are sampled.
//   - The control message limit (DefaultMaxMessageSize), enforced by the
//     gRPC transport and checked by the manager's client before it sends.
package control

// DefaultMaxMessageSize bounds control messages on the gRPC transport. The
// largest real one is a status reply (at most 1024 buffers listed, a few
// tens of KiB); requests are a few hundred bytes.
const DefaultMaxMessageSize = 1 << 20
