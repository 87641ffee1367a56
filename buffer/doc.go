// Package buffer defines Buffer, the handle that names registered memory.
//
// A Buffer is a small value naming an owner manager, a region of memory
// that manager registered, an offset, a length, the region's 128-bit key
// (from crypto/rand) and the access remote peers have: AccessRead (Get),
// AccessWrite (Put), AccessNotify (PutWithImm: the owner's subscriber is
// told the bytes landed, with AccessWrite) and AccessAtomic
// (CompareAndSwap and FetchAdd on one 8-byte aligned word). Slice
// it (overflow-safe, never past its parent), send its Proto form to any
// actor in any process (at most 64 bytes for typical addresses), and check
// one that came from anywhere with FromProto. The key grants the whole
// region it was issued for; the manager allocates one region per
// RequestBuffer, so a handle and its slices grant exactly what the owner
// handed out.
//
// A Buffer's Location says where the memory is: Host (the zero value) or
// the memory of a CUDA device (CUDA(n), "cuda:n": actor.WithDevice).
// FromProto refuses a location naming no device in range
// (MaxCUDADevices) with ErrInvalid.
//
// The memory itself belongs to the owner's manager (actor.Manager): it is
// mapped off the Go heap (page aligned, never moved) or is the caller's
// []byte pinned in place, and it stays registered until ReleaseBuffer,
// which waits until no operation, local or remote, can touch it any more.
// The owner reads and fills its buffers through Manager.Bytes; Put and Get
// (package queuepair) move bytes between buffers.
//
// Failures wrap the module's sentinels (package rdmamgr): ErrBadKey,
// ErrOutOfRange, ErrAccess, ErrReleased, ErrInvalid, ErrLimit, ErrExpired,
// ErrRevoked, ErrClosed.
package buffer
