package tcp

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
)

// The initiator's connections. Each connection of a route runs a writer
// (client_write.go) and a reader (client_read.go); the chunks they carry
// move through the states of op.go, and cancel.go ends them early.

const (
	// maxWriteBatch bounds the frames a writer gathers into one writev.
	maxWriteBatch = 64
	maxBatchBytes = 4 << 20

	// A batch's headers, and the WRITE payloads of at most stageCopyMax
	// bytes while stageCopyBudget lasts, are copied one after another
	// into the connection's stage, so a run of small frames is one
	// buffer of the writev, not two per frame: the kernel's cost per
	// buffer exceeded the copy up to about 1 KiB (32 frames of 64 B:
	// 9.4 µs as 64 buffers, 5.7 µs as one, loopback, one core; 48 B
	// headers alone: 8.6 against 4.2 µs). A larger payload is written
	// from its region in place.
	stageCopyMax    = 512
	stageCopyBudget = 8 << 10

	// yieldInFlight is the number of operations in flight on a route from
	// which the writer yields before gathering a batch: with many posters
	// the batch grows (fewer syscalls); with few, the yield only adds a
	// round of scheduling.
	yieldInFlight = 8

	// sendQueue bounds the heartbeat pings a connection's ring takes
	// (the route's in-flight room bounds the chunks).
	sendQueue = 128

	// A small frame posted while at least wireLow of the connection's
	// frames are on the wire unanswered does not wake a sleeping writer
	// until wakeFrames are queued or the reader takes in answers (which
	// wakes the writer when frames wait): the answers to come keep the
	// connection busy meanwhile, and the writer then sends many frames
	// with one writev, as a plain pipeline flushes before it waits. A
	// frame with more than coalesceMax bytes wakes the writer at once.
	wireLow     = 16
	wakeFrames  = 16
	coalesceMax = 2 << 10
	// smallRun is the number of single-chunk ops of at most coalesceMax
	// bytes posted on one connection before the next takes over.
	smallRun = 32

	// inlineMax is the most a poster writes itself (client_write.go), and
	// the most written and unanswered on the connection when it does: a
	// larger ring goes to the writer goroutine, so Post does not wait for
	// many bytes, nor for a peer that does not read.
	inlineMax = 64 << 10
)

// clientConn is one connection of a route: a writer and a reader goroutine.
//
// Posters put chunks on the connection's submission ring (pend) under mu,
// in posting order; the writer drains it in batches, one writev each. A
// poster wakes the writer only when it sleeps: one wake-up per batch.
type clientConn struct {
	r *route
	c net.Conn

	heard atomic.Uint64 // responses read; the heartbeat watches it move
	// lastHeard and lastHeardAt are owned by the watchdog.
	lastHeard   uint64
	lastHeardAt time.Time

	mu    sync.Mutex // guards slots, pend, sleeping, failing and chunk states
	slots slotTable
	pend  []*chunk // the submission ring: queued chunks, in posting order
	// pendBytes bounds the bytes of the frames on pend (frameBytes; a
	// poster writes the ring itself only while it is at most inlineMax).
	pendBytes int
	failing   bool
	// sleeping says the writer waits on wake for work; the poster that
	// finds it so clears it and sends the one wake-up.
	sleeping bool
	wake     chan struct{}

	// The read role (drive.go), under mu: who reads the connection; the
	// operation a parked role is lent to (lentTo mirrors lent for Drive's
	// lock-free look) and its chunk's id; pings written or queued and
	// not yet answered; a driving waiter's ctx, whether its read was
	// interrupted (a deadline of now) and whether a read deadline is set
	// for it (to clear when it hands the role back); parkGen moves on at
	// each park and lend, parkSeen is its value at the watchdog's last
	// tick; drove counts the operations their own waiters read.
	role     int
	lent     *backend.WorkRequest
	lentTo   atomic.Pointer[backend.WorkRequest]
	lentID   uint64
	rwake    chan struct{} // wakes the reader goroutine when its parked role is back
	pings    int
	drvCtx   context.Context
	drvInt   bool
	drvDl    bool
	drove    uint64
	parkGen  uint64
	parkSeen uint64

	// Whoever holds the read role uses these: the buffered reader, a
	// batch of headers and the chunks it ends.
	br   *connReader
	hb   [respMaxSize]byte
	hs   [maxReadBatch]respHeader
	done doneBatch

	// wmu is held by whoever writes: the writer goroutine, or a poster
	// writing its own small frame (client_write.go). It guards the
	// writer scratch below. A writer takes chunks off pend only while it
	// holds wmu, so frames go out in posting order.
	wmu     sync.Mutex
	inlined atomic.Uint64 // frames written by a poster (tests read it)
	writevs atomic.Uint64 // batches written (benchmarks read it)

	// writer scratch, under wmu
	stage  stage
	iov    net.Buffers // the batch; WriteTo consumes it from the front
	iovLen int         // len(iov) as gathered: a chunk's iovAt less what went is its index now
	iovBuf net.Buffers // iov's backing array, kept across batches
	// sending holds the WRITE chunks of the batch being written. They stay
	// live until markSent: their answer waits for it (stAnswered), and the
	// watchdog treats them as stuck rather than completing them.
	sending []*chunk
}

func newClientConn(r *route, c net.Conn) *clientConn {
	return &clientConn{r: r, c: c, wake: make(chan struct{}, 1), rwake: make(chan struct{}, 1),
		br: newConnReader(c), lastHeardAt: time.Now()}
}

