// Package memreg is the memory registry of one manager: the regions it
// owns, the references that keep them registered, and the checks every
// remote request passes. Only the manager and the backends use it; a
// program sees Buffer handles (package buffer) and Manager.Bytes.
//
// A Registry holds regions it allocates off the Go heap (anonymous mmap,
// page aligned, never moved, unmapped only after deregistration) and
// caller-supplied []byte registered in place (pinned with runtime.Pinner
// while registered). Backends hook in: Hooks register a region with
// hardware before it becomes visible, a Revoker cuts hardware access on
// Revoke, a Cutter wakes a data plane stalled in a region's memory.
//
// Memory is reached through a Ref, a counted reference with exactly one
// Release:
//
//   - AcquireRemote admits a peer's request: region, key, access, bounds,
//     revocation and lease, in that order. Revoke waits for these Refs.
//   - AcquireLocal resolves the owner's own handle (the local side of a
//     Put or Get): owner, key and bounds; no access right, no lease.
//
// Contract: the memory of a Ref stays registered and mapped until its
// Release; Registry.Release of a region stops new references, waits until
// every Ref is released and only then deregisters and frees it, so no byte
// of a region is touched after Release returns. All bounds checks are
// overflow-safe. The reference count is an internal/refgate.Gate.
package memreg
