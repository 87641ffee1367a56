package queuepair

import "errors"

var (
	// ErrWrongPeer: the remote buffer is not owned by this queue pair's peer.
	ErrWrongPeer = errors.New("queuepair: buffer not owned by the peer")
	// ErrLengthMismatch: local and remote buffers differ in length.
	ErrLengthMismatch = errors.New("queuepair: local and remote lengths differ")
	// ErrReleased: the queue pair was released.
	ErrReleased = errors.New("queuepair: released")
	// ErrNotLocal: the local buffer is not owned by this process's manager.
	ErrNotLocal = errors.New("queuepair: local buffer not owned by the local manager")
)
