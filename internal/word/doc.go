// Package word runs atomics on 8-byte words of registered memory with the
// processor's atomic instructions (sync/atomic), so that a peer's
// CompareAndSwap or FetchAdd executed by a backend for it and the owner's
// own sync/atomic on the same word agree. It is the one place outside the
// cgo layer that turns a byte slice into a *uint64 (unsafe, word_unsafe.go).
package word
