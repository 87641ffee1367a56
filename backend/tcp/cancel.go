package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
)

// Cancellation and deadlines end one operation's chunks without touching
// the route: a chunk not yet on the wire (queued) or waiting for its
// response (sent) is abandoned at once: its response, if one comes, is
// read into a sink. A chunk whose memory a loop is using right now
// (receiving: the reader reads its payload into the region; sending: the
// writer's writev reads it) is interrupted: the canceller marks it and
// sets the socket's deadline to now, which ends the blocked syscall; the
// loop then ends the chunk itself, after its last touch of the memory (the
// reader drains the rest of the payload into a sink, the writer sends
// zeros in place of the rest of the payload, so the frame stays whole and
// the connection keeps serving its other chunks). Both sides set and clear
// the deadline under clientConn.mu, and only while the chunk is in that
// state, so no other chunk ever sees it.

// errCanceledWait ends Post's wait for room when the poster's context ends.
var errCanceledWait = fmt.Errorf("canceled: %w", context.Canceled)

// A cancel that comes while its request is being posted (RequestCancel,
// then Cancel, racing with Post) is not lost and is never carried out
// late: whichever of Cancel's scan (under clientConn.mu, and fence.mu) and
// the queueing of a chunk (enqueue under clientConn.mu; fenceHold under
// fence.mu) comes second ends the chunk. Nothing cancels a request after
// its chunks are queued but Cancel itself: the request may have completed
// and been posted again by then (a reusable WorkRequest), and a late
// cancel would end that new post (one operation's failure never fails
// another).

// Test hooks: testHookQueued runs once a post's chunks are queued (Post,
// PostList, the fence's releaser); testHookLateCancel runs in Cancel
// between its read of the cause and its scan. Both widen the windows in
// which the operation completes and its WorkRequest is posted again.
var testHookQueued func(wr *backend.WorkRequest)
var testHookLateCancel func()

// Cancel implements backend.Route.
func (r *route) Cancel(wr *backend.WorkRequest) {
	cause := wr.CancelCause()
	if cause == nil {
		return
	}
	err := routestate.OpError("tcp", wr, cause)
	if testHookLateCancel != nil {
		testHookLateCancel()
	}
	if r.fenceCancel(wr, err) { // fence.go: a notice not queued yet
		return
	}
	for _, cc := range r.conns {
		cc.endChunks(func(c *chunk) error {
			if c.op.wr == wr {
				return err
			}
			return nil
		})
	}
}

// endChunks ends every chunk held by cc for which why returns an error.
func (cc *clientConn) endChunks(why func(*chunk) error) {
	var ended []*chunk
	touched := false
	now := time.Now()
	cc.mu.Lock()
	for _, c := range cc.slots.chunks {
		if c == nil || c.state == stAbandoned || c.interrupted {
			continue
		}
		err := why(c)
		if err == nil {
			continue
		}
		c.cause = err
		switch c.state {
		case stQueued:
			c.state = stAbandoned // the writer skips it
			cc.slots.del(c.id)
			ended = append(ended, c)
		case stSent:
			c.state = stAbandoned // kept: its response is read and dropped
			ended = append(ended, c)
		case stReceiving:
			c.interrupted = true
			c.stop.Store(true)
			_ = cc.c.SetReadDeadline(now)
		case stSending, stAnswered:
			c.interrupted = true
			_ = cc.c.SetWriteDeadline(now)
		}
		touched = true
	}
	if touched {
		// drive.go: an abandoned answer is the reader goroutine's to
		// drain; a driving waiter looks again at what it waits for.
		cc.unparkLocked()
		cc.interruptLocked()
	}
	cc.mu.Unlock()
	for _, c := range ended {
		c.finish(c.cause)
	}
}

// readPayload reads a READ response's payload into c.local, or, once c is
// interrupted, the rest of it into a sink; it ends c either way. A non-nil
// error is the connection's (c is then left receiving, for drain).
func (cc *clientConn) readPayload(br *connReader, c *chunk) error {
	got := 0
	bulk := len(c.local) >= bulkMin
	for got < len(c.local) && !c.stop.Load() {
		var n int
		var err error
		if bulk {
			n, err = br.ReadBulk(c.local[got:])
		} else {
			n, err = br.Read(c.local[got:])
		}
		got += n
		if err != nil && !(isTimeout(err) && c.stop.Load()) {
			return err
		}
	}
	cc.mu.Lock()
	cc.slots.del(c.id)
	if c.interrupted {
		_ = cc.c.SetReadDeadline(time.Time{})
	}
	cause := c.cause
	if got == len(c.local) {
		cause = nil // every byte landed before the cancel took effect
	}
	c.state = stAbandoned
	rest := int64(len(c.local) - got)
	cc.mu.Unlock()
	c.finish(cause) // no byte of c touches c.local after this; c may be reused
	if rest > 0 {
		if _, err := io.CopyN(io.Discard, br, rest); err != nil {
			return err
		}
	}
	return nil
}

// unloan is called by the writer when writev was interrupted: the
// unwritten payload of every interrupted chunk of the batch is replaced by
// zeros and the chunk is ended. It reports whether the writer should go on
// writing the rest of the batch (false: the timeout was not ours).
func (cc *clientConn) unloan() bool {
	var ended []*chunk
	cc.mu.Lock()
	for _, c := range cc.sending {
		if !c.interrupted || (c.state != stSending && c.state != stAnswered) {
			continue
		}
		// Its own buffer by index (what was written went from the
		// front): another chunk's payload from the same memory ends at
		// the same address and must go out as it is.
		if i := c.iovAt - (cc.iovLen - len(cc.iov)); i >= 0 {
			cc.iov[i] = zeros(len(cc.iov[i]))
		}
		// A write-imm or send cut short must deliver nothing: its trailer
		// (in iov still, unless it went out already) says so.
		c.trailer[0] = trailerAbort
		if c.state == stAnswered {
			cc.slots.del(c.id) // its response came already
		} // else its response is still to come and be dropped
		// Abandoned either way: markSent, which still sees the chunk in
		// cc.sending, must not end it a second time.
		c.state = stAbandoned
		ended = append(ended, c)
	}
	if len(ended) > 0 {
		_ = cc.c.SetWriteDeadline(time.Time{})
	}
	cc.mu.Unlock()
	for _, c := range ended {
		c.finish(c.cause)
	}
	return len(ended) > 0
}

// zeroPage backs the zeros sent in place of a cancelled WRITE's payload.
var zeroPage [64 << 10]byte

// zeros returns n zero bytes: one slice of a shared page when it is big
// enough, else a fresh one (a cancelled write of a large chunk, rare).
func zeros(n int) []byte {
	if n <= len(zeroPage) {
		return zeroPage[:n:n]
	}
	return make([]byte, n)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
