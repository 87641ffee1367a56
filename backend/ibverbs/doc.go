// Package ibverbs is the RDMA data-plane backend over libibverbs.
//
// The real backend uses cgo and libibverbs (rdma-core) and is compiled only
// with the build tag `ibverbs`:
//
//	CGO_ENABLED=1 go build -tags ibverbs ./...
//
// Package node builds the backend over its manager's registry from
// node.Config.IBVerbs. Without the tag this package is a stub: building the
// backend and Devices return ErrNotBuilt, which wraps
// rdmamgr.ErrNotSupported, so callers can fall back to another backend with
// errors.Is(err, rdmamgr.ErrNotSupported). The route-info codec,
// the configuration and their tests build either way.
//
// # Shape
//
// A Backend owns one device port, one protection domain and one completion
// queue (with a completion channel) shared by all its RC queue pairs. Start
// registers hooks on the buffer registry: every host region is registered
// with ibv_reg_mr (device regions, GPU buffers, through dma-buf where they
// can be: "Device memory" below) with exactly the access it grants (LOCAL_WRITE always,
// REMOTE_READ iff buffer.AccessRead, REMOTE_WRITE iff buffer.AccessWrite,
// REMOTE_ATOMIC iff buffer.AccessAtomic and the device runs atomics),
// and the region's BackendData and RDMA {Addr, RKey} are set, so handles carry
// what peers need. The device itself then enforces key, bounds and access.
// The owner's own work uses a second, LOCAL_WRITE-only registration of the
// same memory, so that Registry.Revoke (through RevokeRegion) can kill the
// advertised rkey at once while the owner's work in flight goes on. Leases
// are enforced by the manager's reaper releasing expired regions. A pooled
// region (a slot of a memreg slab) shares its slab's local registration,
// made once per slab and dropped by DeregisterSlab, and has a remote one of
// its own over exactly its bytes, so a peer's rkey still grants exactly its
// buffer. (Memory windows bound to the slab's registration would save the
// per-buffer ibv_reg_mr, but a type 2 window is bound to one queue pair,
// while a handle is used from any route.)
//
// A route is a pair of connected RC queue pairs, one on each side; the
// initiator posts on its own, the responder's only answers. PrepareRoute creates a
// queue pair in INIT and returns its info (version, QPN, random 24-bit PSN,
// LID, GID, MTU, responder resources; see info.go for the layout);
// AcceptRoute validates the peer's info, moves its own queue pair to RTS and
// answers; PendingRoute.Complete moves the initiator's queue pair
// RTR -> RTS with path MTU = min of both sides.
//
// Post turns a WorkRequest into signalled RDMA WRITE or READ work requests of
// at most the port's max_msg_sz (or Config.MaxMessage), posted as one chain
// by one cgo call; the operation completes once all of them have. Routes
// implement backend.ListPoster: PostList posts the work requests of a list
// of operations as one chain, one ibv_post_send (one doorbell), splitting it
// only where the room in flight runs out (what was prepared is posted, then
// it waits for room as Post does). Work request ids index a slot table with
// a generation per slot (C never holds Go pointers; a stale id completes
// nothing); posted operations sit in a table indexed by slot (Cancel and
// the watchdog scan it), not a map. Post applies back-pressure per queue
// pair (Config.MaxInFlight) and per completion queue. The clock is read for
// an operation's deadline once per chain, and only if it has one.
// Routes carry every operation (routestate.ValidateAll); see "Atomics" and
// "Two-sided messages" for the verbs beyond Put and Get.
//
// Each queue pair has a ring (ring.go): one anonymous mapping registered
// LOCAL_WRITE-only, the backend's own, holding the receive slots of its
// control messages and the cells its own work requests use (an atomic's old
// value, a notice, a Send's header, an ack). It is freed only after its
// queue pair is destroyed.
//
// One poller goroutine owns the completion queue: it polls in batches of up
// to 64 (one cgo call into a Go array), takes the batch's work requests out
// of the slot table under one lock, gives back their room (one release per
// route run and one for the completion queue) and then reports the
// operations they finish. When the queue is empty it spins for
// Config.Spin while work is in flight, then re-arms it and sleeps in poll(2)
// on the completion channel and an eventfd used for shutdown. An
// async-event goroutine logs device events and fails the routes of queue
// pairs that report fatal errors. A watchdog fails routes whose work missed
// its deadline and sends zero-length RDMA WRITE keep-alive probes on idle
// queue pairs, so that routes to dead peers - and the responder's queue
// pairs of closed routes - are found and freed.
//
// # Atomics
//
// CompareAndSwap and FetchAdd are the verbs atomics
// (IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD) on one 8-byte
// word at an 8-byte aligned remote address (else rdmamgr.ErrMisaligned
// before anything is posted). The old value lands in a cell of the
// initiator's ring and is copied to WorkRequest.Result before Complete.
// Whether atomics run is negotiated in the route handshake: a device whose
// atomic_cap is IBV_ATOMIC_NONE (or Config.DisableAtomics) leaves the
// atomics flag out of its route info and its queue pairs without
// REMOTE_ATOMIC; Supports reports false for it, and a route with such a
// device at either end fails an atomic's Post with rdmamgr.ErrNotSupported.
// The queue pairs' max_rd_atomic / max_dest_rd_atomic (the READ depths) bound
// atomics in flight too. The owner's device checks the rkey: a buffer
// without AccessAtomic (no REMOTE_ATOMIC on its memory region) fails the
// atomic with a remote access error (rdmamgr.ErrAccess), which, like every
// failed completion, ends the route. Byte order: the backend assumes the
// device operates on the word in host order and returns the old value in
// host order, as rxe does (the owner's sync/atomic, internal/word, then
// agrees with peers: tested in the VM); devices that answer big-endian
// (some ConnectX generations report IBV_ATOMIC_HCA_REPLY_BE) would need a
// swap that is not implemented.
//
// # Two-sided messages
//
// PutWithImm and Send need the owner's CPU: its manager's inbox
// (backend.Inbox, given by SetInbox) delivers the event or takes the
// receive buffer. They travel as control messages (ctlmsg.go) that a route's
// queue pairs SEND each other into their rings:
//
//   - PutWithImm is the RDMA WRITEs of a Put followed, in the same chain,
//     by a SEND of a notice (region, offset, length, key, imm). RC executes
//     a queue pair's requests in order, so when the owner's receive of the
//     notice completes, the written bytes are in place: the event is never
//     seen before them. The owner checks the notice against its registry
//     (key, range, AccessWrite and AccessNotify, lease, revocation), calls
//     Inbox.Event, and SENDs back an ack carrying the outcome's wire code.
//     The device enforces AccessWrite but cannot tell a PutWithImm from a
//     Put, so a handle without AccessNotify is refused at Post
//     (rdmamgr.ErrAccess) before any byte moves; a handle forged to claim it
//     lands its bytes (a Put could) and the owner refuses the event.
//     Ordering beyond one PutWithImm is RC's too: a route's Puts,
//     atomics, notices and Sends go on its one queue pair in posting
//     order and the responder executes them in order, so an event or
//     message comes after every earlier Put and atomic. No IBV_SEND_FENCE
//     is set: it waits for earlier READ and atomic responses, which a
//     notice does not read.
//   - Send is one SEND of a 16-byte header (imm, has-imm) and the message,
//     at most the peer's MaxSend bytes (default 4096; larger fails with
//     rdmamgr.ErrLimit before anything is posted). The owner takes the
//     receive buffer with Inbox.Recv, copies the message into it
//     (Landing.Done) and acks.
//
// The initiator completes the operation when both its work requests and
// the ack are done, with the ack's code as its error: ErrNoReceive (no
// inbox, no subscriber, no receive buffer), ErrLimit (the subscriber's
// queue is full), ErrReceiveTooSmall, ErrAccess, ErrBadKey... The bytes of
// a refused PutWithImm did land. A refusal is an ack, not a failed
// completion: the route goes on.
//
// Flow control is by credits, so receives never meet an empty ring (no
// RNR; rnr_retry stays "forever" as a safety net): each queue pair posts
// Config.RecvSlots receives at creation and tells the peer in the route
// info; the initiator keeps at most min(both rings) control messages
// unacked, a Post beyond waits (back-pressure, bounded by the deadline).
// The owner reposts a slot before it sends the ack that returns the credit,
// and acks in the order the messages came (a host agent's late answers
// excepted: "Host agents"), so events and messages of one route are
// delivered in posting order, and the initiator matches acks to its ops
// by sequence number. Acks use cells of
// the owner's ring (as many as slots); an ack without a free cell waits in
// order for one. Completion-queue entries are reserved per queue pair: a
// slot each (RecvSlots + 4: see "Host agents"), a cell each for the
// owner's acks, 4 for the initiator's invalidate acks (so with the defaults a
// backend has room for about CQSize/64 routes both ways before
// PrepareRoute and AcceptRoute fail with rdmamgr.ErrLimit); an accepted
// queue pair's ring holds (RecvSlots+4) × (MaxSend+32) bytes. A malformed control
// message fails the route with rdmamgr.ErrProtocol. When a route fails,
// its ops awaiting acks fail with the route's error after the queue pair is
// gone.
//
// # Host agents
//
// A host agent (issue 26; internal/agentapi) posts for the processes
// attached to it: a WorkRequest's Via names the target process's slot at
// the far agent, Origin the process the operation is posted for. The
// regions of both processes are proxy regions of their agents
// (memreg.RegisterProxy over the process's memfd pages, MAP_SHARED);
// Start's hooks register each in the agent's protection domain like any
// region, once, with exactly its access (mr.go). A proxy's remote memory
// region holds one entry of the proxy's gate while it exists: the device
// takes no Ref, so the process's cut of the region waits (as for the
// TCP server's Refs) until the agent revokes the proxy, which
// deregisters it.
//
// The handle names the owner process's region, not the far agent's
// memory, so the initiator asks: a resolve (ctlmsg.go: via, region, key,
// access needed) goes to the far agent over the route, which calls its
// agentapi.Resolver and answers the proxy's (address, rkey, access,
// length) and its region id and key in the agent's registry. The
// initiator caches the answer per (via, region, key) on the route (at
// most 256; a resolution that does not admit an operation's need is
// asked again), checks access and bounds against it before posting, and
// then posts RDMA READ, WRITE and atomics on the proxy's memory region as
// on any. A resolve takes a credit, a cell and room in flight like a
// Send; Post waits for its answer (bounded by the deadline, the poster's
// cancel and ResolveTimeout + 2 s; PostList posts what it prepared
// first), so the route's posting order holds. The far agent's device
// checks every rkey, so a forged answer names at worst memory the far
// agent itself registered for peers.
//
// An agent route is shared by every process of both hosts, so a proxy
// revoked or released at the far end (the process's cut, its death)
// must not meet a cached rkey: under RC a remote access error would end
// the route and every neighbour's operation on it. So the far agent
// invalidates first (via_inval.go; the shm state table's cut notice and
// drain, carried over the route). It records, per proxy, the routes
// whose resolves it answered (at most 1024; dead ones pruned, a resolve
// beyond refused with ErrLimit). Before RevokeRegion or DeregisterRegion
// deregisters the proxy's remote memory region it sends each of them an
// invalidate (ctlmsg.go: the proxy's id, REVOKED or RELEASED) and waits
// for every initiator's invalidate ack, at most 2 s (shm's drain
// give-up) or until Close. An initiator that gets one drops every
// resolution naming the proxy (a later post resolves again and gets the
// far Resolver's answer: rdmamgr.ErrRevoked, ErrReleased), fails a post
// that took the resolution before with the same sentinel, lets the
// operations that hold it (posted on its rkey, or being posted) end, and
// only then acks. Only then is the memory region deregistered, so no
// work request meets the dead rkey and the route goes on. A resolve
// answered for the proxy is recorded under the route's post lock, so
// the answer precedes any invalidate of its proxy on that route, and a
// resolve the far agent answers once the invalidation began is refused.
// Invalidates, their acks and goodbyes take no credit: each queue pair
// has 4 receive slots (and the initiator 4 cells) beyond the credits; at
// most 3 invalidates per route are unacked (the owner waits for room
// within its give-up; an initiator that gets more fails the route with
// ErrProtocol). An ack of nothing asked is ignored; an invalidate naming
// a proxy the initiator never resolved changes nothing and is acked at
// once.
//
// Give-up: an initiator that does not ack within 2 s (its route is
// gone, or an operation holding the rkey waits on the far agent that
// waits on it: a Resolver must not revoke proxies synchronously) and a
// route that had no room for an invalidate in that time may still meet
// the dead rkey. That operation fails with agentapi.ErrStaleProxy
// (wrapping rdmamgr.ErrAccess) and, RC being what it is, the route with
// it; posted again on a new route the operation resolves again and gets
// the far Resolver's answer. Give-ups are counted and logged.
//
// A closing backend says goodbye (ctlmsg.go) on each of its host
// agent's accepted routes before it fails them, and waits until each
// was sent (at most 1 s), so initiators fail the route at once
// (rdmamgr.ErrPeerGone) and their pending resolves end with it, rather
// than at the end of their wait for an answer.
//
// A PutWithImm's notice with a Via names the proxy (its id and key from
// the answer) and the origin; a Send with a Via carries the via and the
// origin in a 16-byte extension of its header. The far agent delivers
// the event (naming the process's own region) or message to
// Resolver.Inbox(via) with Peer = the origin (or the route's peer without
// one). A backend takes a Resolver through wiring.SetResolver (only
// agents have one); its routes' info then carries infoAgent, both ways.
// An initiator posts a Via only on a route whose responder said
// infoAgent, else rdmamgr.ErrNotSupported before anything is posted; an
// owner honours an origin only from an initiator that said it, and one
// without a resolver refuses resolves, and notices and Sends with a Via,
// with ErrNotSupported (the route goes on). An origin without a Via is
// refused at Post (ErrNotSupported), as on TCP. A route reports its
// peer's infoAgent as FarIsAgent (agentapi.FarAgent; the initiator's: the
// responder's answer), so a host agent drops a far route whose far end is
// no host agent, as it does TCP's.
//
// On an agent's accepted queue pairs the poller does not serve control
// messages itself: a Resolve, the attached process's Event and its
// landing's Deliver (agentapi.CheckedLanding) wait on the process. It
// copies each out of its slot, reposts the slot and hands it to the
// route's worker goroutine, which serves them in the order they came and
// acks in order (late answers aside: below); the initiator's credits bound how many wait (one more
// fails the route with rdmamgr.ErrProtocol). Close cancels the resolves,
// fails the routes and waits for the workers before it frees anything.
//
// An attached process's event or message (a notice or Send with a Via)
// goes to an agentapi.AsyncInbox's EventAsync or an AsyncLanding's
// DeliverAsync when the inbox is one (the host agent's are), as TCP's
// (backend/tcp/late.go): the worker takes the next message at once, and
// the answer, whenever the process gives it (from any goroutine), acks
// the message with its code. So one process slow to answer (up to 5 s)
// holds up only its own operations, not the route between two agents.
// Deliveries reach the inboxes in arrival order; only acks may overtake
// one another, and the initiator matches each to its op by sequence
// number. The slot was reposted when the worker took the message, so the
// credit an ack returns is sound in any order, and an unanswered message
// keeps its credit (the work queue cannot overflow). An answer on a
// failing route is dropped (fail marks it under the post lock before
// teardown frees the ring). Resolves stay on the worker (bounded by
// agentapi.ResolveTimeout).
//
// # Device memory
//
// The backend is a memreg.DeviceHooks: device regions (GPU buffers,
// memreg.AllocateAt with a CUDA location) come to RegisterRegion too
// (dmabuf.go). Where the device says it exports dma-buf
// (cuda.AttrDmaBufSupported) the region's allocation (its pool's 2 MiB
// slab, or its own allocation, rounded up to the page) is exported once as
// a dma-buf fd (cuda.Driver.DmaBufFD: cuMemGetHandleForAddressRange), and
// the region gets a remote memory region of its own, ibv_reg_dmabuf_mr
// over exactly its bytes at its offset in the fd, addressed at its device
// address, with the access it grants (REMOTE_ATOMIC as for host memory);
// the handle carries that rkey, so a peer's Put, Get and atomics on it are
// plain RDMA on device memory, and revocation, Release's wait and the
// rkey's death work as for host memory (RevokeRegion and DeregisterRegion
// deregister it; the fd is closed after the allocation's last memory
// region is gone, before its memory goes back to the pool). There is no
// local memory region: the owner's own device memory never goes through
// the NIC, and an initiator's local device buffer is staged by its queue
// pair (queuepair/stage.go: ibverbs routes are not
// queuepair.DeviceLocalRoute). A PutWithImm to device memory is refused
// at Post with ErrNotSupported (the owner's notice check takes host
// memory only). ibv_reg_dmabuf_mr needs rdma-core 34 or later at build and
// run time (Debian bookworm ships 44).
//
// Where the GPU, its driver or the NIC has no dma-buf (the device
// attribute 0; DmaBufFD failing with ErrNotSupported, as before CUDA 11.7;
// ibv_reg_dmabuf_mr failing with EOPNOTSUPP, as rdma_rxe does) the region
// is still allocated, without an RDMA key, and the reason (ErrNoDmaBuf,
// matching rdmamgr.ErrNotSupported) is kept and logged once; those
// verdicts are remembered per device and per backend, any other failure
// is that region's alone. A peer's ibverbs route refuses an operation on a
// device buffer without an rkey with ErrNoDmaBuf before anything is
// posted (the route goes on), unless the route has a fallback.
//
// # The TCP fallback
//
// With Config.Fallback (node sets the node's TCP backend), every route is
// set up with a second route to the same peer, of the fallback backend,
// in the same handshake (fallback.go): PrepareRoute prepares the
// fallback's route too and carries its info in ours (route info version
// 3, info.go), AcceptRoute has its own fallback accept it (where it has
// one of the same kind) and carries the answer in its own, Complete
// completes it before the queue pair (a failure of either undoes both),
// and Abort aborts both. An initiator without a fallback sends version 2
// and gets no fallback; a responder answers in the version it was sent,
// so a version 2 initiator (an older manager) still gets its route, without
// a fallback; an older responder refuses version 3 with
// rdmamgr.ErrVersion, and package actor then tries its next backend (as
// for ErrNotSupported): a route from a manager with a fallback to an
// older one takes TCP. Post and PostList send exactly the Puts and Gets on a
// peer's device memory whose handle has no RDMA key (and no Via) to the
// fallback route, which the owner stages (backend/tcp/stage.go); in a
// list, what was prepared before one is posted first, so each is posted
// in its place. PutWithImm and the atomics on such a buffer are still
// refused at Post with ErrNotSupported (as TCP would); a buffer with an
// rkey (dma-buf) never goes to the fallback. The fallback route reports
// its operations itself (its contracts are TCP's: deadline, cancel, one
// operation's failure its own). The two routes are one to the manager:
// the fallback's failure fails the route; the route's failure or Close
// closes the fallback (teardown, after the queue pair drained; Close
// returns once the fallback's operations are reported); Stats adds the
// fallback's figures; Cancel of an operation on it goes to it.
//
// What is proven where: the choice and the bookkeeping (one export per
// allocation, a memory region per buffer over its bytes, verdicts,
// revocation, the fd closed before the memory is freed) by unit tests
// against cudafake and a stand-in of the NIC (dmabuf_unit_test.go, run
// with -tags ibverbs and no device); on rxe in the Soft-RoCE VM
// ibv_reg_dmabuf_mr called for real (rxe refuses it with EOPNOTSUPP
// before looking at the fd: it registers no dma-buf; the VM's kernel has
// no /dev/udmabuf, so the fd is a memfd), the clean refusal and the
// staging of a local device buffer (dmabuf_test.go, TestConformanceDevice);
// there too, a peer's device buffer without an rkey reached through the
// TCP fallback, every byte checked, host buffers still over the queue
// pair (fallback_vm_test.go: TestConformanceDeviceFallback,
// TestDmaBufFallback). No machine here has an
// RDMA NIC beside a GPU: ibv_reg_dmabuf_mr accepting a GPU's dma-buf and
// RDMA into device memory have not run.
//
// # Failure semantics
//
// An RC queue pair cannot cancel one request, and any failed completion puts
// it in the error state. So a failed completion, a missed deadline, an async
// error event, Route.Close and Backend.Close all fail the whole route: the
// queue pair is moved to the error state, the device flushes every posted
// request, and only after each has completed (or the queue pair has been
// destroyed, after Config.DrainTimeout) is the work reported failed - never
// while the device may still touch its local memory. The manager then builds
// a new route. A Post or PostList racing the failure (a Close from another
// goroutine) fails with the route's error; the route's ring, whose cells a
// poster writes while it prepares, is freed only once no poster is
// preparing (route.ringMu: each Post and PostList holds it for reading). Completion statuses map to the usual sentinels:
// IBV_WC_REM_ACCESS_ERR wraps rdmamgr.ErrAccess (wrong rkey, read-only or
// released region, out of bounds), RETRY_EXC and RNR_RETRY_EXC wrap
// rdmamgr.ErrPeerGone, flushed requests get the route's error (ErrClosed,
// ErrPeerGone or ErrDeadline), a missed deadline is rdmamgr.ErrDeadline.
//
// Completer.Complete is called on the poller goroutine: it must not block,
// post, or close the route or backend.
//
// Served counts the notices and Sends served for peers (the owner's CPU
// handles them); RDMA READ, WRITE and atomics are one-sided, the
// responder's CPU never sees them.
//
// # Files
//
// Plain Go: backend.go (the Backend, Close), caps.go (Supports, SetInbox),
// device.go (device, port and GID selection, Devices), mr.go (memory
// registration and revocation), dmabuf.go (device memory through dma-buf),
// fallback.go (the TCP fallback's choice and handshake parts),
// setup.go (route setup: PrepareRoute,
// AcceptRoute, Complete), route.go (route state and teardown), via.go,
// via_serve.go and via_inval.go (host agents: the initiator's resolves,
// the owner's worker, invalidates and goodbyes), ring.go (a
// queue pair's own registered memory), post.go (the post paths of Put, Get
// and PutWithImm), ops.go (Send and the atomics), recv.go (control messages
// received and acked), ctlmsg.go (their layout), complete.go (completions
// and their status), chain.go (PostList, and the one submit of a chain of
// work requests), poller.go (completion-queue poller and async events),
// watchdog.go (deadlines and keep-alive probes), slots.go (work-request
// ids and the table of posted operations), sem.go (back-pressure). The cgo fence: verbs.go, verbs_device.go,
// verbs_cq.go, verbs_qp.go and verbs_dmabuf.go wrap libibverbs and shim.c / shim_post.c;
// nothing else imports "C". Every file that needs libibverbs carries the
// ibverbs build tag; stub.go stands in for them without it. Done, Err,
// Stats and work-request validation are shared with the other backends
// (backend/internal/routestate).
//
// # Testing
//
// internal/backendtest's conformance suite and the two-process tests in this
// package run against a real verbs stack in every CI run: test/softroce/ci.sh
// boots a throw-away VM with Soft-RoCE (rdma_rxe) and runs this package's
// test binary there with RDMAMGR_REQUIRE_IBVERBS=1. Without a device the
// tagged tests skip (or fail with RDMAMGR_REQUIRE_IBVERBS=1).
package ibverbs