// enqueue gives each chunk of the chain head (linked by next) an id and
// puts the chain on the ring under one lock; on a connection that is
// failing it finishes them with the route's error. When the ring is to be
// written now (a chain, a large frame, few frames on the wire: see
// wireLow) and nobody writes the connection, the poster writes the ring
// itself (writeInline): no wake-up of the writer goroutine, whose hand-off
// costs a cross-core round trip where goroutines run on several cores.
// Otherwise it wakes the writer at most once, or (small frames behind many
// on the wire) lets them wait for company. Where the connection's read
// role is parked (drive.go), lend says the chain's poster is the one to
// wait for it (not the fence's releaser, whose waiter may be waiting
// already), so a single chunk posted Waited is lent the role.
func (cc *clientConn) enqueue(head *chunk, lend bool) {
	cc.mu.Lock()
	if cc.failing {
		cc.mu.Unlock()
		err := cc.r.Err()
		for c := head; c != nil; {
			next := c.next
			c.next = nil
			c.finish(err)
			c = next
		}
		return
	}
	// A chain is a batch already (PostList): it goes now, as a plain
	// pipeline flushes once its poster has nothing more to add.
	now := head.next != nil
	var canceled *chunk // chained by next: ended once mu is let go
	var last *chunk     // the last chunk queued, and how many were
	queued := 0
	for c := head; c != nil; {
		next := c.next
		c.next = nil
		if c.op.wr.CancelCause() != nil {
			// Cancelled while it was being posted: its canceller's
			// scan (Cancel, under mu) came before this, so it is ended
			// here, never queued. Checked under mu, this leaves no late
			// cancel to the poster, which could find the request
			// completed and posted again by then (cancel.go).
			c.next, canceled = canceled, c
			c = next
			continue
		}
		now = now || len(c.local) > coalesceMax
		c.id = cc.slots.put(c)
		c.state = stQueued
		cc.pend = append(cc.pend, c)
		cc.pendBytes += frameBytes(c)
		last = c
		queued++
		c = next
	}
	if cc.role == roleParked && queued > 0 {
		cc.lendLocked(last, lend && queued == 1) // drive.go: to a waiter, or back to the reader
	}
	if len(cc.pend) > 0 && (now || len(cc.pend) >= wakeFrames || int(cc.slots.held.Load())-len(cc.pend) < wireLow) {
		if cc.pendBytes <= inlineMax && cc.slots.wire <= inlineMax && cc.wmu.TryLock() {
			// No writer at work: later posters queue behind these
			// frames, since a writer needs wmu to take them.
			cc.mu.Unlock()
			cc.writeInline()
			if canceled != nil {
				endCanceled(canceled)
			}
			return
		}
		cc.kickLocked() // a writer at work takes them after its batch
	}
	cc.mu.Unlock()
	if canceled != nil {
		endCanceled(canceled)
	}
}

// endCanceled ends the chain of chunks enqueue found cancelled, each with
// its request's cause, as Cancel would have.
func endCanceled(head *chunk) {
	for c := head; c != nil; {
		next := c.next
		c.next = nil
		wr := c.op.wr
		c.finish(routestate.OpError("tcp", wr, wr.CancelCause()))
		c = next
	}
}

// kickLocked wakes the writer if it sleeps; called with mu held.
func (cc *clientConn) kickLocked() {
	if cc.sleeping {
		cc.sleeping = false
		select {
		case cc.wake <- struct{}{}:
		default:
		}
	}
}

// push queues a frame for the writer unless the ring holds sendQueue
// already, and reports whether it did.
func (cc *clientConn) push(c *chunk) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.failing || len(cc.pend) >= sendQueue {
		return false
	}
	cc.pend = append(cc.pend, c)
	cc.pendBytes += frameBytes(c)
	if c == pingChunk {
		cc.pings++
	}
	cc.unparkLocked() // drive.go: its answer is to be read
	cc.kickLocked()
	return true
}

// expire ends chunks past their deadline with ErrDeadline, as a cancel
// does: only those chunks, never the route.
func (cc *clientConn) expire(now time.Time) {
	cc.endChunks(func(c *chunk) error {
		if c.deadline.IsZero() || !now.After(c.deadline) {
			return nil
		}
		return fmt.Errorf("tcp: %s of %d bytes: %w", c.op.wr.Op, len(c.local), rdmamgr.ErrDeadline)
	})
}

// failAll fails every chunk still held; called after both loops exited.
// It holds wmu meanwhile: a poster writing its own frame (writeInline,
// which may have checked the route before it failed) lets go of its chunk
// first, so no chunk is reported while a writer still reads its memory.
func (cc *clientConn) failAll(err error) {
	if err == nil {
		err = rdmamgr.ErrClosed
	}
	cc.wmu.Lock()
	cc.mu.Lock()
	cc.failing = true
	var left []*chunk
	for _, c := range cc.slots.chunks {
		if c == nil {
			continue
		}
		cc.slots.del(c.id)
		if c.state != stAbandoned {
			left = append(left, c)
		}
	}
	// Chunks on the ring were in slots too; drop the ring.
	clear(cc.pend)
	cc.pend = cc.pend[:0]
	cc.pendBytes = 0
	cc.mu.Unlock()
	cc.wmu.Unlock()
	for _, c := range left {
		c.finish(err)
	}
}
