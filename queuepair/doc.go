// Package queuepair provides the QueuePair handle: one route to one peer
// manager on which Put (RDMA WRITE) and Get (RDMA READ) are posted.
//
// Put and Get return at once with a *WorkRequest; Wait(ctx) blocks until it
// completes, Poll reports without blocking, Done gives a channel. Submit
// posts a batch of operations that share one deadline. Every operation has a
// deadline (the QueuePair's default timeout unless the batch context sets
// one). Data goes from the caller's goroutine to the backend: never through
// an actor mailbox.
//
// Contract: when a Put completes without error the bytes are in the remote
// buffer; when a Get completes without error they are in the local buffer.
// A work request completes exactly once, and only after the backend can no
// longer touch its local memory; until then the local region stays
// registered (Release waits for it). A failed operation's error wraps the
// sentinel that names its cause: buffer.ErrBadKey, ErrOutOfRange, ErrAccess,
// ErrReleased; backend.ErrPeerGone, ErrDeadline, ErrClosed; or this
// package's ErrWrongPeer, ErrLengthMismatch.
package queuepair
