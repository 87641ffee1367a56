package queuepair

import "github.com/rdmamgr/rdmamgr"

// The errors a Put or Get reports before it reaches the backend. They are
// the module's sentinels (package rdmamgr lists them all) under the names
// this package has always had.
var (
	// ErrWrongPeer: the remote buffer is not owned by this queue pair's peer.
	ErrWrongPeer = rdmamgr.ErrWrongPeer
	// ErrLengthMismatch: local and remote buffers differ in length.
	ErrLengthMismatch = rdmamgr.ErrLengthMismatch
	// ErrReleased: the queue pair (or the local buffer) was released.
	ErrReleased = rdmamgr.ErrReleased
	// ErrNotLocal: the local buffer is not owned by this process's manager;
	// the error also matches rdmamgr.ErrInvalid.
	ErrNotLocal = rdmamgr.ErrNotLocal
)
