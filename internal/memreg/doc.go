// Package memreg is the memory registry of one manager: the regions it
// owns, the references that keep them registered, and the checks every
// remote request passes. Only the manager and the backends use it; a
// program sees Buffer handles (package buffer) and Manager.Bytes.
//
// A Registry holds regions it allocates off the Go heap and caller-supplied
// []byte registered in place (pinned with runtime.Pinner while registered).
// Backends hook in: Hooks register a region with hardware before it becomes
// visible, a Revoker cuts hardware access on Revoke, a Cutter wakes a data
// plane stalled in a region's memory, SlabHooks forget a slab before it is
// unmapped.
//
// Memory is reached through a Ref, a counted reference with exactly one
// Release:
//
//   - AcquireRemote admits a peer's request: region, key, access, bounds,
//     revocation and lease, in that order. Revoke waits for these Refs.
//     The lease is read on a coarse clock (internal/coarseclock, which the
//     registry holds from NewRegistry to Close) until its last
//     milliseconds, then on the real one: no clock read per request, and
//     a lease ends on time unless the coarse clock's ticker is starved.
//   - AcquireLocal resolves the owner's own handle (the local side of a
//     Put or Get): owner, key and bounds; no access right, no lease.
//
// Contract: the memory of a Ref stays registered and mapped until its
// Release; Registry.Release of a region stops new references, waits until
// every Ref is released and only then deregisters and frees it, so no byte
// of a region is touched after Release returns. All bounds checks are
// overflow-safe. The reference count is an internal/refgate.Gate.
//
// # Allocated memory: memfd, pooled
//
// Allocate's memory lives in memfds (close-on-exec, mapped shared, sealed
// so nobody can shrink or grow them). Region.Memfd gives the fd and the
// region's offset in it, valid while the region is registered, for the
// owner's own use; a backend that passes a region to another process uses
// Ref.ExportFD (below). Off Linux (memfd_other.go) it is plain Go memory
// with no fd, and Memfd says so. Allocations of up to
// MaxPooled (64 KiB) are slots of slabs: one SlabSize (1 MiB) memfd per
// slab, slots of one power-of-two size class of whole pages, from 4 KiB
// (pool.go says why).
// A pooled region is still a region of its own: its own id, key, bounds,
// lease and revocation, exactly like an unpooled one. Its slot goes back
// to the pool only when the region is freed, that is after its release
// drained every reference (local and remote) and the backends deregistered
// it, and it is zeroed then, so a new buffer never shows a previous
// owner's bytes. Larger allocations get a memfd of their own. When such a
// region is freed its pages are punched out (they read as zeros and cost
// no memory; up to MaxPooled bytes they are zeroed instead, as a slot's
// are) and the memfd is kept for the next allocation of the same
// page-rounded size, at most 16 in the process (shared by its registries),
// of up to 16 MiB each (owned.go); but a memfd that
// was exported (Region.Memfd called, or sealed by Ref.ExportFD even when
// no fd of it was opened) is unmapped and closed, never reused, as
// another process may hold it (and a sealed one refuses a later export). (A slice from Bytes kept past Release
// now points into another buffer's slot, where it used to fault: the rule
// that it is invalid after Release matters more.)
//
// Limits count what callers hold: the requested bytes of each region and
// the number of regions, pooled or not. Slab memory is counted apart
// (Stats.Slabs) and capped at Limits.MaxBytes: at the cap Allocate maps a
// memfd of its own instead, so mapped memory stays under about twice
// MaxBytes. An empty slab is unmapped at once, except two spares (2 MiB),
// re-carved for whichever class needs a slab next, so allocating and
// releasing in a loop maps nothing. (The fds kept open with no buffer are
// thus two spare slabs per registry and 16 spare memfds per process.)
// An allocation the host cannot back (memfd_create, ftruncate or mmap out
// of memory or file descriptors) fails with ErrLimit, as a cap does; so
// does a device out of memory (cuda.Error matches ErrLimit).
//
// # Exporting a region to another process
//
// Ref.ExportFD hands out a new fd of a memfd that holds the region's
// pages and nothing else: the region's own memfd, sealed. A slot of a
// slab is never exported (its memfd holds other regions), and the pages
// of a live region are never moved to export it, since a store the owner
// made between the copy and the remap would be lost; so a registry whose
// regions may be exported (SetExporting: the shm backend sets it) gives
// every region that grants read access a memfd of its own at Allocate,
// whatever its size (the spare memfds above serve a loop that allocates
// and releases them). A read-only region's fd is read-only and its memfd sealed against writing
// (F_SEAL_FUTURE_WRITE); a write-only one is not exported. Revoke of an
// exported region, once its remote references drained, moves its bytes
// to a fresh memfd that never left the process, waiting (ctx) for the
// local references: whatever another process kept of the old one no
// longer reaches the region. A store the owner makes into the region
// through Bytes while its own Revoke runs may be lost (the rule that
// Bytes is for between transfers). A registry whose hooks pin memory (an RDMA
// device) exports nothing (ErrNotSupported). Region.Quarantine marks a
// region another process may still write after its release: its memory
// is never reused.
//
// # Proxy regions
//
// RegisterProxy registers memory the registry does not own (a host
// agent's mapping of an attached process's region) behind a Gate, the
// owner's word on it. It is a region like the others (id, key, access,
// bounds, revocation, lease, limits), except that AcquireRemote and
// AcquireLocal call Gate.Enter after their own checks and return its
// error as is (the bare sentinel), each Ref's Release calls Gate.Leave,
// RemoteErr asks the gate too, and once the region is freed (its Refs
// drained) a GateCloser's Close lets the memory go. A proxy is never
// pooled, exported (ExportFD, Memfd) or in the registration cache. A
// region without a gate pays one nil check on the data path.
//
// # Device memory
//
// AllocateAt with a CUDA Location (buffer.CUDA(n)) registers device
// memory (KindDevice, device.go) from a cuda.Pool per device, through the
// driver SetCUDA gave (none: ErrNotSupported saying why). It is a region
// like the others (id, key, access, bounds, lease, revocation, Release
// waiting for its Refs, Limits counting its bytes) with no host bytes:
// AcquireRemote, AcquireLocal, LocalRun and Bytes refuse it with
// ErrNotSupported after their other checks, so no path that moves host
// memory ever gets a device pointer; AcquireRemoteAny and AcquireLocalAny
// (a path that moves device memory: TCP's staging) hand out Refs whose
// Device says where it is (Bytes nil). Only DeviceHooks (device_hooks.go:
// a backend that registers device memory with hardware, ibverbs through
// dma-buf) see it, in the same order as host memory (RegisterRegion
// before it is visible, RevokeRegion at Revoke, DeregisterRegion once it
// drained and before its memory goes back to the pool; Region.DeviceExtent
// names the slab or allocation it lies in); SlabHooks never do. It is
// never exported as a memfd (Memfd, ExportFD) and its handle has an RDMA
// key only if such a hook registered it. Ref.ExportIPC (device_ipc.go) gives a CUDA IPC handle
// of a device region that is an allocation of its own and grants read and
// write (shm's map reply); Registry.CUDA returns SetCUDA's driver. Freed, its memory goes back to the pool (a slot is zeroed before
// reuse); the pools and the primary contexts go once the registry is
// closed and its last device region freed.
//
// With a driver, a host region of its own of HostPinMin to HostPinMax
// bytes is page-locked with it on a data path's first device copy
// (PinHost, hostpin.go; shm's CUDA IPC path), so the copy DMAs straight
// from or to it; the registration is undone after the region drained and
// before Revoke moves its pages.
//
// # Registration cache
//
// Register of caller memory that is already registered, with the same
// first byte, length and access, returns the same handle (same region,
// same key, same remote key) and counts one more holder; it pins nothing,
// calls no hook and counts nothing against Limits. Each successful
// Register is matched by one Release: Release of a handle with other
// holders only drops one hold (it neither waits nor cuts anything); the
// last one releases the registration as above. The holders share
// everything done to the handle: Revoke and SetLease act on the
// registration for all of them, and make it unshareable (later Registers
// of the same memory make a new registration). The cache indexes live
// registrations only, at most DefaultCacheEntries (least recently used
// forgotten first; a forgotten registration stays registered for its
// holders); an entry goes when its release starts. A lease that ran out
// ends the registration for all holders: the next Release (the manager's
// reaper's) releases it. Stats counts hits and misses.
package memreg
