package buffer

import "github.com/rdmamgr/rdmamgr"

// The errors of buffers and their memory. They are the module's sentinels
// (package rdmamgr lists them all), under the names this package has always
// had: errors.Is(err, buffer.ErrBadKey) and errors.Is(err, rdmamgr.ErrBadKey)
// are the same test.
var (
	// ErrBadKey: the key does not match the region's key.
	ErrBadKey = rdmamgr.ErrBadKey
	// ErrOutOfRange: offset or length outside the buffer, including overflow.
	ErrOutOfRange = rdmamgr.ErrOutOfRange
	// ErrAccess: the buffer does not allow the operation.
	ErrAccess = rdmamgr.ErrAccess
	// ErrReleased: the region was released or never existed.
	ErrReleased = rdmamgr.ErrReleased
	// ErrInvalid: a malformed handle or argument.
	ErrInvalid = rdmamgr.ErrInvalid
	// ErrExhausted: a registry limit was hit; it is rdmamgr.ErrLimit.
	ErrExhausted = rdmamgr.ErrLimit
	// ErrExpired: the buffer's lease ran out (on the owner's clock).
	ErrExpired = rdmamgr.ErrExpired
	// ErrRevoked: the owner revoked remote access to the buffer.
	ErrRevoked = rdmamgr.ErrRevoked
	// ErrClosed: the registry is closed.
	ErrClosed = rdmamgr.ErrClosed
)
