// Package buffer owns registered memory and the Buffer handles that name it.
//
// A Registry holds the memory regions of one manager: regions it allocates
// off the Go heap (anonymous mmap, page aligned, never moved, unmapped only
// after deregistration) and caller-supplied []byte registered in place
// (pinned with runtime.Pinner while registered). Every region gets a 128-bit
// key from crypto/rand. A Buffer is a small value naming owner manager,
// region, offset, length, key and access; it marshals to a protobuf handle of
// at most 64 bytes for typical addresses and can travel to any actor.
//
// Contract: memory returned by Acquire stays valid until the matching
// Release; Registry.Release of a region waits until every acquired reference
// is released, so no byte of a region is touched after Release returns. All
// bounds checks are overflow-safe. The key grants the whole region it was
// issued for; RequestBuffer allocates one region per Buffer, so a handle and
// its slices grant exactly what the owner handed out.
package buffer
