// Package shm is the same-host backend: one-sided Put and Get between
// processes on one host through shared memory, with no socket and no
// owner CPU on the data path. The initiator maps the owner's region on
// first use (cached per route) and copies with memmove. Package node
// builds it over its manager's registry from node.Config.SHM.
//
// # Route setup: who may map what
//
// Route info travels in the managers' authenticated route handshake. The
// initiator's names its host (boot id, and its network, pid and user
// namespaces, and Config.HostID when set: processes sharing a kernel can
// still be separate hosts), pid and uid; an owner on another host, or one that does
// not serve that uid (its own, plus Config.AllowUIDs), refuses with
// ErrNotSameHost, which matches ErrNotSupported, and the manager tries its
// next backend. Otherwise the owner answers with the name of its abstract
// unix socket (SOCK_SEQPACKET, in its network namespace) and a single-use
// token. The initiator connects and proves itself: the owner sends a
// nonce; the initiator sends the token and HMAC(secret, token, nonce,
// pid); the owner checks the token (issued for this route, unexpired,
// used once), the MAC, and the connecting process's credentials from the
// kernel (SO_PEERCRED): its uid must be the one the route named and one
// it serves, its pid the one the route named. Only then does it pass,
// over SCM_RIGHTS, the route's state table (below). The same steps let a
// host agent map regions for every process of the host: the agent is one
// more authenticated peer of each owner (below, "A host agent").
//
// A region is handed out on the initiator's first use of it (a map
// request naming region id, key and the access it needs): the owner runs
// the same checks as for any remote request (region, key, access,
// revocation, lease; memreg.AcquireRemote) and passes a memfd of the
// region's own pages (SCM_RIGHTS; memreg's Ref.ExportFD) with the
// region's offset, length and access. No fd leaves without the key.
//
// # Exported means only that region
//
// The memfd a peer gets holds the region's pages and nothing else: the
// backend makes its registry one that exports (memreg's SetExporting), so
// every region allocated with read access has a memfd of its own from the
// start, and is exported as it lies. (Its pages are never moved under
// the owner to export it: a store the owner made meanwhile would be
// lost.) A slot of a slab (a region without read access) is never
// exported. A read-only region's fd is opened read-only and its memfd
// sealed against writing (F_SEAL_FUTURE_WRITE: no reopening through
// /proc gives more), so the peer maps it read-only; the owner's own
// mapping still writes it. A write-only region is not exported. Revoke
// ends access through the kernel: once the copies in flight are drained
// (or given up, below), the region's bytes move to a fresh memfd mapped
// at the same address, so the memfd the peer kept no longer holds the
// region's memory; writes through it land nowhere the owner reads.
// Release does the same by freeing: an exported memfd is never reused.
// A store the owner makes into the region while its own Revoke runs may
// be lost (the move copies the pages). Lease
// expiry takes effect through the kernel when the manager's reaper
// releases the region (within its interval, 1 s by default); until then
// the state table stops honest peers. Caller memory registered in place
// is not in a memfd, and a registry whose hooks pin memory (ibverbs: the
// device holds the pages a move would replace) exports nothing: such
// operations go over Config.Fallback (the node's TCP backend; set up
// alongside each shm route), or fail with ErrNotShareable without one.
// Device memory (a GPU buffer) goes through CUDA IPC where it can, else
// over the fallback too, which stages it (below, "Device memory"); no
// byte of it is ever treated as host memory.
// Start makes the process not dumpable (PR_SET_DUMPABLE 0), so other
// processes of the same user cannot take its memfds through
// /proc/PID/fd or read /proc/PID/mem (root still can); this also turns
// off core dumps. Each peer's state table is its own: what a peer writes
// there misleads only itself, bounds nothing the owner waits for (below),
// and its served counters (slot 0) are its own claims, reported for it.
//
// # The socket is capped
//
// Any process of the network namespace can reach the abstract socket. At
// accept the owner reads the connecting process's user (SO_PEERCRED) and
// closes at once a connection of a user it does not serve; it lets at
// most 64 connections (16 per user) be in their handshake at a time, each
// for at most 5 s, and closes the ones past that at once. At most 1024
// connections are served, and one peer manager holds at most 64 routes
// (tokens waiting and connections). A token is used up only by the
// connection that proves it: a wrong MAC, pid or user leaves it to the
// process it was issued for. Refusals are logged once a second at most,
// with the count of the others.
//
// # After Revoke or Release returns, no copy touches the region
//
// Each route has a state table: a sealed memfd both sides map. Slot s
// holds a region's id, its state (alive, revoked, released, expired),
// its lease deadline on CLOCK_MONOTONIC (the same clock in every process
// of the host) and a count of copies in flight. An initiator's copy adds
// one to the count, then reads id, state and lease, and copies only if
// the region is still alive, then subtracts one (a run of small copies on
// one region posted together with PostList, at most 64 of them or 256 KiB,
// does this once). The lease is checked against the coarse clock
// (internal/coarseclock's Mono, which each route holds: a goroutine reads
// CLOCK_MONOTONIC once a millisecond while copies read it, as a clock read
// costs more than a small copy), so a copy may pass up to about a
// millisecond after the lease ended. The owner holds a remote
// reference (memreg.Ref) for each region a route mapped; when the region
// is revoked, released or its lease set (memreg.Cutter), it writes the
// new state (or lease) into every slot of it, and releases the reference
// only once the count is zero. Both sides use sequentially consistent
// atomics (count before state on the initiator, state before count on the
// owner), so either the copy sees the cut or the owner waits for the
// copy; and Revoke and Release wait for the reference like any remote
// request's. Copies over 1 MiB check again between chunks. The owner then
// tells the initiator (a "gone" message) to unmap. A connection that
// ends (peer closed or died) is cut the same way; a dead process's counts
// never drop, so its drain is bounded (100 ms: a dead process copies
// nothing).
//
// No peer holds a cut for long: a live peer's count that has not dropped
// 2 s after the cut (a peer stopped mid-copy, by SIGSTOP or a debugger, or
// one that writes its table to look busy) ends that peer's connection and
// lets the reference go. So Revoke and Release return within about 2 s
// whatever a peer does. The region is then quarantined (memreg): its
// memory, which the stopped peer may still write when it resumes, is
// never handed to another buffer. Lease expiry is likewise bounded per
// region: the manager's reaper releases each expired buffer on its own.
//
// # An owner that dies or shrinks its memory cannot crash the initiator
//
// Every memfd a peer passes is checked before it is mapped: a regular
// memory file sealed against shrinking, with its seals sealed (memreg
// seals its memfds so), and the region inside it. A sealed memfd cannot
// be truncated, and a mapping keeps the file alive after its owner dies,
// so no access through the mapping can fault: an owner's death only ends
// the route (its socket closes: ErrPeerGone). Copies run with
// runtime/debug.SetPanicOnFault all the same, turning a fault into an
// error. A restarted owner has a new registry: old handles name no region
// of it (the key differs), so they are refused.
//
// # Operations
//
// A Put or Get of at most Config.InlineMax bytes (1 MiB) on a region already
// mapped runs inside Post, in the caller's goroutine: it is complete when
// Post returns (its Completer was called: a queue pair's with one atomic
// operation, internal/qpbind.InlineCompleter), and it is never counted in
// the route's InFlight. It takes no lock and reads no clock: the region's
// mapping is found lock-free and held by one reference (which also keeps
// the state table mapped until Close's last copy ends). PostList
// (backend.ListPoster) does the same for a chain, copying each run of small
// Puts and Gets on one region under one reference and one state-table
// count, and reports each in order (a queue pair's run with one call:
// internal/qpbind.RunCompleter). A queue pair with a completion queue
// hands such a run straight to RunInline (internal/qpbind.InlineRunner):
// a compact list of local bytes, remote offset and verb per operation,
// copied the same way (same checks, same outcomes), with no
// backend.WorkRequest built for it (operations over 256 KiB are never
// in one); a run it cannot take now (the region not mapped yet, not
// memfd-backed, device memory, the route ended) it declines whole,
// untouched, and the queue pair posts it as requests. Others (first use of a region,
// larger copies) go to the route's copier goroutine in order (PutWithImm
// and Send always do, so their event or message comes after every Put and
// atomic posted before them: RC's order; a Put to a region on the fallback
// route is ordered only among the fallback route's operations); a queued
// operation is cancelled at once, a running copy between chunks, and
// deadlines are checked at start and between chunks. A map request the
// owner does not take (a full socket) or answer within 5 s fails the
// route; its operation's cancel, deadline or ctx ends its wait alone. A Send's message goes
// in packets of up to 60 KiB; its deadline and a cancel end a packet's
// wait for room (polled: no deadline is set on the socket, whose other
// writers, a host agent's Notify among them, must not meet it) and are
// checked between packets, and one that ends it mid-way sends msgSendAbort: the owner
// gives the receive buffer back and delivers nothing, the operation fails
// alone and the route serves on (only an owner that does not take the
// abort within 5 s fails the route). Bounds and access are
// checked by the initiator against what the owner's map reply said.
// Copies of up to 4 MiB are made in 256 KiB pieces: Go's copy bypasses
// the cache from 1 MiB on, right only for copies larger than the cache.
// Served counters are kept in the state table (the owner's CPU does not
// see the copies).
//
// # Device memory: CUDA IPC
//
// The registry's CUDA driver (memreg's SetCUDA; node.Config.CUDA) serves
// both sides; without one an initiator never asks for IPC and an owner
// has no device regions. An initiator with a driver maps a peer's device
// region (a handle whose Location is a device) with needDevice (0x80) in
// the map request's access byte. The owner runs the usual checks
// (memreg.AcquireRemoteAny) and answers msgMappedDevice: the slot, the
// region's length and access, its device ordinal and its CUDA IPC handle
// (memreg's Ref.ExportIPC), no fd. Only a region that is an allocation of
// its own (larger than cuda.MaxPooled: a handle names its whole
// allocation, and a pooled slot shares its slab with other buffers) and
// that grants read and write (an IPC mapping always reads and writes) is
// exported; any other device region is answered NOT_SUPPORTED, as is
// every device region to a request without the flag, and goes to the
// fallback. An owner that does not know the flag refuses the unknown
// access bit (ACCESS_DENIED); the initiator then asks again without it.
// The initiator checks the reply (slot, a length of 1 byte to 64 TiB,
// access with read and write, an ordinal under 1024; a device reply to a
// request without the flag fails the route with ErrProtocol), opens the
// handle in its primary context of that ordinal, and checks that the
// allocation it opened starts there and holds the claimed length
// (cuMemGetAddressRange); a handle that does not open (forged, or already
// open in this process through another route) or that claims more is
// given back (msgUnmap) and the region goes to the fallback. A forged
// handle opens only what the driver opens: an allocation some process
// exported.
//
// The mapping is cached as a memfd's is (one per region per route) and
// closed (cuIpcCloseMemHandle) when its entry's last reference goes:
// evicted, cut (msgGone), refused by its slot's state, or the route's
// end. Puts and Gets between the caller's host memory and it run on the
// route's copier, never inline: from 1 MiB on straight between the
// caller's memory, page-locked by its registry on the first such copy
// (memreg.PinHost), and the device, 4 MiB per DMA (devpin.go); smaller
// ones, or memory the driver would not lock, staged through the route's
// two pinned buffers of 1 MiB per device (cuda.Stager: the next chunk's
// asynchronous copy runs on its own stream while this chunk is moved
// between the caller's memory and the pinned buffer). The caller's own
// device memory and a peer's memfd-backed host region go the same ways:
// straight once the route page-locked its mapping of that memfd (on the
// first copy of 1 MiB or more, at most 8 GiB of mappings per route,
// unlocked before the unmap and at the route's end), else staged. The copy counts
// itself in the slot's in-flight count before the first copy is queued
// and leaves only after the Stager returned, that is after the streams
// said every queued copy finished: the owner's Revoke and Release wait
// for it as for a memmove, with the same 2 s give-up. Cancellation, the
// deadline and the slot's state are checked between chunks; a chunk
// queued is never recalled, and the operation reports only once it
// finished. PutWithImm and the atomics on a peer's device region through
// IPC are refused with ErrNotSupported (the atomics would need device
// atomics; the event could follow the copy, not built). Send moves host
// memory only, as before. A host agent never proxies device regions
// (MapProxy: ErrNotShareable).
//
// The caller's own device memory (a Put's source, a Get's destination)
// comes to a route as is when the route says it takes it (TakesDeviceLocal,
// true with a driver: queuepair's DeviceLocalRoute, whose queue pair
// otherwise stages it; WorkRequest.Local nil, LocalRegion a
// *memreg.DeviceSpan). Only Put and Get (ErrNotSupported for the others),
// always on the copier (devlocal.go): to or from a peer's IPC region
// device to device (cuMemcpyDtoDAsync on the route's stream for the
// device, 64 MiB chunks, each waited for, inside the slot's in-flight
// count); to or from a peer's memfd through the route's Stager (device,
// pinned buffer, mapping); to a region on the fallback one inner Put or
// Get of a pinned chunk at a time (a cancel passed on to it). The route's
// Stats count no bytes for these (their Local is empty).
//
// What IPC cannot promise: a peer holding the mapping can read and write
// the allocation until it closes it. An honest initiator stops at the
// state table and closes on msgGone; a hostile one (of a user the owner
// serves, holding the key) keeps reaching the memory after Revoke, unlike
// a memfd, whose pages move away. Release frees the allocation; the pool
// never reuses an exported one (cuda.Pool), and whether the driver keeps
// the memory for a peer that still has it open has not been tried on a
// GPU. Not run on a GPU yet: every test uses cudafake.
//
// # A host agent
//
// A process attached to its host's agent (issue 26) runs this handshake
// with the agent as initiator, over the attach socket instead of the
// actors; the process accepts that route through
// internal/wiring.SHMAcceptAgentRoute, which marks the connection that
// proves its token as its agent's. Nothing more is trusted: the agent
// maps only what a key unlocks, under the same checks. The mark changes
// two things on the owner's side, for that connection only:
//
//   - Cut notice. When a region the agent mapped is cut (revoked,
//     released, expired, or the connection ends), the owner sends a
//     msgCut (slot, region) right after writing the slot's state and
//     before it waits for the slot's count; never blocking (a full socket
//     drops it, and the owner waits as it would without). Any other peer
//     gets msgGone alone, as before: an initiator that does not know
//     msgCut never sees one.
//   - Origin. A msgEvent or msgSend may carry the manager id of the
//     process the agent posts for (WorkRequest.Origin); the owner's Inbox
//     gets it as the event's or message's Peer. From any other peer an
//     origin is refused with ErrUnauthenticated (nothing is delivered, the
//     connection goes on).
//
// On the agent's side the route is an internal/wiring.ProxyRoute. MapProxy
// maps a whole region (once, cached) and returns its memory and a gate
// over its slot, which the agent registers as a proxy region of its own
// registry (memreg.RegisterProxy): its TCP backend then serves and posts
// on it with no extra copy. The gate's Enter counts a user into the slot
// exactly as a copy does (count, then state and lease, sequentially
// consistent), so the owner's Revoke and Release wait for the agent's
// users as for copies, with the same 2 s give-up. OnCut is called on a
// msgCut for a proxied region (and for every proxied region when the
// route ends): the agent revokes its proxy, which ends its users (the
// TCP server's cutter), so the owner's wait ends at once instead of at
// the give-up. A proxied region is never evicted from the route's
// mappings; its gate keeps the mapping, the state table and the coarse
// clock until the proxy is freed, so it outlives the route (Enter then
// fails with ErrPeerGone) and Close does not wait for proxies. Notify
// sends the event of a PutWithImm whose bytes the agent wrote itself.
//
// Contract: as every backend's (package backend). Linux only: elsewhere
// its construction fails with ErrNotBuilt (node's "auto" leaves it out).
package shm
