// Package queuepair provides the QueuePair handle: one route to one peer
// manager on which Put (RDMA WRITE) and Get (RDMA READ) are posted, and
// the verbs beyond them (verbs.go): PutWithImm (a Put whose owner's
// subscriber then gets an event naming the bytes and an immediate value),
// Send and SendWithImm (into the peer's next posted receive buffer), and
// CompareAndSwap and FetchAdd on one 8-byte aligned word (Value returns
// the old value). Their receiving side is the peer manager's
// (actor.Manager.SubscribeEvents, SubscribeMessages, PostRecv).
//
// Put and Get return a *WorkRequest once the operation is posted; Wait(ctx)
// blocks until it completes, Poll reports without blocking, Done gives a
// channel. Submit posts a batch of operations that share one context;
// PostOps posts a chain reported through a CompletionQueue (below). Every
// operation has a deadline (the QueuePair's default timeout, or the batch
// context's deadline if that is earlier). Data goes from the caller's
// goroutine to the backend: never through an actor mailbox.
//
// # Posting
//
// Every verb takes the caller's ctx (Put, Get, PutWithImm, Send,
// SendWithImm, CompareAndSwap, FetchAdd, their Post forms, and Submit).
// Posting returns at once while the route has room in flight; at its
// in-flight limit (back-pressure: the backend's MaxInFlight) it waits for
// room until ctx ends, and then the operation completes with ctx's error
// (errors.Is context.Canceled or context.DeadlineExceeded), nothing of it
// sent, and the call returns. A ctx that already ended posts nothing. So
// no verb blocks longer than the caller allows; with a ctx that never
// ends (context.Background) the wait is bounded by the queue pair's
// timeout. For Put, Get and the other single verbs ctx bounds only the
// post: Wait(ctx) or Cancel end a posted operation early; Submit's ctx
// also cancels what it posted.
//
// # Completion queues
//
// A CompletionQueue collects finished work requests as a verbs completion
// queue does: SetCompletionQueue binds a queue pair to one (several queue
// pairs may share it), and every operation posted on it afterwards is
// reported there exactly once, as well as through its own Wait, Poll and
// Done, which keep working. Poll reaps up to len(out) without blocking;
// Wait blocks for at least one until ctx ends (then it returns ctx's
// error, cancelling nothing). A Wait (the queue's, or a WorkRequest's)
// with operations in flight spins for up to 50 µs, yielding its
// processor, before it parks, where GOMAXPROCS is above 1: a completion
// that comes meanwhile wakes no other thread; spins that run out make the
// next waits park at once (spin.go). Waits for operations on a route that
// says its completions are slow (backend.SlowCompleter: the host agent's,
// 200 µs and more) never spin: they park at once. On a route that lets
// a waiter read its own answer (backend.Driver: TCP), an operation
// posted on its own with no completion queue (Put, Get, the single verbs
// and their Post forms) is posted Waited, and its Wait first reads the
// answer itself when the route lends it the connection (one idle, the
// operation alone on it): the network poller then wakes the waiter
// directly, as a plain ping-pong's one goroutine. Its Poll, Err and Done
// hand the connection back, so an operation that is polled rather than
// waited for is read by the route as before. PostOps posts a chain of operations (any
// verb: Op carries Imm, HasImm, Compare and Swap) into caller-owned work
// requests at the cost of one post: the route's backend.ListPoster when
// it has one (one lock, one wake-up of its sender), a loop of posts
// otherwise. Operations of one chain complete independently, in any
// order; each is refused or fails on its own. Op.ID names an operation
// as verbs' wr_id does: WorkRequest.ID reports it, so a program that reaps
// a queue finds its own state without a map. A chain takes its queue
// slots, its count in the queue pair and its local references with one
// atomic operation each, not one per operation, and a run of it that the
// route completes together (shm's inline copies) is reported under one
// lock of the queue, each of its operations made done with one atomic
// operation (the route completes each exactly once: backend.Completer).
// On a route that copies in the poster's goroutine
// (internal/qpbind.InlineRunner: shm), a chain's run of small Puts and
// Gets on one remote region, posted into a completion queue, goes to the
// route as a compact list with no backend request built for each
// (inline.go); the chain's operations before it are posted first, so the
// route sees the chain in its order.
//
// PrepareOps returns a Chain: work requests and operations copied once,
// each Post(ctx, lo, hi) of it exactly PostOps of that range, as a verbs
// program re-posts its array of work requests. For a chain of plain Puts
// and Gets on one remote region and one local host region, each within
// the route's inline size (shm), a run of it compares the local region
// once instead of checking each operation's two handles: on this 2-core
// VM that is about a fifth of the instructions of an 8-byte Put
// (bench/OPRATE.md). Every check of the work requests, of the regions
// still being registered and of the bounds stands; any other chain is
// posted as PostOps posts it.
//
// Selective signaling (Op.Unsignaled, as a verbs work request without
// IBV_SEND_SIGNALED): an unsignaled operation that succeeds is reported
// only through its WorkRequest, not through the queue, and gives its slot
// back as it finishes; one that fails is reported through the queue too.
// From a queue pair's first unsignaled operation on it reports as RC
// completes, in posting order: the queue hands over each signaled
// operation only once every operation posted on the queue pair before it
// (and since that first unsignaled one; Submit's batches aside) is done,
// so reaping a chain's last, signaled, operation tells the program that
// the whole chain is done and every work request of it free to re-post
// (fence.go).
//
// Everything above holds for an operation reported through a queue: the
// queue hands it over only once its local memory is let go and its
// outcome is final, so the caller may reuse the memory, read Err, and
// re-post the work request at once. A work request must be reaped from
// its queue before it is re-posted (re-posting one the queue still holds
// panics, as re-posting a pending one does).
//
// A reused work request is its poster's from its re-post until that post
// returns: a Wait, Poll, Cancel, Err or first Done of it on another
// goroutine must not race the re-post (it cannot tell which use it sees).
// Such a race is a caller bug that -race reports; it never makes a Wait
// or Cancel return while an operation is still pending.
//
// Each operation holds one of its queue's slots from its post until a
// Poll or Wait hands it over, so a queue never overflows: an operation
// posted while every slot is held completes at once with rdmamgr.ErrLimit
// and is reported only through its WorkRequest, not through the queue.
// Size the queue for the operations kept in flight.
//
// The steady state allocates nothing per operation: PostOps of reused
// work requests and reaping through Poll or Wait (tested on shm and TCP
// routes), and PostPut and PostGet of a reused work request. A work
// request re-posted on the queue pair it was last posted on, for a Put or
// Get whose local memory is in the region of the queue pair's last one,
// is armed without a compare-and-swap of its state (the request is its
// poster's until it is posted). Deadlines come from a coarse clock
// (internal/coarseclock, refreshed every millisecond while queue pairs
// post), not a clock read per operation: an operation's deadline may be a
// few milliseconds late.
//
// # Reported means finished
//
// The local memory of an operation is lent to the backend from the post
// until the operation's outcome is reported, and not a moment longer. Once
// Wait, Cancel, Poll, Err, Done, or a batch's Wait or Poll has reported an
// outcome (success, an error, or the caller's context ending), no byte of
// that operation touches the local memory again, on any backend: the
// caller may reuse or release it at once. The library keeps this promise by
// waiting, never by trusting timing:
//
//   - Wait(ctx) whose ctx ends first cancels the operation and returns only
//     once the backend can no longer touch the memory. The TCP backend
//     interrupts a socket read or write that is using the memory right now
//     and sends the rest of the frame from a sink (zeros for a Put; a Get's
//     late payload is read and dropped); an RDMA device finishes the work
//     requests it was given (an RC queue pair cannot take one back), which
//     its transport timeouts bound. So Wait may return a little after ctx
//     ended; it never returns while the memory is in use.
//   - Submit(ctx) watches ctx: when it is cancelled or its deadline passes,
//     the operations still pending are cancelled the same way, whether or
//     not anybody waits.
//   - A deadline passing inside the backend (an operation nobody waits on)
//     ends that operation the same way.
//
// The outcome of a cancelled operation is ctx's error, unless it completed
// first: then it is the real outcome (nil for success). Wait's result and
// Err afterwards are always the same. The remote range of a Put that ended
// with an error is undefined (any mix of old bytes, new bytes and zeros), as
// with RDMA; a Get that ended with an error leaves undefined only the
// local bytes it had already received before the report.
//
// A work request completes exactly once. Until then the local region
// stays registered: the owner's ReleaseBuffer waits for it, and Release of
// the QueuePair waits for every operation posted on it.
//
// # Isolation
//
// One operation's cancellation, deadline or refusal never fails another
// operation: not on the same queue pair, not on other queue pairs over the
// same route. A queue pair whose operation timed out serves its next one.
// Only the route's own failure (the peer died or went silent, a protocol
// violation) fails everything on it, with rdmamgr.ErrPeerGone or
// rdmamgr.ErrProtocol; the manager builds a new route for the next queue
// pair request.
//
// # Ordering
//
// As on an RDMA RC queue pair: a PutWithImm's event and a Send's or
// SendWithImm's message reach the owner's subscriber only after the bytes
// of every Put (and PutWithImm) posted before them on the queue pair have
// landed, on every backend, so data Puts followed by a PutWithImm as the
// notice (rv's protocol) need no wait in between. "Before" is posting
// order: a Post that returned before the notice's Post began (concurrent
// posts are unordered). The backends keep it route-wide (every queue pair
// to one peer shares the route), which is stronger. Events and messages of
// one queue pair come in posting order. A notice also comes after the
// effect of every CompareAndSwap and FetchAdd posted before it. A Put that
// fails (an error, a cancel, its deadline) is not waited for beyond its
// report, and its remote bytes are undefined: the notice behind it is still
// delivered. Not promised: that a Get or an atomic sees the bytes of a Put
// posted before it (TCP stripes them over its connections, shm may run
// them before a Put waiting for its copier): wait for the Put's completion
// first. Buffers of shm peers that are not memfd-backed go over
// the TCP fallback route, ordered only among themselves.
//
// # Errors
//
// A context that ended yields an error for which
// errors.Is(err, context.DeadlineExceeded) and
// errors.Is(err, rdmamgr.ErrDeadline) both hold (whichever layer noticed
// the deadline: the caller's ctx or the backend), or
// errors.Is(err, context.Canceled) for a cancellation. Other failures wrap
// the module's sentinel that names their cause (package rdmamgr): ErrBadKey,
// ErrOutOfRange, ErrAccess, ErrReleased, ErrRevoked, ErrExpired for the
// buffers; ErrPeerGone, ErrClosed for the route; ErrWrongPeer,
// ErrLengthMismatch, ErrNotLocal, ErrReleased (of the queue pair) for what
// this package checks before posting.
//
// # Device memory
//
// A local buffer in a CUDA device's memory (buffer.Location, from
// actor.WithDevice) may be a Put's source or a Get's destination. A route
// that moves device memory itself says so (DeviceLocalRoute) and gets it
// as is; on every other route the queue pair stages it (stage.go): the
// operation runs as a pipeline of inner host Puts (Gets) of 256 KiB through
// eight pinned staging buffers, host regions of the local registry, up to
// eight chunks in flight on the route while the device copy of the next
// one runs. Everything above holds for it: it reports only once every inner
// operation and every device copy finished (a Cancel or deadline is passed
// to the inner operations and waited for; a staging buffer is reused only
// once nothing touches it), one inner failure fails it with that error and
// nothing else, and the steady state allocates nothing. Each queue pair has
// two such pipelines (4 MiB of pinned memory, made on its first staged
// operation, ended by Release); further staged operations wait in a queue of 64 for one, and a
// post finding that queue full waits for room as at the route's in-flight
// limit. A staged operation is reported by its pipeline only: one cancelled
// (or past its deadline) while it waits in that queue reports once a
// pipeline takes it up, without moving a byte, so its Cancel may wait for
// the operations ahead of it (each bounded by its own deadline). Not staged: PutWithImm, Send and the atomics with device memory
// (ErrNotSupported). A staged Put is posted by its pipeline after the
// queue pair's Post returned, so the Ordering above does not cover it:
// wait for it before a notice that must follow its bytes.
//
// # The route
//
// A queue pair posts on a route its manager shares among the queue pairs to
// the same peer. Route shows whether it is up (Done, Err) and its counters;
// the route itself (backend.Route) belongs to the manager and the backend.
package queuepair
