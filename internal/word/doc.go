// Package word runs atomics on 8-byte words of registered memory with the
// processor's atomic instructions (sync/atomic), so that a peer's
// CompareAndSwap or FetchAdd executed by a backend for it and the owner's
// own sync/atomic on the same word agree. It turns a byte slice of a
// registered region into a *uint64 with unsafe (word_unsafe.go); the other
// uses of unsafe are the cgo layer (backend/ibverbs), the shm backend's
// slot table (backend/shm/table.go) and memreg's cache key (the address of
// caller memory, internal/memreg/cache.go).
package word
