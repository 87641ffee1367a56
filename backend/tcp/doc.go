// Package tcp is the pure-Go data plane: one-sided WRITE and READ between
// registered regions of two managers over plain TCP, and PutWithImm, Send
// and the atomics. Package node builds it over its manager's registry
// from node.Config.TCP (a program never constructs one itself).
//
// Each manager runs one data listener. A route is set up by the actors'
// handshake: the responder hands the initiator its data address and one
// single-use token per connection; the initiator dials and proves each
// connection with its token before any frame is read. A route has N
// connections; operations larger than the chunk size are split and striped
// over them and complete when the last chunk lands.
//
// Wire format (frame.go): a fixed 48-byte request header (64 bytes for the
// operations with operands: write-imm, send, compare-swap, fetch-add; 72
// for a write-imm or send with an origin: Host agents, below),
// followed for WRITE, write-imm and send by its payload (and, for the
// last two, a trailer byte); a fixed 16-byte response header (24 for an
// atomic, with the word's old value), followed for a successful READ by
// its payload. WRITE payload is read from the socket straight into
// the target region; READ payload is written from the region straight to the
// socket with writev and read straight into the requester's memory. A
// payload of at most 512 bytes is the exception on the sending side: it
// is copied, with the headers around it, into the writer's stage, so a
// batch of small frames is one buffer of the writev rather than two per
// frame (the kernel's cost per buffer exceeds such a copy; a WRITE so
// copied no longer reads its memory once its batch is gathered; a batch
// of answers whose READ payloads are all so copied lets go of their
// regions before it is written, and is written without a deadline, as a
// batch of answers alone is: flushCopied). A batch that is one buffer
// goes with write, not writev (writeiov.go: cheaper in the kernel). Each
// side reads a connection through a 4 KiB buffer that grows to 64 KiB
// for a burst (reader.go): one read then takes in a batch of small frames,
// and the owner answers the batch with one writev. A connection's frames
// are written by its writer goroutine: posters put their chunks on the
// connection's submission ring under one lock (a chain of them at once
// with PostList, the route's backend.ListPoster); a poster whose frames
// are to go now (below) and that finds nobody writing the connection, with
// at most 64 KiB queued and at most 64 KiB written and unanswered (a peer
// that reads slowly never holds up Post), writes the ring itself with one writev (client_write.go), in posting
// order still, and otherwise wakes the writer goroutine if it sleeps,
// which drains the ring in batches of up to 64 frames, one writev each.
// A goroutine hand-off costs a wake-up of another thread where goroutines
// run on several cores (tens of microseconds on a virtual machine), so a
// batch's frames go out without one. A connection's chunks in flight sit in a table indexed by
// slot (slots.go); a frame's id is the slot and its generation, which
// moves on when the slot is freed, so an answer naming an id not held now
// (forged, or for a slot freed and reused) is a protocol violation and
// completes nothing. Posting and completing read no clock and use no
// channel per operation: room in flight is an atomic count (sem.go). A
// small frame posted behind many unanswered ones on its connection waits
// on the ring for company (up to 16 frames, or until the reader takes in
// answers, which wakes the writer; a PostList chain is company enough and
// goes at once), and small single-chunk operations go
// in runs of 32 per connection, so a pipeline of small operations costs
// few writevs and reads; the reader matches a batch of answers under one
// hold of the connection's lock and finishes them together. Every
// header field is validated: a malformed header closes the connection, a
// request that fails the key, access or bounds check is answered with its
// error code and changes nothing.
//
// A waiter reads its own answer (drive.go). A connection's answers are
// read by whoever holds its read role: the reader goroutine, or the
// goroutine that waits for an operation (backend.Driver: queuepair's Wait
// of a single operation posted with no completion queue, which posts it
// Waited). Once some wait found no role to take, a connection's reader
// parks its role whenever nothing is in flight on it, and the next post
// lends the role to its operation if that is a single chunk posted Waited
// and the connection's only one. That operation's Wait then reads the
// socket itself: the network poller wakes the waiter directly, with no
// hand-off from the reader goroutine (one wake-up of another thread less
// where goroutines run on several cores, and no read that finds nothing
// before the reader parks). The waiter handles only frames that lie whole
// in the buffer (a large READ answer goes to the reader goroutine), and
// stops once its operation was answered or ended (cancel, deadline), its
// ctx ended (a deadline less than two watchdog ticks away is set on its
// read; a cancel is seen within a tick) or the route failed. Any other
// post, a ping, a cancel, Undrive (a Poll, Done or Err of the operation),
// a wait for room in flight, a notice the fence holds, a failing route
// and the watchdog (a role lent or parked through a whole tick) hand the
// role back to the reader
// goroutine: an operation nobody waits for is read within two ticks, and
// an idle connection notices its peer's close within two ticks.
//
// PutWithImm, Send and the atomics (verbs.go, server_verbs.go). The owner
// writes a write-imm's bytes as a WRITE's and then, once they are in
// place, hands the event to the manager's inbox (backend.InboxUser); the
// answer carries the inbox's refusal (no subscriber, a full queue), which
// the initiator's operation fails with. A send takes the receive buffer
// the inbox hands out (Inbox.Recv), or is refused and drained; its payload
// is read straight into that buffer, then delivered. A write-imm or send
// ends with a trailer byte: a payload cut short by a cancel or deadline
// (sent on as zeros, as for a WRITE) ends with "abort", and the owner then
// delivers nothing (the buffer of a send goes back to the front of the
// receive queue). Compare-swap and fetch-add run on the owner's memory
// with the processor's atomic instructions (internal/word), so the owner's
// own sync/atomic on the word agrees; a word whose address is not 8-byte
// aligned is refused with MISALIGNED.
//
// Ordering: write-imms and sends of one route go on one connection, the
// lane (the route's first), in posting order, and the owner serves a
// connection in order: their events and messages come in posting order.
// A write-imm larger than a chunk is sent as plain WRITEs on the lane and
// a last write-imm frame that names the whole range; the event comes after
// all of it (a cancel of it delivers no event). Plain Puts, Gets and the
// atomics are spread over the route's connections (chunks round-robin,
// small operations in runs; a posted list to the least loaded connection,
// a long one in shares that even the loads: postlist.go); the fence (fence.go)
// keeps RC's order anyway: a write-imm or send posted while WRITEs or
// atomics posted before it are in flight is held (Post does not wait for
// them) and queued on the lane once they are answered, so its event or
// message comes after their bytes. A held notice that is cancelled or
// passes its deadline completes at once with nothing sent; one behind a
// WRITE that fails is still sent, after that failure is reported. An
// atomic is not held behind earlier WRITEs (it may overtake them: wait for
// their completion), nor a Get. A send is one frame: at most MaxFrameLen
// bytes (ErrLimit at Post).
//
// The listener survives a hostile network (server_accept.go): Accept
// errors such as EMFILE are retried with a backoff; connections that have
// not finished the hello have their own caps (in all and per source
// address) and a short timeout, and never take an authenticated slot.
// Authenticated connections and pending route tokens are capped per peer
// manager (MaxConnsPerPeer, MaxTokensPerPeer); a full table makes room for
// a peer holding fewer at the expense of the peer holding the most; tokens
// expire after TokenTTL, and a connection silent for IdleTimeout (no
// request, no heartbeat ping) is closed (up to IdleTimeout/8 + 1 ms later: the
// idle read deadline is moved only when it is that old, late.go). A listener that fails for good
// shows in Addr and Listener.
//
// Leases and revocation cut in-flight work (server_frames.go): a WRITE's
// payload is read only while remote access to its region holds. A
// revocation, a release (memreg.Cutter) or the end of the lease wakes a
// connection stalled mid-payload; the rest of the payload goes to a sink
// and the requester hears REVOKED, RELEASED or LEASE_EXPIRED, so neither
// waits out the frame timeout. One region's cut ends that region's
// operations alone (server_batch.go): a READ answer still waiting in a
// batch when its region is cut goes out as the cut's code with no payload,
// beside its neighbours (refuseCutLocked); one whose payload is being written
// gets cutGrace for the peer to take that payload, and once it is out the
// rest of the batch goes on (cutLeft) and the reference goes; only a peer
// that holds the cut bytes back past cutGrace has its connection closed
// (over data-plane TLS too: TLS writes to the socket through rawConn,
// tls_writer.go, which keeps the rest of a record the grace interrupts, so
// the record layer stays whole). A
// batch that holds READ references goes out before the server reads from
// the socket (answerFirst), so none waits on the peer's next bytes. A
// wrong key and an unknown region get one code (backend.RemoteCode).
//
// Host agents (via.go, issue 26). A request may name a process attached
// to the server's host agent: its via (request bytes 2:4, the process's
// slot at the agent; backend.WorkRequest.Via) and, on a write-imm or a
// send, the origin (the manager the initiating agent posted it for;
// WorkRequest.Origin). Only an agent's server, given an agentapi.Resolver
// through wiring.SetResolver, serves them: it resolves (via, region, key)
// to a proxy region of its own registry over the process's memory, then
// serves the frame on it exactly as on its own regions (AcquireRemote,
// cuts, sinks, no extra copy), and hands events and messages to the
// process's inbox (Resolver.Inbox(via)) naming the origin as their Peer
// (the connection's peer without one). A refusal of the resolver answers
// that request with its code (RELEASED for a wrong key, PEER_GONE for a
// slot with no process, ...) and the connection serves on. A server
// without a resolver answers a request with a via or an origin
// NOT_SUPPORTED, and an agent one with an origin but no via, or with an
// origin on a connection whose route is not another agent's (the route
// handshake says so: a backend with a resolver marks the routes it sets
// up; every peer proves the deployment's secret, so this keeps a
// process's own routes from naming another manager as the sender, not a
// peer that holds the secret and lies); the connection serves on. An
// agent answering another agent's route handshake says it is one too (a
// bit of its route answer: route FarIsAgent, agentapi.FarAgent), so an
// agent can drop a route to an address that is no agent. A connection keeps its last resolution and reuses
// it while the proxy admits the request, so a run of frames for one
// region resolves once and allocates nothing: an agent ends a process's
// access by revoking or releasing the proxy, never by refusing Resolve
// alone. Resolve runs on the connection's goroutine, so a slow one (first
// use of a region maps it from the process) stalls that connection and
// everything queued behind it on that connection: each call is bounded
// by a context that ends within agentapi.ResolveTimeout (7 s) or when the
// backend closes, and the batch of answers is flushed first, so no READ
// reference waits on it; while it waits, the connection answers the
// initiator's heartbeat with a ping answer every HeartbeatInterval
// (via_keep.go), so one stuck process does not fail the route, and every
// other process's operations on it, past the initiator's PeerTimeout. The fence holds unchanged: it is route-wide on
// the initiator and a WRITE is answered only once its bytes are in the
// process's memory, so a notice for a process comes after every WRITE
// posted before it on the route (to any process at that agent). An
// agent's inbox that answers later (agentapi.AsyncInbox, AsyncLanding:
// its process answers over its own shm route) does not hold up the
// connection: the server answers that write-imm or send when the inbox
// gives the answer (late.go: queued, sent with the next batch, waking a
// connection that waits for a request) and serves the next frames
// meanwhile; the initiator matches answers by id, so one may overtake
// another. A notice's answer still comes only after its process took it.
//
// Device memory (stage.go, issue 27). A WRITE or READ of the peer's own
// memory (no via, no origin) may name a device region (a GPU buffer,
// memreg.AllocateAt: memreg.AcquireRemoteAny): the server stages its
// payload through two pinned host buffers (cuda.Stager, 256 KiB each,
// reused per device context: 0 allocations per operation; at most 32
// pairs out over the backend, 16 MiB pinned, and 4 idle per context: a
// device operation that finds none free within 100 ms (FrameTimeout if
// shorter) is refused with RESOURCE_EXHAUSTED, ErrLimit, its payload
// drained, the connection in step: TestStagingBounded) in a pipeline:
// a WRITE's next chunk is read from the socket while the previous one is
// copied to the device, a READ's next chunk is copied from the device
// while the current one is written. A READ of device memory flushes the
// batch before it and goes out on its own (header, then the staged
// payload, under FrameTimeout, shortened by a cut as a batch's); a device
// copy that fails after its header left ends the connection. The
// region's reference is released only once no copy runs. Write-imm,
// send and the atomics refuse device memory (NOT_SUPPORTED, through
// memreg.AcquireRemote). The initiator never gets a device buffer as its
// local memory (queuepair's local reference refuses it): staging on that
// side is not built. Tested against cudafake only (backendtest.RunDevice);
// it has not run on a GPU.
//
// With ServerTLS and ClientTLS set (--data-tls) every data connection runs
// over mutual TLS, wrapped at accept and at dial (tls.go); the hello and
// everything above it are unchanged. TLS connections, dialled and
// accepted, encrypt in the writer's goroutine, a record at a time, over a
// socket that keeps the ciphertext a deadline cut short (tls_writer.go),
// so that a deadline can interrupt a stalled write and the stream go on:
// the client's cancellation, the server's cut grace.
//
// Files, by role (as yamux): frame.go is the data frame codec (frame_ops.go
// the wire ops and their sizes) and handshake.go the wire forms of route
// setup (route info, hello); tokens.go hands out the route tokens; the
// server side is server_accept.go (accept loop, pending caps),
// server_conn.go (hello, one connection), server_frames.go (serving
// frames), server_batch.go (the batch of answers, and cuts of its
// regions), server_write.go (WRITE and READ),
// server_verbs.go (write-imm, send, atomics), stage.go (device memory),
// verbs.go (the inbox), via.go and via_keep.go (frames for a host agent's
// attached processes) and late.go (the answers such a process gives later); the
// client side is client_handshake.go (dial and hello), route.go (route
// state, striping, the lane, watchdog), fence.go (notices after earlier
// WRITEs and atomics), op.go (the op/chunk state machine), client.go,
// client_write.go and client_read.go (a connection's writer and reader)
// and cancel.go (ending one chunk early). Done, Err, Stats and work-request
// validation are shared with the other backends (backend/internal/routestate).
//
// Shutdown order: Close closes the listener and every connection, then waits
// for the accept loop, the connection goroutines and the watchdogs. A work
// request is completed only after neither the reader nor the writer of its
// connection can touch its local memory any more.
package tcp
