// Package tcp is the pure-Go data plane: one-sided WRITE and READ between
// registered regions of two managers over plain TCP.
//
// Each manager runs one data listener. A route is set up by the actors'
// handshake: the responder hands the initiator its data address and one
// single-use token per connection; the initiator dials and proves each
// connection with its token before any frame is read. A route has N
// connections; operations larger than the chunk size are split and striped
// over them and complete when the last chunk lands.
//
// Wire format (frame.go): a fixed 48-byte request header, followed for WRITE
// by its payload; a fixed 16-byte response header, followed for a successful
// READ by its payload. WRITE payload is read from the socket straight into
// the target region; READ payload is written from the region straight to the
// socket with writev and read straight into the requester's memory. Every
// header field is validated: a malformed header closes the connection, a
// request that fails the key, access or bounds check is answered with its
// error code and changes nothing.
//
// The listener survives a hostile network (server_accept.go): Accept
// errors such as EMFILE are retried with a backoff; connections that have
// not finished the hello have their own caps (in all and per source
// address) and a short timeout, and never take an authenticated slot. A
// listener that fails for good shows in Addr and Listener.
//
// Leases and revocation cut in-flight work (server_frames.go): a WRITE's
// payload is read only while remote access to its region holds. A
// revocation, a release (memreg.Cutter) or the end of the lease wakes a
// connection stalled mid-payload; the rest of the payload goes to a sink
// and the requester hears REVOKED, RELEASED or LEASE_EXPIRED, so neither
// waits out the frame timeout. A wrong key and an unknown region get one
// code (backend.RemoteCode).
//
// With ServerTLS and ClientTLS set (--data-tls) every data connection runs
// over mutual TLS, wrapped at accept and at dial (tls.go); the hello and
// everything above it are unchanged. Dialled TLS connections write through
// a bounded buffer so that cancellation can still interrupt a stalled write
// (tls_writer.go).
//
// Files, by role (as yamux): frame.go is the data frame codec and
// handshake.go the wire forms of route setup (route info, hello); tokens.go
// hands out the route tokens; the server side is server_accept.go (accept
// loop, pending caps), server_conn.go (hello, one connection) and
// server_frames.go (serving frames, batched responses); the client side is
// client_handshake.go (dial and hello), route.go (route state, striping,
// watchdog), op.go (the op/chunk state machine), client.go,
// client_write.go and client_read.go (a connection's writer and reader)
// and cancel.go (ending one chunk early). Done, Err, Stats and work-request
// validation are shared with the other backends (backend/internal/routestate).
//
// Shutdown order: Close closes the listener and every connection, then waits
// for the accept loop, the connection goroutines and the watchdogs. A work
// request is completed only after neither the reader nor the writer of its
// connection can touch its local memory any more.
package tcp
