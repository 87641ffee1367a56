package buffer

import "errors"

// Sentinel errors. They are wrapped with context; compare with errors.Is.
var (
	// ErrBadKey: the key does not match the region's key.
	ErrBadKey = errors.New("buffer: bad key")
	// ErrOutOfRange: offset or length outside the buffer, including overflow.
	ErrOutOfRange = errors.New("buffer: out of range")
	// ErrAccess: the buffer does not allow the operation.
	ErrAccess = errors.New("buffer: access denied")
	// ErrReleased: the region was released or never existed.
	ErrReleased = errors.New("buffer: released or unknown region")
	// ErrInvalid: a malformed handle or argument.
	ErrInvalid = errors.New("buffer: invalid handle")
	// ErrExhausted: a registry limit was hit.
	ErrExhausted = errors.New("buffer: limit exceeded")
	// ErrExpired: the buffer's lease ran out (on the owner's clock).
	ErrExpired = errors.New("buffer: lease expired")
	// ErrRevoked: the owner revoked remote access to the buffer.
	ErrRevoked = errors.New("buffer: revoked")
	// ErrClosed: the registry is closed.
	ErrClosed = errors.New("buffer: registry closed")
)
